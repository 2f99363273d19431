import grpc
import pytest
from google.protobuf import duration_pb2

from service.config import Config
from service.errors import StreamError
from service.session_config import validate
from voxgate_client.v1 import speech_pb2 as pb

LANGS = ("en-US",)


def cfg(**kw: object) -> pb.StreamingConfig:
    base: dict[str, object] = {"encoding": pb.AUDIO_ENCODING_LINEAR16, "sample_rate_hz": 16000}
    base.update(kw)
    return pb.StreamingConfig(**base)  # type: ignore[arg-type]


def test_defaults_come_from_the_server() -> None:
    server = Config(idle_timeout_s=30, max_session_duration_s=0, endpointing_silence_ms=800)
    s = validate(cfg(), server, LANGS)
    assert (s.idle_timeout_s, s.max_duration_s, s.endpointing_silence_ms, s.language_code) == (30, 0, 800, "en-US")


def test_client_may_lower_limits_but_not_raise_them() -> None:
    server = Config(max_session_duration_s=3600, max_idle_timeout_s=60)
    limits = pb.SessionLimits(
        max_duration=duration_pb2.Duration(seconds=7200), idle_timeout=duration_pb2.Duration(seconds=5)
    )
    s = validate(cfg(limits=limits), server, LANGS)
    assert (s.max_duration_s, s.idle_timeout_s) == (3600, 5)
    limits = pb.SessionLimits(
        max_duration=duration_pb2.Duration(seconds=10), idle_timeout=duration_pb2.Duration(seconds=600)
    )
    s = validate(cfg(limits=limits), server, LANGS)
    assert (s.max_duration_s, s.idle_timeout_s) == (10, 60)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"limits": pb.SessionLimits(max_duration=duration_pb2.Duration(seconds=-1))}, "config.limits.max_duration"),
        ({"limits": pb.SessionLimits(idle_timeout=duration_pb2.Duration(seconds=-1))}, "config.limits.idle_timeout"),
        ({"endpointing": pb.EndpointingConfig(silence_ms=10**6)}, "config.endpointing.silence_ms"),
        ({"sample_rate_hz": 0}, "config.sample_rate_hz"),
    ],
)
def test_bad_values_name_their_field(kw: dict, field: str) -> None:
    with pytest.raises(StreamError) as info:
        validate(cfg(**kw), Config(), LANGS)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT and info.value.field == field


@pytest.mark.parametrize(
    ("kw", "field", "reason"),
    [
        ({"encoding": 42}, "config.encoding", "UNSUPPORTED_AUDIO_FORMAT"),  # an audio format
        ({"channel_mode": 42}, "config.channel_mode", "INVALID_CONFIG"),  # how to treat channels: a config value
    ],
)
def test_an_unknown_enum_value_gets_the_reason_the_error_tables_give(kw: dict, field: str, reason: str) -> None:
    with pytest.raises(StreamError) as info:
        validate(cfg(audio_channel_count=2, **kw), Config(), LANGS)
    assert (info.value.field, info.value.reason) == (field, reason)
    assert "must be one of" in info.value.message and "(got 42)" in info.value.message


VOXTRAL = ("en", "zh", "fr")


@pytest.mark.parametrize(
    ("requested", "languages", "engine_code"),
    [
        ("en", VOXTRAL, "en"),
        ("EN", VOXTRAL, "en"),
        ("en-US", VOXTRAL, "en"),
        ("en_GB", VOXTRAL, "en"),
        ("fr-CA", VOXTRAL, "fr"),  # Google/Riva clients: a region
        ("en-US", LANGS, "en-US"),
        ("en-us", LANGS, "en-US"),
        ("en_US", LANGS, "en-US"),
        ("en", LANGS, "en-US"),  # no region asked: the engine's own English
        ("en-US", ("en-GB", "en-US"), "en-US"),  # exact beats the first of the primary language
    ],
)
def test_a_language_is_matched_to_the_engines_code(
    requested: str, languages: tuple[str, ...], engine_code: str
) -> None:
    assert validate(cfg(language_code=requested), Config(), languages).language_code == engine_code


@pytest.mark.parametrize(
    ("requested", "languages"),
    [
        ("en-GB", LANGS),  # another region is another model: not silently served by en-US
        ("de-DE", VOXTRAL),
        ("e", VOXTRAL),
        ("english", VOXTRAL),
    ],
)
def test_a_language_the_engine_lacks_is_refused_with_the_list(requested: str, languages: tuple[str, ...]) -> None:
    with pytest.raises(StreamError) as err:
        validate(cfg(language_code=requested), Config(), languages)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert f"language {requested!r} not supported; supported: {', '.join(languages)}" in err.value.message
