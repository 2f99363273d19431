"""Per-session audio path: decode → resample to 16 kHz → VAD → fixed engine chunks."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from engine_api.audio import CHUNK_MS, SAMPLE_RATE_HZ

from .decode import Encoding, decode
from .nonspeech import NonSpeech
from .resample import StreamResampler
from .speech_model import SpeechProbability, shared_model
from .vad import FRAME_BYTES, FRAME_MS, NeuralGate, SpeechBoundary, VoiceActivity

CHUNK_FRAMES = CHUNK_MS // FRAME_MS  # 80 ms: a whole number of 20 ms VAD frames
if CHUNK_FRAMES * FRAME_MS != CHUNK_MS:
    raise ImportError(f"an engine chunk ({CHUNK_MS} ms) must be whole VAD frames ({FRAME_MS} ms)")


@dataclass(frozen=True)
class EngineChunk:
    pcm16: bytes
    speech: bool


PipelineOutput = EngineChunk | SpeechBoundary | NonSpeech


class AudioPipeline:
    def __init__(
        self,
        encoding: Encoding,
        sample_rate_hz: int,
        vad_aggressiveness: int,
        silence_ms: int,
        speech_detector: str = "webrtcvad",
        report_non_speech: bool = False,
    ) -> None:
        """speech_detector "silero": the neural gate decides what is speech with webrtcvad; report_non_speech:
        what it hears instead (music, DTMF) comes out as NonSpeech, whichever detector decides."""
        self._encoding = encoding
        self._resampler = StreamResampler(sample_rate_hz)
        # LINEAR16 at the engine rate on a little-endian host is already the engine's PCM: taken as it is,
        # without a numpy round trip (decode, the resampler's pass-through, tobytes) per message.
        self._as_is = encoding is Encoding.LINEAR16 and sample_rate_hz == SAMPLE_RATE_HZ and sys.byteorder == "little"
        self._gating = speech_detector == "silero"
        self._reporting = report_non_speech
        wanted = self._gating or report_non_speech
        self._gate = NeuralGate(SpeechProbability(shared_model())) if wanted else None
        self._vad = VoiceActivity(vad_aggressiveness, silence_ms, gated=self._gating)
        self._pending = b""  # resampled audio not yet a whole VAD frame
        self._chunk: list[bytes] = []
        self._chunk_speech = False
        self.samples_in = 0  # at the client's rate

    def push(self, payload: bytes) -> list[PipelineOutput]:
        if self._as_is and not len(payload) % 2:  # an odd length takes the general path, which refuses it
            self.samples_in += len(payload) // 2
            return self._frames(payload)
        samples = decode(payload, self._encoding)  # raises InvalidAudio
        self.samples_in += len(samples)
        return self._frames(self._resampler.process(samples).tobytes())

    @property
    def in_speech(self) -> bool:
        """The VAD is inside an utterance (its endpoint has not come yet)."""
        return self._vad.in_speech

    def cut(self) -> list[PipelineOutput]:
        """Send what is buffered now (a Finalize or endpoint), even if short of a chunk."""
        return self._emit_chunk()

    def finish(self) -> list[PipelineOutput]:
        """End of audio: drain the resampler, pad the last VAD frame, close open speech."""
        out = self._frames(self._resampler.finish().tobytes())
        if self._pending:
            out += self._frames(b"\0" * (FRAME_BYTES - len(self._pending)))
        out += self._emit_chunk()
        boundary = self._vad.finish()
        if boundary is not None:
            out.append(boundary)
        if self._gate is not None:
            self._gate.finish()
            out += self._heard()
        return out

    def _heard(self) -> list[PipelineOutput]:
        """The gate's non-speech since the last call, if the client asked for it."""
        assert self._gate is not None
        heard, self._gate.heard = self._gate.heard, []
        return list(heard) if self._reporting else []

    def _frames(self, pcm: bytes) -> list[PipelineOutput]:
        out: list[PipelineOutput] = []
        data = self._pending + pcm if self._pending else pcm
        whole = len(data) - len(data) % FRAME_BYTES
        self._pending = data[whole:] if whole < len(data) else b""
        for i in range(0, whole, FRAME_BYTES):
            frame = data[i : i + FRAME_BYTES]
            allowed = self._gate.frame(frame) if self._gate is not None else True
            boundary = self._vad.frame(frame, allowed or not self._gating)
            if self._gate is not None and self._gate.heard:
                out += self._heard()
            self._chunk.append(frame)
            # Voiced frames inside speech: the silence before an endpoint is not speech.
            self._chunk_speech = self._chunk_speech or (self._vad.in_speech and self._vad.last_voiced)
            if boundary is not None and not boundary.started:
                # Endpoint: the engine gets the audio up to here before the flush.
                out += self._emit_chunk()
                out.append(boundary)
                continue
            if boundary is not None:
                out.append(boundary)
            if len(self._chunk) == CHUNK_FRAMES:
                out += self._emit_chunk()
        return out

    def _emit_chunk(self) -> list[PipelineOutput]:
        if not self._chunk:
            return []
        chunk = EngineChunk(b"".join(self._chunk), self._chunk_speech)
        self._chunk = []
        self._chunk_speech = False
        return [chunk]
