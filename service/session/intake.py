"""Client audio → engine inputs: size limits, resume skip, max duration, decode/VAD/chunking."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from engine_api.audio import BYTES_PER_MS

from .. import errors
from ..audio.decode import InvalidAudio
from ..audio.nonspeech import NonSpeech
from ..audio.pipeline import AudioPipeline, EngineChunk, PipelineOutput
from ..audio.vad import SpeechBoundary
from ..config import Config
from ..session_config import SessionConfig


@dataclass(frozen=True)
class Chunk:
    pcm16: bytes
    speech: bool
    start_ms: int  # session time of its first sample
    received_at: float  # clock time it was accepted

    @property
    def end_ms(self) -> int:
        return self.start_ms + len(self.pcm16) // BYTES_PER_MS


class AudioIntake:
    """Accepts audio bytes as the client sends them; knows how much was received (the ack)."""

    def __init__(self, cfg: SessionConfig, server: Config) -> None:
        self._cfg = cfg
        self._limit = server.max_audio_bytes_per_message
        self._pipeline = AudioPipeline(
            cfg.encoding,
            cfg.sample_rate_hz,
            server.vad_aggressiveness,
            cfg.endpointing_silence_ms,
            server.speech_detector,
            cfg.non_speech_events,
        )
        self._bytes_per_sample = cfg.encoding.bytes_per_sample
        # A positive cap shorter than one sample is a cap of zero bytes, not "unbounded".
        self._max_bytes = (
            int(cfg.max_duration_s * cfg.sample_rate_hz) * self._bytes_per_sample if cfg.max_duration_s > 0 else None
        )
        self._skip = 0
        # Control requests (finalize, phrase hints) taken since the last audio byte, and how many of
        # them a resumed client is still to resend: a client keeps a control until audio after it is
        # acknowledged, so one at the resume point itself may have been applied already.
        self._controls_here = 0
        self._resent_controls = 0
        self.bytes_in = 0
        self.produced_ms = 0  # engine-rate audio turned into chunks so far

    @property
    def received_ms(self) -> int:
        return self.bytes_in // self._bytes_per_sample * 1000 // self._cfg.sample_rate_hz

    def resume_from(self, client_offset: int) -> None:
        """The client will resend its stream from byte `client_offset`: skip what we already have."""
        if client_offset > self.bytes_in:
            raise errors.invalid_config(
                "config.resume_audio_bytes",
                f"resume_audio_bytes {client_offset} is beyond the {self.bytes_in} bytes this session received",
            )
        self._skip = self.bytes_in - client_offset
        self._resent_controls = self._controls_here

    def take_control(self) -> bool:
        """A control request arrived: False when a resumed client is resending one the session applied."""
        if self._skip:  # it came before audio the session has
            return False
        if self._resent_controls:  # it came at the resume point, where this many were applied
            self._resent_controls -= 1
            return False
        self._controls_here += 1
        return True

    @property
    def in_speech(self) -> bool:
        return self._pipeline.in_speech

    def push(self, data: bytes, now: float) -> tuple[list[Chunk | SpeechBoundary | NonSpeech], bool]:
        """Accept one audio message; returns engine inputs and whether the duration cap was reached."""
        if len(data) > self._limit:
            raise errors.StreamError(
                grpc.StatusCode.INVALID_ARGUMENT,
                errors.AUDIO_MESSAGE_TOO_LARGE,
                f"audio message of {len(data)} bytes exceeds max_audio_bytes_per_message={self._limit}",
                field="audio",
            )
        if self._skip:
            skipped = min(self._skip, len(data))
            self._skip -= skipped
            data = data[skipped:]
        at_cap = False
        if self._max_bytes is not None and self.bytes_in + len(data) >= self._max_bytes:
            data, at_cap = data[: max(self._max_bytes - self.bytes_in, 0)], True
        try:
            outputs = self._pipeline.push(data)
        except InvalidAudio as exc:
            raise errors.StreamError(
                grpc.StatusCode.INVALID_ARGUMENT, errors.INVALID_AUDIO, str(exc), field="audio"
            ) from exc
        if data:  # controls after new audio are new
            self._controls_here = self._resent_controls = 0
        self.bytes_in += len(data)
        return self._stamp(outputs, now), at_cap

    def cut(self, now: float) -> list[Chunk | SpeechBoundary | NonSpeech]:
        return self._stamp(self._pipeline.cut(), now)

    def finish(self, now: float) -> list[Chunk | SpeechBoundary | NonSpeech]:
        return self._stamp(self._pipeline.finish(), now)

    def _stamp(self, outputs: list[PipelineOutput], now: float) -> list[Chunk | SpeechBoundary | NonSpeech]:
        stamped: list[Chunk | SpeechBoundary | NonSpeech] = []
        for out in outputs:
            if isinstance(out, EngineChunk):
                chunk = Chunk(out.pcm16, out.speech, self.produced_ms, now)
                self.produced_ms = chunk.end_ms
                stamped.append(chunk)
            else:
                stamped.append(out)
        return stamped
