"""The C++ examples (clients/cpp) against a live server.

`transcribe` on voxgate's own API, and `riva_transcribe`, which drives the Riva endpoint the
way the FreeSWITCH Riva module (mod_nvidia_transcribe) does: one request object, config then
20 ms frames of 8 kHz LINEAR_PCM (or mu-law, as a G.711 call carries it), interim results,
responses read on their own thread.

Both are built once with clients/cpp/Makefile (Debian's libgrpc++-dev and
protobuf-compiler-grpc) into a cache keyed by the hash of what goes into them (the sources,
the protos, the compiler and library versions): $VOXGATE_CACHE_DIR, else
$XDG_CACHE_HOME/voxgate or ~/.cache/voxgate, under clients-cpp/. A cold build takes a
minute or two on two cores; a cached one nothing. Without the toolchain the tests skip with
the reason, unless VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1 (CI sets it), where they fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import riva.client
import soxr

from tests.helpers import (
    FIXTURES,
    ROOT,
    ServerProcess,
    non_speech_lines,
    read_wav_pcm,
    word_error_rate,
    write_hold_and_keys_wav,
)
from tests.integration.client_examples import TOOLCHAINS, tail, unavailable
from voxgate_client.g711 import encode_mulaw

CPP_DIR = ROOT / "clients" / "cpp"
CLIP = FIXTURES / "audio" / "go_forward.wav"
CLIP_TEXT = "go forward ten meters"
MAX_WER = 0.25  # as in test_sphinx_speech.py
# service.compat.adapter.REVISABLE_STABILITY: PocketSphinx's interims may be revised by its final
REVISABLE_STABILITY = 0.5
FINAL_LINE = re.compile(r"^\[(\d+\.\d\d)s → (\d+\.\d\d)s\] (\S.*)$")
INTERIM_PREFIX = "(interim) "
CACHE_MAX_AGE_S = 30 * 24 * 3600  # cached builds not used for this long are removed
# A cold build (up to 900 s on a loaded box) comes before the first test's own runs.
pytestmark = pytest.mark.timeout(1200)


def _cache_dir() -> Path:
    base = os.environ.get("VOXGATE_CACHE_DIR")
    if not base:
        base = str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voxgate")
    return Path(base) / "clients-cpp"


def _build_key(cxx: str) -> str:
    """What the binaries are made of: sources, protos, and the versions of the tools and libraries."""
    digest = hashlib.sha256()
    inputs = sorted(
        p
        for p in CPP_DIR.rglob("*")
        if p.is_file() and "build" not in p.relative_to(CPP_DIR).parts and p.suffix != ".md"
    )
    inputs += [
        ROOT / "proto" / "voxgate" / "v1" / "speech.proto",
        *sorted((ROOT / "proto" / "third_party" / "riva" / "proto").glob("*.proto")),
    ]
    for path in inputs:
        digest.update(f"{path.relative_to(ROOT)}\0".encode() + path.read_bytes() + b"\0")
    for cmd in (["protoc", "--version"], ["pkg-config", "--modversion", "grpc++", "protobuf"], [cxx, "--version"]):
        digest.update(subprocess.run(cmd, capture_output=True, timeout=60).stdout)
    return digest.hexdigest()[:20]


def _prune(cache: Path, keep: Path) -> None:
    now = time.time()
    for entry in cache.iterdir():
        try:
            stale = entry != keep and now - entry.stat().st_mtime > CACHE_MAX_AGE_S
        except OSError:
            continue
        if stale:
            shutil.rmtree(entry, ignore_errors=True)


@pytest.fixture(scope="session")
def cpp_bin() -> Path:
    """The directory holding the built `transcribe` and `riva_transcribe` (cached across runs)."""
    cxx = os.environ.get("CXX", "g++")
    missing = [tool for tool in ("make", cxx, "pkg-config", "protoc", "grpc_cpp_plugin") if shutil.which(tool) is None]
    if missing:
        unavailable(
            f"{', '.join(missing)} not found: the C++ examples need make, g++, pkg-config, "
            f"protobuf-compiler-grpc and libgrpc++-dev ({TOOLCHAINS})"
        )
    if subprocess.run(["pkg-config", "--exists", "grpc++", "protobuf"]).returncode != 0:
        unavailable(f"pkg-config finds no grpc++/protobuf: libgrpc++-dev is missing ({TOOLCHAINS})")
    cache = _cache_dir()
    out = cache / _build_key(cxx)
    binaries = (out / "transcribe", out / "riva_transcribe")
    if not all(b.exists() for b in binaries):
        cache.mkdir(parents=True, exist_ok=True)
        work = cache / f"{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        jobs = str(min(os.cpu_count() or 2, 8))
        proc = subprocess.run(
            ["make", "-C", str(CPP_DIR), f"-j{jobs}", f"BUILD={work}"], capture_output=True, text=True, timeout=900
        )
        if proc.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            pytest.fail(f"make -C clients/cpp failed:\n{tail(proc)}")
        for scratch in ("obj", "gen"):  # only the two binaries are kept
            shutil.rmtree(work / scratch, ignore_errors=True)
        try:
            work.rename(out)
        except OSError:  # a concurrent run got there first: use its build
            shutil.rmtree(work, ignore_errors=True)
    os.utime(out)  # in use: not pruned
    _prune(cache, out)
    assert all(b.exists() for b in binaries), f"the build left no binaries in {out}"
    return out


def _run(
    binary: Path, audio: Path, server: ServerProcess | str, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    target = server if isinstance(server, str) else server.target
    return subprocess.run(
        [str(binary), str(audio), "--server", target, *extra], capture_output=True, text=True, timeout=timeout
    )


def _finals(stdout: str) -> list[tuple[float, float, str]]:
    out = []
    for line in stdout.splitlines():
        if line.startswith(INTERIM_PREFIX):
            continue
        match = FINAL_LINE.match(line)
        assert match, f"not a final-result line: {line!r}"
        out.append((float(match.group(1)), float(match.group(2)), match.group(3)))
    return out


def _duration_s(path: Path) -> float:
    with wave.open(str(path)) as w:
        return w.getnframes() / w.getframerate()


def _write_wav(path: Path, pcm: bytes, rate: int) -> Path:
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return path


def _telephony_8k() -> np.ndarray:
    """go_forward.wav as a call carries it: resampled to 8 kHz."""
    pcm, rate = read_wav_pcm(CLIP.name)
    return soxr.resample(np.frombuffer(pcm, dtype="<i2"), rate, 8000).astype(np.int16)


# --- transcribe: voxgate.v1.Speech --------------------------------------------------------------------------


def test_transcribes_real_speech_in_real_time(cpp_bin: Path, sphinx_server: ServerProcess) -> None:
    """Paced in real time, as a live source: the transcript of go_forward.wav on PocketSphinx."""
    started = time.monotonic()
    proc = _run(cpp_bin / "transcribe", CLIP, sphinx_server)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, tail(proc)
    finals = _finals(proc.stdout)
    assert finals, f"no final result printed:\n{tail(proc)}"
    assert INTERIM_PREFIX not in proc.stdout, "interim lines only with --interim (stdout is no terminal)"
    duration = _duration_s(CLIP)
    assert elapsed >= duration * 0.9, f"{elapsed:.2f}s for {duration:.2f}s of audio: not paced"
    for start, end, _ in finals:
        assert 0 <= start < end <= duration + 0.05
    assert [s for s, _, _ in finals] == sorted(s for s, _, _ in finals)
    text = " ".join(t for _, _, t in finals)
    assert word_error_rate(CLIP_TEXT, text) <= MAX_WER, text


def test_interim_lines_come_before_their_final(cpp_bin: Path, sphinx_server: ServerProcess) -> None:
    proc = _run(cpp_bin / "transcribe", CLIP, sphinx_server, "--no-pace", "--interim")
    assert proc.returncode == 0, tail(proc)
    lines = proc.stdout.splitlines()
    interims = [line.removeprefix(INTERIM_PREFIX) for line in lines if line.startswith(INTERIM_PREFIX)]
    assert interims, f"no interim line:\n{tail(proc)}"
    assert lines[-1].startswith("["), "the utterance ends with its final"
    # one utterance: each interim only extends the one before (the final may revise them: PocketSphinx)
    assert all(b.startswith(a) for a, b in zip(interims, interims[1:], strict=False)), interims
    text = " ".join(t for _, _, t in _finals(proc.stdout))
    assert word_error_rate(CLIP_TEXT, text) <= MAX_WER, text
    assert word_error_rate(CLIP_TEXT, interims[-1]) <= MAX_WER, interims


def _mulaw_wav(path: Path, mulaw: bytes) -> Path:
    """A WAVE_FORMAT_MULAW file, as telephony recorders write them (the wave module cannot)."""
    fmt = b"".join(n.to_bytes(size, "little") for n, size in ((7, 2), (1, 2), (8000, 4), (8000, 4), (1, 2), (8, 2)))
    body = (
        b"WAVE"
        + b"fmt "
        + len(fmt).to_bytes(4, "little")
        + fmt
        + b"data"
        + len(mulaw).to_bytes(4, "little")
        + mulaw
        + b"\0" * (len(mulaw) % 2)
    )
    path.write_bytes(b"RIFF" + len(body).to_bytes(4, "little") + body)
    return path


@pytest.mark.parametrize("source", ["wav", "raw-mulaw-8k", "mulaw-wav-8k"])
def test_prints_what_the_python_cli_prints(
    cpp_bin: Path, fake_server: ServerProcess, tmp_path: Path, source: str
) -> None:
    """On the deterministic fake engine the C++ example prints the same lines as `voxgate-transcribe`."""
    path, python_path = CLIP, CLIP
    args: tuple[str, ...] = ()
    python_args: tuple[str, ...] = ()
    if source != "wav":  # 8 kHz mu-law, as a call carries it; the Python CLI reads it raw
        python_path = tmp_path / "call.ulaw"
        python_path.write_bytes(encode_mulaw(_telephony_8k()))
        python_args = args = ("--encoding", "mulaw", "--sample-rate", "8000")
        if source == "mulaw-wav-8k":
            path, args = _mulaw_wav(tmp_path / "call.wav", python_path.read_bytes()), ()
        else:
            path = python_path
    python_cli = [sys.executable, "-c", "import sys; from voxgate_client.cli import main; sys.exit(main())"]
    expected = subprocess.run(
        [*python_cli, str(python_path), "--server", fake_server.target, "--no-pace", *python_args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert expected.returncode == 0, tail(expected)
    assert _finals(expected.stdout)
    proc = _run(cpp_bin / "transcribe", path, fake_server, "--no-pace", *args)
    assert proc.returncode == 0, tail(proc)
    assert proc.stdout == expected.stdout


def test_prints_music_and_digits_as_the_python_cli_does(
    cpp_bin: Path, sphinx_server: ServerProcess, tmp_path: Path
) -> None:
    wav = write_hold_and_keys_wav(tmp_path / "hold_and_keys.wav")
    python_cli = [sys.executable, "-c", "import sys; from voxgate_client.cli import main; sys.exit(main())"]
    expected = subprocess.run(
        [*python_cli, str(wav), "--server", sphinx_server.target, "--no-pace", "--non-speech"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    proc = _run(cpp_bin / "transcribe", wav, sphinx_server, "--no-pace", "--non-speech")
    assert expected.returncode == 0 and proc.returncode == 0, tail(proc)
    assert len(non_speech_lines(expected.stdout)) == 5, expected.stdout
    assert non_speech_lines(proc.stdout) == non_speech_lines(expected.stdout)
    plain = _run(cpp_bin / "transcribe", wav, sphinx_server, "--no-pace")
    assert non_speech_lines(plain.stdout) == [], "only when asked"


def test_rpc_error_exits_1_with_the_status_and_reason(
    cpp_bin: Path, fake_server: ServerProcess, tmp_path: Path
) -> None:
    # below the 8 kHz minimum: INVALID_ARGUMENT / UNSUPPORTED_AUDIO_FORMAT
    path = _write_wav(tmp_path / "4khz.wav", b"\0\0" * 4000, 4000)
    proc = _run(cpp_bin / "transcribe", path, fake_server)
    assert proc.returncode == 1, tail(proc)
    assert proc.stdout == ""
    assert proc.stderr.startswith("transcribe: error: INVALID_ARGUMENT (UNSUPPORTED_AUDIO_FORMAT): "), proc.stderr
    assert "; config.sample_rate_hz: " in proc.stderr, "the BadRequest field violation"


def test_an_unreachable_server_isunavailable(cpp_bin: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{sock.getsockname()[1]}"
    proc = _run(cpp_bin / "transcribe", CLIP, target, timeout=60)
    assert proc.returncode == 1, tail(proc)
    assert proc.stderr.startswith("transcribe: error: UNAVAILABLE"), proc.stderr


def _raw_file(tmp: Path) -> Path:
    (tmp / "call.raw").write_bytes(b"\0" * 320)
    return tmp / "call.raw"


@pytest.mark.parametrize(
    ("make_input", "extra", "message"),
    [
        (lambda tmp: tmp / "missing.wav", (), "cannot read"),
        (_raw_file, (), "--sample-rate is required"),
        (lambda tmp: CLIP, ("--speed", "0"), "--speed must be positive"),
        (lambda tmp: CLIP, ("--encoding", "opus"), "--encoding must be"),
        (lambda tmp: CLIP, ("--bogus",), "unknown option --bogus"),
    ],
    ids=["missing", "raw-without-rate", "speed", "encoding", "unknown-option"],
)
def test_bad_usage_or_unreadable_input_exits_2(
    cpp_bin: Path, tmp_path: Path, make_input: Any, extra: tuple[str, ...], message: str
) -> None:
    proc = _run(cpp_bin / "transcribe", make_input(tmp_path), "127.0.0.1:1", *extra)
    assert proc.returncode == 2, tail(proc)
    assert message in proc.stderr and proc.stdout == ""


# --- riva_transcribe: the Riva endpoint, driven like FreeSWITCH's Riva module --------------------------------


def _riva(cpp_bin: Path, audio: Path, server: ServerProcess, *extra: str) -> list[dict[str, Any]]:
    proc = _run(cpp_bin / "riva_transcribe", audio, server, *extra)
    assert proc.returncode == 0, tail(proc)
    assert proc.stderr == "", proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _final_text(results: list[dict[str, Any]]) -> str:
    return " ".join(r["alternatives"][0]["transcript"] for r in results if r["is_final"]).strip()


def _vendor_client_text(server: ServerProcess, audio: bytes, encoding: int, frame_bytes: int) -> str:
    """The same audio and config through NVIDIA's own Python client (nvidia-riva-client)."""
    config = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=encoding,
            sample_rate_hertz=8000,
            language_code="en-US",
            max_alternatives=1,
            enable_automatic_punctuation=True,
            audio_channel_count=1,
        ),
        interim_results=True,
    )
    chunks = [audio[i : i + frame_bytes] for i in range(0, len(audio), frame_bytes)]
    asr = riva.client.ASRService(riva.client.Auth(uri=server.target))
    results = [
        r
        for response in asr.streaming_response_generator(audio_chunks=chunks, streaming_config=config)
        for r in response.results
    ]
    return " ".join(r.alternatives[0].transcript for r in results if r.is_final).strip()


