"""`voxgate-transcribe`: stream a WAV or raw audio file (or stdin) to voxgate.

The argument set and behaviour are exposed as `add_transcribe_arguments` and
`run_transcribe` so the server package's `voxgate transcribe` subcommand is
the very same command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import grpc

from .audio import chunk_bytes, chunks, encode, read_wav, read_wav_channels
from .client import SpeechClient
from .config import Phrase, StreamConfig
from .encodings import ENCODINGS, Encoding, bytes_per_sample
from .interrupt import Interrupt
from .responses import error_details, format_error, response_to_dict
from .security import DEFAULT_ADDRESS, Connection, add_connection_arguments, connection_from_args

__all__ = ["DEFAULT_SERVER", "add_transcribe_arguments", "build_parser", "main", "run_transcribe"]

DEFAULT_SERVER = DEFAULT_ADDRESS
_WAV_HEADER_BYTES = 12  # "RIFF" <size> "WAVE"


class UsageError(Exception):
    """Bad arguments or input: reported like an argparse error (exit status 2)."""


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def add_transcribe_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the transcribe command's arguments to `parser`."""
    parser.epilog = (
        "Ctrl-C stops the audio: the server finalizes what was sent and ends the session; its "
        "finals are printed and the exit status is 130. A second Ctrl-C aborts at once."
    )
    parser.add_argument("file", metavar="FILE|-", help="WAV or raw audio file; '-' for stdin")
    parser.add_argument(
        "--server", default=DEFAULT_SERVER, metavar="HOST:PORT", help="default: %(default)s"
    )
    parser.add_argument(
        "--encoding",
        type=str.lower,
        choices=ENCODINGS,
        default="linear16",
        help="encoding sent to the server (WAV input is encoded to it; raw input "
        "must already be in it); default: %(default)s",
    )
    parser.add_argument(
        "--sample-rate",
        type=_positive(int),
        metavar="HZ",
        help="sample rate of raw input (WAV files give their own)",
    )
    pacing = parser.add_mutually_exclusive_group()
    pacing.add_argument(
        "--no-pace", action="store_true", help="send audio as fast as possible, not in real time"
    )
    pacing.add_argument(
        "--speed",
        type=_positive(float),
        default=1.0,
        metavar="N",
        help="send at N x real time (default: %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print every response as one JSON object per line"
    )
    parser.add_argument(
        "--chunk-ms",
        type=_positive(int),
        default=100,
        metavar="MS",
        help="audio per request (default: %(default)s)",
    )
    parser.add_argument(
        "--no-resume",
        action="store_true",
        help="one connection: a dropped connection ends the command with its error (default: "
        "reconnect and resume; a session lost with its server process goes on in a new one)",
    )
    parser.add_argument("--language", default="", metavar="CODE", help="BCP-47 hint, e.g. en-US")
    parser.add_argument("--words", action="store_true", help="request per-word time offsets")
    parser.add_argument(
        "--phrase",
        action="append",
        default=[],
        type=Phrase.parse,
        metavar="TEXT[:BOOST]",
        help="a phrase hint: a name, product or term to favour, with its boost "
        "(e.g. 'Siobhan Kowalczyk:15'; default boost: the server's); repeatable",
    )
    parser.add_argument(
        "--phrases-file",
        metavar="FILE",
        help="phrase hints, one TEXT[:BOOST] per line (blank lines and #-comments skipped)",
    )
    parser.add_argument("--no-interim", action="store_true", help="final results only")
    parser.add_argument(
        "--non-speech",
        action="store_true",
        help="also report where music starts and ends and which DTMF keys are pressed, "
        "beside the transcript",
    )
    parser.add_argument(
        "--channels",
        choices=("separate", "mix"),
        help="a multichannel WAV: send its channels and have each recognized on its own "
        "(finals prefixed [chN]), or mixed into one by the server "
        "(default: mixed here, sent as mono)",
    )
    # The session's limits: unset (0), each is the server's.
    for flag, kind, metavar, what in (
        ("--endpointing-silence-ms", int, "MS", "silence after speech that ends an utterance"),
        ("--max-duration", float, "S", "end the session after S seconds of audio"),
        ("--idle-timeout", float, "S", "end the session after S seconds without a request"),
    ):
        parser.add_argument(
            flag,
            type=_positive(kind),
            default=kind(0),
            metavar=metavar,
            help=f"{what} (default: the server's)",
        )
    add_connection_arguments(parser)
    parser.set_defaults(transcribe_prog=parser.prog)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxgate-transcribe",
        description="Stream an audio file to a voxgate server and print the transcript.",
    )
    add_transcribe_arguments(parser)
    return parser


