"""Internal dataclasses ↔ public protobuf messages: the only place that builds voxgate.v1 messages."""

from __future__ import annotations

from google.protobuf import duration_pb2

from engine_api.info import InterimStability, PositionMode
from engine_api.v1 import engine_pb2
from voxgate_client.v1 import speech_pb2 as pb

from . import errors, phrase_hints
from .audio.nonspeech import Sound
from .capacity import CapacityCounts
from .events import (
    AudioIn,
    ClientInput,
    Ended,
    EndReason,
    FinalizeIn,
    FlowReport,
    HintsUpdated,
    KeepAliveIn,
    Notice,
    PhraseHintsIn,
    SessionOutput,
    SoundEvent,
    SpeechEvent,
    Started,
)
from .session_config import ChannelMode, SessionConfig
from .transcript import Result

END_REASONS = {
    EndReason.CLIENT_END: pb.SESSION_END_REASON_CLIENT_END,
    EndReason.MAX_DURATION: pb.SESSION_END_REASON_MAX_DURATION,
    EndReason.IDLE_TIMEOUT: pb.SESSION_END_REASON_IDLE_TIMEOUT,
    EndReason.DRAINING: pb.SESSION_END_REASON_DRAINING,
    EndReason.ENGINE_LOST: pb.SESSION_END_REASON_ENGINE_LOST,
    EndReason.ERROR: pb.SESSION_END_REASON_ERROR,
    EndReason.CLIENT_GONE: pb.SESSION_END_REASON_CLIENT_GONE,
}

SOUNDS = {
    Sound.MUSIC_STARTED: pb.SPEECH_EVENT_TYPE_MUSIC_STARTED,
    Sound.MUSIC_ENDED: pb.SPEECH_EVENT_TYPE_MUSIC_ENDED,
    Sound.DTMF: pb.SPEECH_EVENT_TYPE_DTMF,
}


def capacity(
    counts: CapacityCounts,
    mismatches: int,
    by_worker: tuple[tuple[int, int], ...] = (),
    engines: list[tuple[int, bool, engine_pb2.GetStatusResponse | None]] | None = None,
) -> pb.CapacityCounts:
    return pb.CapacityCounts(
        service_sessions=counts.service,
        sidecar_slots=counts.sidecar,
        engine_sessions=counts.engine,
        mismatches=mismatches,
        workers=[pb.WorkerSessions(worker=i, sessions=n) for i, n in by_worker],
        engines=[
            pb.EngineSessions(
                engine=index,
                ready=ready,
                sidecar_slots=status.active_sessions if status else 0,
                engine_sessions=status.counters.get("sessions_active", 0) if status else 0,
                max_sessions=status.max_sessions if status else 0,
            )
            for index, ready, status in engines or []
        ],
    )


def position_runtime(status: engine_pb2.GetStatusResponse | None) -> pb.PositionRuntime | None:
    """The engine's position runtime as the sidecar reported it; None when it reports none."""
    if status is None or not status.HasField("position_runtime"):
        return None
    r = status.position_runtime
    return pb.PositionRuntime(
        model_runner=r.model_runner,
        async_scheduling=r.async_scheduling,
        kv_cache_dtype=r.kv_cache_dtype,
        kv_groups=[
            pb.KvGroupRuntime(
                kind=g.kind,
                block_size=g.block_size,
                window=g.window,
                attention_backend=g.attention_backend,
                key_layout=g.key_layout,
                dtype=g.dtype,
            )
            for g in r.kv_groups
        ],
    )


