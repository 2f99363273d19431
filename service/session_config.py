"""Validate a client's StreamingConfig into the frozen SessionConfig the session runs on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from engine_api.phrases import PhraseHint
from voxgate_client.v1 import speech_pb2 as pb

from . import errors, phrase_hints
from .audio.decode import Encoding
from .client_text import quoted
from .config import Config

MIN_RATE_HZ = 8000
MAX_RATE_HZ = 48000
MAX_CHANNELS = 8
MAX_LANGUAGE_CODE_CHARS = 35  # RFC 5646 §4.4.1: the longest tag implementations must keep
LANGUAGE_CODE = re.compile(r"[A-Za-z0-9_-]*")  # "en-US" (BCP-47); "en_US" as some clients write it; "" = default


class ChannelMode(Enum):
    """How audio of more than one channel is recognized (voxgate.v1 ChannelMode)."""

    SEPARATE = "separate"  # one session per channel, results tagged 1..N
    DOWNMIX = "downmix"  # the channels averaged into one
    FIRST = "first"  # only the first channel (the vendors' default without separate recognition)


CHANNEL_MODES = {
    pb.CHANNEL_MODE_UNSPECIFIED: ChannelMode.SEPARATE,
    pb.CHANNEL_MODE_SEPARATE: ChannelMode.SEPARATE,
    pb.CHANNEL_MODE_DOWNMIX: ChannelMode.DOWNMIX,
    pb.CHANNEL_MODE_FIRST: ChannelMode.FIRST,
}


def engine_language(requested: str, languages: tuple[str, ...]) -> str | None:
    """The engine's code for a requested language, or None. Exact (any case, '_' as '-') first; then by the
    primary subtag where one side has no region: an engine's "en" serves "en-US" and "en-GB" (Google's and
    Riva's clients always send a region), a bare "en" takes the engine's "en-US"; "en-GB" never takes "en-US"."""

    def norm(tag: str) -> str:
        return tag.replace("_", "-").lower()

    want = norm(requested)
    primary = want.split("-")[0]
    for choice in (
        lambda have: have == want,
        lambda have: have == primary,
        lambda have: want == primary and have.split("-")[0] == primary,
    ):
        for lang in languages:
            if choice(norm(lang)):
                return lang
    return None


@dataclass(frozen=True)
class SessionConfig:
    encoding: Encoding
    sample_rate_hz: int
    language_code: str
    interim_results: bool
    word_time_offsets: bool
    endpointing_silence_ms: int
    max_duration_s: float  # 0 = unbounded
    idle_timeout_s: float
    flow_status_interval_s: float  # 0: no FlowStatus responses
    channels: int = 1  # interleaved in the client's audio
    channel_mode: ChannelMode = ChannelMode.SEPARATE  # meaningful when channels > 1
    phrase_hints: tuple[PhraseHint, ...] = ()  # each with its boost resolved
    non_speech_events: bool = False  # music and DTMF reported as speech events

    @property
    def slots(self) -> int:
        """Sessions it counts as for capacity and quotas: one per separately recognized channel."""
        return self.channels if self.channels > 1 and self.channel_mode is ChannelMode.SEPARATE else 1


def _seconds(d: object) -> float:
    return d.seconds + d.nanos / 1e9  # type: ignore[attr-defined]


def _limit(requested: float, server_max: float, field: str) -> float:
    """Client may lower a server limit, never raise it; 0 asks for the server's."""
    if requested < 0:
        raise errors.invalid_config(field, f"{field} must not be negative")
    if requested == 0:
        return server_max
    return requested if server_max == 0 else min(requested, server_max)


def validate(msg: pb.StreamingConfig, server: Config, languages: tuple[str, ...]) -> SessionConfig:
    if (encoding := Encoding.from_proto(msg.encoding)) is None:
        raise errors.unsupported_format(
            "config.encoding", f"encoding must be one of {', '.join(e.name for e in Encoding)} (got {msg.encoding})"
        )
    if not MIN_RATE_HZ <= msg.sample_rate_hz <= MAX_RATE_HZ:
        raise errors.unsupported_format(
            "config.sample_rate_hz", f"sample_rate_hz must be {MIN_RATE_HZ}..{MAX_RATE_HZ} (got {msg.sample_rate_hz})"
        )
    if not 0 <= msg.audio_channel_count <= MAX_CHANNELS:
        raise errors.unsupported_format(
            "config.audio_channel_count",
            f"audio_channel_count must be 1..{MAX_CHANNELS} (0 means 1); got {msg.audio_channel_count}",
        )
    if msg.channel_mode not in CHANNEL_MODES:
        names = ", ".join(pb.ChannelMode.Name(m) for m in CHANNEL_MODES)
        said = f"channel_mode must be one of {names} (got {msg.channel_mode})"
        raise errors.invalid_config("config.channel_mode", said)
    language = msg.language_code
    if len(language) > MAX_LANGUAGE_CODE_CHARS or not LANGUAGE_CODE.fullmatch(language):
        raise errors.invalid_config(
            "config.language_code",
            f"language_code must be a BCP-47 tag (letters, digits, '-'; at most "
            f"{MAX_LANGUAGE_CODE_CHARS} characters), got {quoted(language)}",
        )
    if language and languages:
        if (matched := engine_language(language, languages)) is None:
            raise errors.invalid_config(
                "config.language_code", f"language {language!r} not supported; supported: {', '.join(languages)}"
            )
        language = matched
    if msg.flow_status.interval_ms < 0:
        raise errors.invalid_config("config.flow_status.interval_ms", "flow_status.interval_ms must not be negative")
    flow_interval_ms = (msg.flow_status.interval_ms or server.flow_status_interval_ms) if msg.flow_status.enabled else 0
    silence = msg.endpointing.silence_ms
    if silence < 0 or silence > server.max_endpointing_silence_ms:
        raise errors.invalid_config(
            "config.endpointing.silence_ms",
            f"endpointing.silence_ms must be 0..{server.max_endpointing_silence_ms} (got {silence})",
        )
    return SessionConfig(
        encoding=encoding,
        sample_rate_hz=msg.sample_rate_hz,
        language_code=language or (languages[0] if languages else ""),
        interim_results=msg.interim_results,
        word_time_offsets=msg.enable_word_time_offsets,
        endpointing_silence_ms=silence or server.endpointing_silence_ms,
        max_duration_s=_limit(
            _seconds(msg.limits.max_duration), server.max_session_duration_s, "config.limits.max_duration"
        ),
        idle_timeout_s=_limit(
            _seconds(msg.limits.idle_timeout), server.max_idle_timeout_s, "config.limits.idle_timeout"
        )
        if _seconds(msg.limits.idle_timeout)
        else server.idle_timeout_s,
        flow_status_interval_s=max(flow_interval_ms, 50) / 1000 if flow_interval_ms else 0.0,
        channels=max(msg.audio_channel_count, 1),
        channel_mode=CHANNEL_MODES[msg.channel_mode],
        phrase_hints=phrase_hints.from_proto(msg.phrase_hints),
        non_speech_events=msg.non_speech_events,
    )