def test_riva_module_request_shapes_transcribe_real_speech(cpp_bin: Path, sphinx_server: ServerProcess) -> None:
    """A wideband call (16 kHz LINEAR_PCM, 20 ms frames) with every config field the module sets."""
    results = _riva(
        cpp_bin,
        CLIP,
        sphinx_server,
        "--punctuation",
        "--word-time-offsets",
        "--verbatim",
        "--max-alternatives",
        "1",
        "--model",
        "conformer-en-US-asr-streaming",
        "--hints",
        "go forward,ten meters",
        "--hints-boost",
        "20",
        "--custom",
        "enable_vad_endpointing=true",
    )
    text = _final_text(results)
    assert word_error_rate(CLIP_TEXT, text) <= MAX_WER, text
    assert all(len(r["alternatives"]) == 1 and r["channel_tag"] == 0 for r in results)

    first_final = next(i for i, r in enumerate(results) if r["is_final"])
    interims = results[:first_final]
    assert interims, "interim results come before the final one"
    assert all(r["stability"] == pytest.approx(REVISABLE_STABILITY) for r in interims)
    assert all("words" not in r["alternatives"][0] for r in interims), "words and confidence on finals only"
    texts = [r["alternatives"][0]["transcript"] for r in interims]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False)), texts

    duration = _duration_s(CLIP)
    processed = [r["audio_processed"] for r in results]
    assert processed == sorted(processed) and 0 < processed[-1] <= duration + 0.05
    finals = [r for r in results if r["is_final"]]
    assert all(r["stability"] == 0 for r in finals)
    words = [w for r in finals for w in r["alternatives"][0]["words"]]
    assert [w["word"] for w in words] == text.split()
    for w in words:  # Riva word offsets are milliseconds
        assert 0 <= w["start_time"] < w["end_time"] <= duration * 1000 + 50
    assert [w["start_time"] for w in words] == sorted(w["start_time"] for w in words)


