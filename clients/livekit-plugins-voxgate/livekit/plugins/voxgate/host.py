"""What a `SpeechStream` needs of the `STT` that opened it, and the STT's session options.

A layer below stt.py and stream.py, so that the two need not import each other.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from livekit.agents import stt

from voxgate_client import AsyncSpeechClient, Phrase, ResumePolicy, StreamConfig
from voxgate_client.endpoint import Endpoint
from voxgate_client.v1 import speech_pb2 as pb


@dataclass
class STTOptions:
    language: str
    sample_rate: int
    interim_results: bool
    word_time_offsets: bool
    endpointing_silence_ms: int
    resume: bool | ResumePolicy
    keyterms: tuple[Phrase, ...] = ()

    def stream_config(self) -> StreamConfig:
        return StreamConfig(
            encoding="linear16",
            sample_rate_hz=self.sample_rate,
            language_code=self.language,
            interim_results=self.interim_results,
            word_time_offsets=self.word_time_offsets,
            endpointing_silence_ms=self.endpointing_silence_ms,
            phrases=self.keyterms,
        )


class StreamHost(stt.STT):
    """The STT's side of its streams: the shared client, the endpoint's metadata, and the engine heard of."""

    _endpoint: Endpoint

    @abstractmethod
    def _acquire_client(self) -> tuple[AsyncSpeechClient, bool]:
        """The shared client, and whether it has carried a session before."""

    @abstractmethod
    def _session_started(self, started: pb.SessionStarted) -> None:
        """A stream's session started (its engine, for `model`)."""
