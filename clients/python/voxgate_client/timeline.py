"""One timeline for the successive sessions of a resuming stream (a drained session's successor)."""

from __future__ import annotations

from google.protobuf import duration_pb2

from ._proto import speech_pb2
from .config import StreamConfig

Response = speech_pb2.StreamingRecognizeResponse


def _shift(offset: duration_pb2.Duration, ns: int) -> None:
    offset.FromNanoseconds(offset.ToNanoseconds() + ns)


class Timeline:
    """Makes the successive sessions of one stream (after drains) read as one to the caller.

    The first session's responses pass unchanged. After a seam, each response of the new
    session gets the `seq`, `utterance_index` and audio offsets of the sessions before it added.
    """

    def __init__(self, config: StreamConfig) -> None:
        self._rate = config.sample_rate_hz
        self._bytes_per_sample = config.frame_bytes  # a sample of every channel
        self.audio_bytes = 0  # stream audio before the current session's
        self._audio_ns = 0
        self._seq = 0  # responses of the sessions before the current one
        self._utterances = 0
        self._last_seq = 0  # highest seq passed to the caller
        self._next_utterance = 0  # one past the highest utterance_index passed to the caller

    def bytes_of(self, duration: duration_pb2.Duration) -> int:
        """Whole samples of audio in `duration`, in bytes of the stream's encoding."""
        samples = duration.ToNanoseconds() * self._rate // 1_000_000_000
        return int(samples) * self._bytes_per_sample

    def new_session(self, audio_bytes: int) -> None:
        """The next session's audio starts at stream offset `audio_bytes`."""
        self.audio_bytes = audio_bytes
        samples = audio_bytes // self._bytes_per_sample
        self._audio_ns = samples * 1_000_000_000 // self._rate
        self._seq = self._last_seq
        self._utterances = self._next_utterance

    def apply(self, response: Response) -> None:
        if self._seq or self._audio_ns or self._utterances:
            self._shift(response)
        self._last_seq = max(self._last_seq, response.seq)
        if response.HasField("result") and response.result.is_final:
            # Finals only: a lost session's successor transcribes the utterance in progress
            # again, under the same index.
            self._next_utterance = max(self._next_utterance, response.result.utterance_index + 1)

    def _shift(self, response: Response) -> None:
        ns = self._audio_ns
        if response.seq:
            response.seq += self._seq
        kind = response.WhichOneof("response")
        if kind == "result":
            result = response.result
            result.utterance_index += self._utterances
            for field in (result.start_offset, result.end_offset):
                _shift(field, ns)
            for word in result.words:
                _shift(word.start_offset, ns)
                _shift(word.end_offset, ns)
        elif kind == "speech_event" and response.speech_event.HasField("offset"):
            _shift(response.speech_event.offset, ns)
        elif kind == "flow_status":
            response.flow_status.acked_audio_bytes += self.audio_bytes
            _shift(response.flow_status.acked_audio_offset, ns)