@pytest.mark.parametrize("encoding", ["linear16", "mulaw"])
def test_riva_telephony_8k_gives_what_the_vendor_client_gets(
    cpp_bin: Path, sphinx_server: ServerProcess, tmp_path: Path, encoding: str
) -> None:
    """The module's own shape: 8 kHz, 20 ms frames (320 bytes LINEAR_PCM, the module's CHUNKSIZE; 160 bytes
    mu-law, G.711 passed through), paced. PocketSphinx's model is wideband, so 8 kHz audio is not checked
    against the words spoken: the transcript must be the one NVIDIA's Python client gets for the same bytes."""
    samples = _telephony_8k()
    if encoding == "mulaw":
        audio, riva_encoding, frame_bytes = encode_mulaw(samples), riva.client.AudioEncoding.MULAW, 160
    else:
        audio, riva_encoding, frame_bytes = samples.astype("<i2").tobytes(), riva.client.AudioEncoding.LINEAR_PCM, 320
    path = tmp_path / f"call.{encoding}"
    path.write_bytes(audio)
    results = _riva(cpp_bin, path, sphinx_server, "--encoding", encoding, "--sample-rate", "8000", "--punctuation")
    text = _final_text(results)
    assert text, results
    assert any(not r["is_final"] for r in results), "interim results were asked for"
    expected = _vendor_client_text(sphinx_server, audio, riva_encoding, frame_bytes)
    assert text == expected


def test_riva_no_interim_gives_finals_only(cpp_bin: Path, sphinx_server: ServerProcess) -> None:
    results = _riva(cpp_bin, CLIP, sphinx_server, "--no-interim", "--no-pace")
    assert results and all(r["is_final"] for r in results)
    assert all(r["alternatives"][0]["words"] == [] for r in results), "no words unless asked"
    assert word_error_rate(CLIP_TEXT, _final_text(results)) <= MAX_WER


def test_riva_error_names_the_riva_field(cpp_bin: Path, sphinx_server: ServerProcess, tmp_path: Path) -> None:
    path = _write_wav(tmp_path / "4khz.wav", b"\0\0" * 4000, 4000)
    proc = _run(cpp_bin / "riva_transcribe", path, sphinx_server)
    assert proc.returncode == 1, tail(proc)
    assert proc.stdout == ""
    assert proc.stderr.startswith("riva_transcribe: error: INVALID_ARGUMENT (UNSUPPORTED_AUDIO_FORMAT): ")
    assert "; streaming_config.config.sample_rate_hertz: " in proc.stderr, proc.stderr