def duration_ms(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_s(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


def client_input(msg: pb.StreamingRecognizeRequest) -> ClientInput:
    kind = msg.WhichOneof("request")
    if kind == "audio":
        return AudioIn(msg.audio)
    if kind == "keep_alive":
        return KeepAliveIn()
    if kind == "finalize":
        return FinalizeIn()
    if kind == "phrase_hints":
        try:
            return PhraseHintsIn(phrase_hints.from_proto(msg.phrase_hints, "phrase_hints"))
        except errors.StreamError as exc:  # a call goes on with the hints it had: the client is told why
            return PhraseHintsIn(rejected=f"{exc.field}: {exc.message}")
    if kind == "config":
        raise errors.protocol_order("config may only be sent once, in the first request; it cannot change mid-stream")
    raise errors.protocol_order("empty request: set one of config, audio, keep_alive, finalize, phrase_hints")


CHANNEL_MODES = {
    ChannelMode.SEPARATE: pb.CHANNEL_MODE_SEPARATE,
    ChannelMode.DOWNMIX: pb.CHANNEL_MODE_DOWNMIX,
    ChannelMode.FIRST: pb.CHANNEL_MODE_FIRST,
}


def effective_config(cfg: SessionConfig) -> pb.StreamingConfig:
    return pb.StreamingConfig(
        encoding=cfg.encoding.proto,
        sample_rate_hz=cfg.sample_rate_hz,
        audio_channel_count=cfg.channels,
        channel_mode=CHANNEL_MODES[cfg.channel_mode] if cfg.channels > 1 else pb.CHANNEL_MODE_UNSPECIFIED,
        language_code=cfg.language_code,
        interim_results=cfg.interim_results,
        enable_word_time_offsets=cfg.word_time_offsets,
        endpointing=pb.EndpointingConfig(silence_ms=cfg.endpointing_silence_ms),
        limits=session_limits(cfg.max_duration_s, cfg.idle_timeout_s),
        flow_status=pb.FlowStatusConfig(
            enabled=cfg.flow_status_interval_s > 0, interval_ms=round(cfg.flow_status_interval_s * 1000)
        ),
        phrase_hints=phrase_hints.to_proto(cfg.phrase_hints),
        non_speech_events=cfg.non_speech_events,
    )


# The public enum's POSITION_MODE_CAPPED (a session ends at the cap) is what no engine of ours does any more.
POSITION_MODES = {PositionMode.REANCHOR: pb.POSITION_MODE_REANCHOR, PositionMode.ROLLOVER: pb.POSITION_MODE_ROLLOVER}


def position_mode(engine_value: str) -> pb.PositionMode.ValueType:
    """The engine's position mode (a PositionMode, or its wire string) as the public enum."""
    return POSITION_MODES.get(PositionMode.from_wire(engine_value), pb.POSITION_MODE_UNSPECIFIED)


INTERIM_STABILITIES = {
    InterimStability.APPEND_ONLY: pb.INTERIM_STABILITY_APPEND_ONLY,
    InterimStability.REVISABLE: pb.INTERIM_STABILITY_REVISABLE,
}


def interim_stability(engine_value: str) -> pb.InterimStability.ValueType:
    """The engine's interim stability (an InterimStability, or its wire string) as the public enum."""
    return INTERIM_STABILITIES.get(InterimStability.from_wire(engine_value), pb.INTERIM_STABILITY_UNSPECIFIED)


def session_limits(max_duration_s: float, idle_timeout_s: float) -> pb.SessionLimits:
    return pb.SessionLimits(max_duration=duration_s(max_duration_s), idle_timeout=duration_s(idle_timeout_s))


def started(s: Started, cfg: SessionConfig, max_audio_bytes: int) -> pb.SessionStarted:
    eff = effective_config(cfg)
    return pb.SessionStarted(
        session_id=s.session_id,
        effective_config=eff,
        engine=pb.EngineInfo(name=s.engine, model=s.model),
        limits=eff.limits,
        max_audio_bytes_per_message=max_audio_bytes,
        resume_token=s.resume_token,
        resume_window=duration_s(s.resume_window_s),
        resumed=s.resumed,
        position_mode=position_mode(s.position_mode),
        position_mode_reason=s.position_mode_reason,
        interim_stability=interim_stability(s.interim_stability),
        phrase_hints=phrase_hints.session_support(cfg.phrase_hints, s.phrase_hints),
    )


def result(r: Result, with_words: bool) -> pb.RecognitionResult:
    words = (
        [
            pb.WordInfo(word=w.word, start_offset=duration_ms(w.start_ms), end_offset=duration_ms(w.end_ms))
            for w in r.words
        ]
        if with_words
        else []
    )
    return pb.RecognitionResult(
        result_id=r.result_id,
        utterance_index=r.utterance_index,
        is_final=r.is_final,
        text=r.text,
        delta=r.delta,
        start_offset=duration_ms(r.start_ms),
        end_offset=duration_ms(r.end_ms),
        words=words,
        revised=r.revised,
        channel=r.channel,
    )


def response(out: SessionOutput, seq: int, cfg: SessionConfig, max_audio_bytes: int) -> pb.StreamingRecognizeResponse:
    if isinstance(out, Result):
        return pb.StreamingRecognizeResponse(seq=seq, result=result(out, cfg.word_time_offsets))
    if isinstance(out, SpeechEvent):
        kind = pb.SPEECH_EVENT_TYPE_SPEECH_STARTED if out.started else pb.SPEECH_EVENT_TYPE_SPEECH_ENDED
        return pb.StreamingRecognizeResponse(
            seq=seq, speech_event=pb.SpeechEvent(type=kind, offset=duration_ms(out.offset_ms), channel=out.channel)
        )
    if isinstance(out, SoundEvent):
        event = pb.SpeechEvent(
            type=SOUNDS[out.sound], offset=duration_ms(out.offset_ms), channel=out.channel, digit=out.digit
        )
        return pb.StreamingRecognizeResponse(seq=seq, speech_event=event)
    if isinstance(out, Notice):
        return pb.StreamingRecognizeResponse(seq=seq, warning=pb.Warning(code=out.code, message=out.message))
    if isinstance(out, FlowReport):
        return pb.StreamingRecognizeResponse(
            seq=seq,
            flow_status=pb.FlowStatus(
                acked_audio_offset=duration_ms(out.acked_audio_ms),
                acked_audio_bytes=out.acked_audio_bytes,
                buffered_audio_ms=out.buffered_audio_ms,
                lag_ms=out.lag_ms,
            ),
        )
    if isinstance(out, HintsUpdated):
        return pb.StreamingRecognizeResponse(
            seq=seq,
            phrase_hints_updated=pb.PhraseHintsUpdated(
                phrase_hints=phrase_hints.to_proto(out.hints), audio_offset=duration_ms(out.audio_ms)
            ),
        )
    if isinstance(out, Ended):
        return pb.StreamingRecognizeResponse(
            seq=seq,
            ended=pb.SessionEnded(
                reason=END_REASONS[out.reason], message=out.message, audio_duration=duration_ms(out.audio_ms)
            ),
        )
    return pb.StreamingRecognizeResponse(seq=seq, started=started(out, cfg, max_audio_bytes))
