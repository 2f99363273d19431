"""What flows between the protobuf edge and a session: plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engine_api.info import InterimStability, PositionMode
from engine_api.phrases import PhraseHint, PhraseHintSupport

from .audio.nonspeech import Sound
from .transcript import Result


class EndReason(Enum):
    CLIENT_END = "client_end"
    MAX_DURATION = "max_duration"
    IDLE_TIMEOUT = "idle_timeout"
    DRAINING = "draining"
    ENGINE_LOST = "engine_lost"
    ERROR = "error"
    CLIENT_GONE = "client_gone"


# Client → session
@dataclass(frozen=True)
class AudioIn:
    data: bytes


@dataclass(frozen=True)
class KeepAliveIn:
    pass


@dataclass(frozen=True)
class FinalizeIn:
    pass


@dataclass(frozen=True)
class PhraseHintsIn:
    """Replace the session's phrase hints; `rejected` (the error, naming the field) when a limit was broken."""

    hints: tuple[PhraseHint, ...] = ()
    rejected: str = ""


ClientInput = AudioIn | KeepAliveIn | FinalizeIn | PhraseHintsIn


# Session → client
@dataclass(frozen=True)
class Started:
    session_id: str
    engine: str
    model: str
    resume_token: str = ""
    resume_window_s: float = 0.0
    resumed: bool = False
    position_mode: PositionMode = PositionMode.NONE  # the engine's
    position_mode_reason: str = ""
    interim_stability: InterimStability = InterimStability.NONE  # the engine's
    phrase_hints: PhraseHintSupport = PhraseHintSupport.NONE  # what the engine does with phrase hints


@dataclass(frozen=True)
class SpeechEvent:
    started: bool
    offset_ms: int
    channel: int = 0  # as Result.channel


@dataclass(frozen=True)
class SoundEvent:
    """What the audio carried instead of speech (music, a DTMF digit), for a client that asked."""

    sound: Sound
    offset_ms: int
    digit: str = ""  # DTMF's key
    channel: int = 0  # as Result.channel


@dataclass(frozen=True)
class Notice:
    code: str
    message: str


@dataclass(frozen=True)
class HintsUpdated:
    """The session's phrase hints were replaced; utterances that begin after audio_ms use them."""

    hints: tuple[PhraseHint, ...]
    audio_ms: int


@dataclass(frozen=True)
class Ended:
    reason: EndReason
    message: str
    audio_ms: int


@dataclass(frozen=True)
class FlowReport:
    acked_audio_ms: int
    acked_audio_bytes: int
    buffered_audio_ms: int
    lag_ms: int


SessionOutput = Started | Result | SpeechEvent | SoundEvent | Notice | FlowReport | HintsUpdated | Ended