@dataclass(frozen=True)
class _Input:
    sample_rate: int
    chunks: Iterator[bytes]
    channels: int = 1


def _raw_chunks(stream: BinaryIO, head: bytes, size: int, sample_bytes: int) -> Iterator[bytes]:
    # Read chunk by chunk, not all at once, so a live pipe on stdin works.
    buf = head
    while True:
        while len(buf) < size and (more := stream.read(size - len(buf))):
            buf += more
        if len(buf) >= size:
            yield buf[:size]
            buf = buf[size:]
            continue
        whole = len(buf) - len(buf) % sample_bytes
        if whole:
            yield buf[:whole]
        if whole != len(buf):  # the server rejects partial samples
            print(f"warning: dropped {len(buf) - whole} trailing byte(s)", file=sys.stderr)
        return


def _open_input(args: argparse.Namespace, stream: BinaryIO) -> _Input:
    encoding: Encoding = args.encoding
    head = stream.read(_WAV_HEADER_BYTES)
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        data = head + stream.read()
        try:
            audio = read_wav(data)
        except ValueError as e:
            raise UsageError(f"{args.file}: {e}") from None
        if args.sample_rate is not None and args.sample_rate != audio.sample_rate:
            raise UsageError(
                f"--sample-rate {args.sample_rate} does not match the WAV file's "
                f"{audio.sample_rate} Hz (it applies to raw input only; no resampling is done)"
            )
        size = chunk_bytes(encoding, audio.sample_rate, args.chunk_ms)
        if args.channels:  # the WAV's own channels, interleaved, in whole frames per request
            frames, _ = read_wav_channels(data)
            n = frames.shape[1]
            interleaved = encode(frames.reshape(-1), encoding)
            return _Input(audio.sample_rate, chunks(interleaved, size * n), n)
        return _Input(audio.sample_rate, chunks(encode(audio.samples, encoding), size))
    if args.channels:
        raise UsageError(f"{args.file}: --channels applies to WAV input (raw input is mono)")
    if args.sample_rate is None:
        raise UsageError(
            f"{args.file}: no WAV header, so raw {encoding} audio is assumed and "
            "--sample-rate is required"
        )
    size = chunk_bytes(encoding, args.sample_rate, args.chunk_ms)
    return _Input(args.sample_rate, _raw_chunks(stream, head, size, bytes_per_sample(encoding)))


def _channel(fields: dict[str, Any]) -> str:
    """ "[ch2] " for a result of separate recognition per channel; "" otherwise."""
    return f"[ch{fields['channel']}] " if fields.get("channel") else ""


# The non-speech events as the text output says them (--non-speech).
SAID = {"music_started": "music started", "music_ended": "music ended", "dtmf": "DTMF {digit}"}


