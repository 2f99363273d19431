"""Stream configuration and the request messages built from it."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf import duration_pb2

from ._proto import speech_pb2
from .encodings import Encoding, bytes_per_sample, encoding_to_proto, parse_encoding

__all__ = [
    "FINALIZE",
    "KEEP_ALIVE",
    "AudioItem",
    "Control",
    "Phrase",
    "SetPhrases",
    "StreamConfig",
    "as_phrases",
    "audio_item_duration_s",
    "config_request",
    "request_for",
]


class Control(enum.Enum):
    """Non-audio items an audio iterable may yield in place of bytes."""

    FINALIZE = "finalize"  # close the current utterance now; the stream goes on
    KEEP_ALIVE = "keep_alive"  # reset the server's idle timer without audio


FINALIZE = Control.FINALIZE
KEEP_ALIVE = Control.KEEP_ALIVE


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(round(seconds * 1e9))
    return d


CHANNEL_MODES = {
    "separate": speech_pb2.CHANNEL_MODE_SEPARATE,
    "downmix": speech_pb2.CHANNEL_MODE_DOWNMIX,
    "first": speech_pb2.CHANNEL_MODE_FIRST,
}


@dataclass(frozen=True)
class Phrase:
    """A phrase hint: a word or phrase to favour (a name, a product), and how strongly.

    boost: as Google's and Riva's, positive favours, 0 does nothing, negative disfavours; 5 to 20
    suits most uses. None: the server's default (GetCapabilities.phrase_hints.default_boost).
    """

    value: str
    boost: float | None = None

    @classmethod
    def parse(cls, spec: str) -> Phrase:
        """'TEXT' or 'TEXT:BOOST' (the last colon, when a number follows it)."""
        text, colon, boost = spec.rpartition(":")
        if colon:
            try:
                return cls(text, float(boost))
            except ValueError:
                pass
        return cls(spec)

    def to_proto(self) -> speech_pb2.Phrase:
        phrase = speech_pb2.Phrase(value=self.value)
        if self.boost is not None:
            phrase.boost = self.boost
        return phrase


def as_phrases(terms: Iterable[str | Phrase]) -> tuple[Phrase, ...]:
    """Key terms as phrase hints: a string has the server's default boost."""
    return tuple(t if isinstance(t, Phrase) else Phrase(t) for t in terms)


def _phrase_hints(phrases: tuple[Phrase, ...]) -> speech_pb2.PhraseHints:
    return speech_pb2.PhraseHints(phrases=[p.to_proto() for p in phrases])


@dataclass(frozen=True)
class SetPhrases:
    """An item an audio iterable may yield: replace the session's phrase hints
    (StreamConfig.phrases; empty clears them). Utterances that begin after it use them; the
    server answers with a `phrase_hints_updated` response, or a PHRASE_HINTS_REJECTED warning
    naming a broken limit."""

    phrases: tuple[Phrase, ...] = ()


AudioItem = bytes | Control | SetPhrases
NOT_AUDIO = (Control, SetPhrases)  # the items without audio: isinstance(item, NOT_AUDIO)


@dataclass(frozen=True)
class StreamConfig:
    """What the first request of a stream says about the audio and the session.

    Zero values mean "the server's default" for the numeric fields.
    """

    encoding: Encoding
    sample_rate_hz: int
    language_code: str = ""
    interim_results: bool = True
    word_time_offsets: bool = False
    endpointing_silence_ms: int = 0
    max_duration_s: float = 0
    idle_timeout_s: float = 0
    # Interleaved channels in the audio (1-8), and how the server recognizes more than one:
    # "separate" (each on its own; results carry channel 1..N), "downmix", or "first".
    channels: int = 1
    channel_mode: str = "separate"
    # Words to favour (names, products, jargon); the server checks them against its limits.
    phrases: tuple[Phrase, ...] = ()
    # Music and DTMF digits reported as speech events (music_started, music_ended, dtmf).
    non_speech_events: bool = False

    def __post_init__(self) -> None:
        # Accept 'MULAW' etc. but store the canonical name (frozen: bypass setattr).
        object.__setattr__(self, "encoding", parse_encoding(self.encoding))
        if self.sample_rate_hz <= 0:
            raise ValueError("sample_rate_hz must be positive")
        if self.endpointing_silence_ms < 0 or self.max_duration_s < 0 or self.idle_timeout_s < 0:
            raise ValueError("endpointing and limit values must not be negative")
        if not 1 <= self.channels <= 8:
            raise ValueError("channels must be 1..8")
        if self.channel_mode not in CHANNEL_MODES:
            raise ValueError(f"channel_mode must be one of {', '.join(CHANNEL_MODES)}")

    @property
    def frame_bytes(self) -> int:
        """Bytes of one sample of every channel."""
        return bytes_per_sample(self.encoding) * self.channels

    @property
    def bytes_per_second(self) -> int:
        return self.sample_rate_hz * self.frame_bytes

    def to_proto(self) -> speech_pb2.StreamingConfig:
        limits = speech_pb2.SessionLimits()
        # Leave unset (not zero) so "server default" is explicit on the wire.
        if self.max_duration_s:
            limits.max_duration.CopyFrom(_duration(self.max_duration_s))
        if self.idle_timeout_s:
            limits.idle_timeout.CopyFrom(_duration(self.idle_timeout_s))
        return speech_pb2.StreamingConfig(
            encoding=encoding_to_proto(self.encoding),
            sample_rate_hz=self.sample_rate_hz,
            audio_channel_count=self.channels,
            channel_mode=(
                CHANNEL_MODES[self.channel_mode]
                if self.channels > 1
                else speech_pb2.CHANNEL_MODE_UNSPECIFIED
            ),
            language_code=self.language_code,
            interim_results=self.interim_results,
            enable_word_time_offsets=self.word_time_offsets,
            endpointing=speech_pb2.EndpointingConfig(silence_ms=self.endpointing_silence_ms),
            limits=limits,
            phrase_hints=_phrase_hints(self.phrases),
            non_speech_events=self.non_speech_events,
        )


def config_request(config: StreamConfig) -> speech_pb2.StreamingRecognizeRequest:
    return speech_pb2.StreamingRecognizeRequest(config=config.to_proto())


def request_for(item: AudioItem) -> speech_pb2.StreamingRecognizeRequest:
    """The request carrying one item of an audio iterable."""
    if item is Control.FINALIZE:
        return speech_pb2.StreamingRecognizeRequest(finalize=speech_pb2.Finalize())
    if item is Control.KEEP_ALIVE:
        return speech_pb2.StreamingRecognizeRequest(keep_alive=speech_pb2.KeepAlive())
    if isinstance(item, SetPhrases):
        return speech_pb2.StreamingRecognizeRequest(phrase_hints=_phrase_hints(item.phrases))
    if isinstance(item, (bytes, bytearray, memoryview)):
        return speech_pb2.StreamingRecognizeRequest(audio=bytes(item))
    raise TypeError(ITEM_TYPES_ERROR.format(type(item).__name__))


ITEM_TYPES_ERROR = "audio items must be bytes, FINALIZE, KEEP_ALIVE or SetPhrases, not {}"


def audio_item_duration_s(item: AudioItem, config: StreamConfig) -> float:
    """Seconds of audio in an item (0 for control items)."""
    if isinstance(item, NOT_AUDIO):
        return 0.0
    return len(item) / config.bytes_per_second
