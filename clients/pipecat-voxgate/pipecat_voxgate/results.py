"""What the transcription frames carry: voxgate's results as `VoxgateResult` (times in seconds
of all the audio the service received, over every session), and voxgate's language codes as
Pipecat's `Language`."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.duration_pb2 import Duration
from pipecat.transcriptions.language import Language

from voxgate_client.responses import duration_s
from voxgate_client.v1 import speech_pb2 as pb


@dataclass(frozen=True)
class VoxgateWord:
    word: str
    start_s: float  # seconds from the start of the audio the service received (all sessions)
    end_s: float


@dataclass(frozen=True)
class VoxgateResult:
    """The `result` of the transcription frames this service pushes."""

    session_id: str
    result_id: str  # the same for an utterance's interims and final
    utterance_index: int
    is_final: bool
    text: str
    start_s: float
    end_s: float
    words: tuple[VoxgateWord, ...]
    revised: bool  # a final that replaced, rather than extended, the interim text


def voxgate_result(r: pb.RecognitionResult, session_id: str, base_s: float) -> VoxgateResult:
    """`r`, a result of the session `session_id` that started `base_s` into the service's audio."""

    def at(offset: Duration) -> float:
        return round(base_s + duration_s(offset), 6)

    return VoxgateResult(
        session_id=session_id,
        result_id=r.result_id,
        utterance_index=r.utterance_index,
        is_final=r.is_final,
        text=r.text.strip(),
        start_s=at(r.start_offset),
        end_s=at(r.end_offset),
        revised=r.revised,
        words=tuple(VoxgateWord(w.word, at(w.start_offset), at(w.end_offset)) for w in r.words),
    )


def pipecat_language(code: str) -> Language | None:
    """The language voxgate applied, as Pipecat's (None: none, or one Pipecat does not name)."""
    if not code:
        return None
    try:
        return Language(code)
    except ValueError:
        return None