class _Printer:
    """Renders responses: JSON lines, a live line on a terminal, or finals only."""

    def __init__(self, out: TextIO, *, as_json: bool) -> None:
        self._out = out
        self._json = as_json
        self._live = not as_json and out.isatty()
        self._pending = False  # an interim line is on screen

    def _clear(self) -> None:
        if self._pending:
            self._out.write("\r\x1b[K")
            self._pending = False

    def response(self, fields: dict[str, Any]) -> None:
        if self._json:
            self.json_line(fields)
            return
        kind = fields["type"]
        if kind == "result" and fields["is_final"]:
            self._clear()
            if fields["text"].strip():
                start, end, text = fields["start_s"], fields["end_s"], fields["text"].strip()
                self._out.write(f"{_channel(fields)}[{start:.2f}s → {end:.2f}s] {text}\n")
        elif kind == "result" and self._live:
            width = shutil.get_terminal_size().columns - 1
            line = _channel(fields) + fields["text"].strip()
            self._out.write("\r\x1b[K" + line[-width:])  # tail: no wrapping
            self._pending = True
        elif kind == "speech_event" and fields["event"] in SAID:
            self._clear()
            said = SAID[fields["event"]].format(digit=fields.get("digit", ""))
            self._out.write(f"{_channel(fields)}[{fields['offset_s']:.2f}s] ({said})\n")
        elif kind == "warning":
            self._note(f"warning: {fields['code']}: {fields['message']}")
        elif kind == "ended" and fields["reason"] != "client_end":
            detail = f": {fields['message']}" if fields["message"] else ""
            self._note(f"session ended: {fields['reason']}{detail}")
        self._out.flush()

    def json_line(self, fields: dict[str, Any]) -> None:
        self._out.write(json.dumps(fields, ensure_ascii=False) + "\n")
        self._out.flush()  # consumers read line by line as results arrive

    def _note(self, text: str) -> None:
        self._clear()
        self._out.flush()
        print(text, file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self._pending:  # keep the last interim text visible
            self._out.write("\n")
            self._pending = False
        self._out.flush()


def _phrases_file(path: str | None) -> list[Phrase]:
    """The phrase hints of --phrases-file: one TEXT[:BOOST] per line."""
    if path is None:
        return []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read --phrases-file {path}: {exc}") from exc
    kept = (line.strip() for line in lines)
    return [Phrase.parse(line) for line in kept if line and not line.startswith("#")]


def _stream(
    args: argparse.Namespace,
    source: _Input,
    printer: _Printer,
    connection: Connection,
    interrupt: Interrupt,
) -> None:
    config = StreamConfig(
        encoding=args.encoding,
        sample_rate_hz=source.sample_rate,
        language_code=args.language,
        interim_results=not args.no_interim,
        word_time_offsets=args.words,
        endpointing_silence_ms=args.endpointing_silence_ms,
        max_duration_s=args.max_duration,
        idle_timeout_s=args.idle_timeout,
        channels=source.channels,
        channel_mode="downmix" if args.channels == "mix" else "separate",
        phrases=args.phrases,
        non_speech_events=args.non_speech,
    )
    pace = None if args.no_pace else args.speed
    with SpeechClient(
        args.server, credentials=connection.credentials, channel_options=connection.channel_options
    ) as client:
        responses = client.stream(
            config,
            interrupt.audio(source.chunks),
            pace=pace,
            metadata=connection.metadata,
            resume=not args.no_resume,
        )
        try:
            for response in responses:
                if not response.HasField("flow_status"):  # resume's acknowledgements: not asked for
                    printer.response(response_to_dict(response))
        finally:
            # Cancel the call and let its threads go while the interpreter still runs: left
            # to interpreter shutdown, grpc's cleanup can wait forever for a lock a stopped
            # thread held.
            responses.close()


def run_transcribe(args: argparse.Namespace) -> int:
    """Run the command on parsed arguments; returns the exit status."""
    prog = getattr(args, "transcribe_prog", "voxgate-transcribe")
    printer = _Printer(sys.stdout, as_json=args.json)
    try:
        connection = connection_from_args(args)
    except (OSError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        try:
            if args.file == "-":
                stream: BinaryIO = sys.stdin.buffer
            else:
                stream = stack.enter_context(open(args.file, "rb"))
            source = _open_input(args, stream)
            args.phrases = (*_phrases_file(args.phrases_file), *args.phrase)
        except OSError as e:
            print(f"{prog}: error: cannot read {args.file}: {e.strerror or e}", file=sys.stderr)
            return 2
        except UsageError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        interrupt = stack.enter_context(
            Interrupt(f"{prog}: stopping: the server finishes what was sent (Ctrl-C to abort)")
        )
        try:
            _stream(args, source, printer, connection, interrupt)
        except grpc.RpcError as e:
            printer.finish()
            details = error_details(e)
            if args.json:
                printer.json_line({"type": "error", **details})
            print(f"{prog}: error: {format_error(details)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # a second Ctrl-C: the stream was cancelled
            printer.finish()
            print(f"{prog}: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:
            # The reader went away (e.g. `| head`); silence the flush at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
    printer.finish()
    if interrupt.requested.is_set():  # the session ended with the finals of what was sent
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse exits on errors and --help; report it as a status
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    return run_transcribe(args)


if __name__ == "__main__":
    sys.exit(main())
