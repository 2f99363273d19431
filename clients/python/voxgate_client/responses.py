"""Plain, JSON-able views of responses, capabilities and errors.

The dicts mirror the proto with durations as float seconds and enums as short
lowercase names, so that `json.dumps` works on them and they read well in logs.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from ._proto import speech_pb2
from .encodings import encoding_from_proto

__all__ = [
    "capabilities_to_dict",
    "config_to_dict",
    "duration_s",
    "error_details",
    "format_error",
    "response_to_dict",
]

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
# grpc.aio reports a write that fails because the call is over (the server finished it while the
# client was still sending, or the connection went) as INTERNAL with this text, overwriting the
# call's real status (grpc/grpc#36066). The server's own INTERNAL always carries an ErrorInfo.
AIO_FAILED_WRITE = "Internal error from Core"
# A session that ends so closes its stream with an error status; any other end, with OK.
_ENDS_IN_ERROR = frozenset(
    {speech_pb2.SESSION_END_REASON_ERROR, speech_pb2.SESSION_END_REASON_ENGINE_LOST}
)


def is_aio_failed_write(error: grpc.RpcError) -> bool:
    """The grpc.aio artefact above, not a status the server sent."""
    code, details = getattr(error, "code", None), getattr(error, "details", None)
    return (
        callable(code)
        and code() == grpc.StatusCode.INTERNAL
        and callable(details)
        and details() == AIO_FAILED_WRITE
        and _status_details(error) is None
    )


def ends_with_ok(ended: speech_pb2.SessionEnded) -> bool:
    """Whether the server closes the stream with OK after this SessionEnded."""
    return ended.reason not in _ENDS_IN_ERROR


def duration_s(d: duration_pb2.Duration) -> float:
    """A proto Duration (an offset, a limit) as float seconds."""
    # Rounding to nanoseconds keeps e.g. 12.34 from printing as 12.340000000000002.
    return round(d.seconds + d.nanos / 1e9, 9)


def _enum_name(enum: Any, value: int, prefix: str) -> str:
    try:
        name: str = enum.Name(value)
    except ValueError:  # a value newer than this client's proto
        return str(value)
    return name.removeprefix(prefix).lower()


def _limits(limits: speech_pb2.SessionLimits) -> dict[str, float]:
    return {
        "max_duration_s": duration_s(limits.max_duration),
        "idle_timeout_s": duration_s(limits.idle_timeout),
    }


def config_to_dict(config: speech_pb2.StreamingConfig) -> dict[str, Any]:
    return {
        "encoding": encoding_from_proto(config.encoding),
        "sample_rate_hz": config.sample_rate_hz,
        "audio_channel_count": config.audio_channel_count,
        **({"channel_mode": _channel_mode(config.channel_mode)} if config.channel_mode else {}),
        "language_code": config.language_code,
        "interim_results": config.interim_results,
        "enable_word_time_offsets": config.enable_word_time_offsets,
        "endpointing_silence_ms": config.endpointing.silence_ms,
        "limits": _limits(config.limits),
        **({"phrase_hints": _phrases(config.phrase_hints)} if config.phrase_hints.phrases else {}),
    }


def _phrases(hints: speech_pb2.PhraseHints) -> list[dict[str, Any]]:
    return [
        {"value": p.value, **({"boost": round(p.boost, 6)} if p.HasField("boost") else {})}
        for p in hints.phrases
    ]


def _phrase_hint_support(value: int) -> str:
    """ "none" | "prompt" | "boost"; "" when not reported (a session without hints)."""
    if value == speech_pb2.PHRASE_HINT_SUPPORT_UNSPECIFIED:
        return ""
    return _enum_name(speech_pb2.PhraseHintSupport, value, "PHRASE_HINT_SUPPORT_")


def _channel_mode(value: int) -> str:
    return _enum_name(speech_pb2.ChannelMode, value, "CHANNEL_MODE_")


def _started(m: speech_pb2.SessionStarted) -> dict[str, Any]:
    return {
        "session_id": m.session_id,
        "engine": {"name": m.engine.name, "model": m.engine.model},
        "effective_config": config_to_dict(m.effective_config),
        "limits": _limits(m.limits),
        "max_audio_bytes_per_message": m.max_audio_bytes_per_message,
        "resumed": m.resumed,
        # "reanchor" | "rollover" | "capped"; "" when the engine has no position clock
        "position_mode": _position_mode(m.position_mode),
        "position_mode_reason": m.position_mode_reason,
        # "append_only" | "revisable" | "" (not reported): whether finals may revise interim text
        "interim_stability": _interim_stability(m.interim_stability),
        # what the engine does with the session's phrase hints; absent without hints
        **({"phrase_hints": _phrase_hint_support(m.phrase_hints)} if m.phrase_hints else {}),
    }


def _interim_stability(value: int) -> str:
    if value == speech_pb2.INTERIM_STABILITY_UNSPECIFIED:
        return ""
    return _enum_name(speech_pb2.InterimStability, value, "INTERIM_STABILITY_")


_POSITION_MODES: dict[int, str] = {
    speech_pb2.POSITION_MODE_REANCHOR: "reanchor",
    speech_pb2.POSITION_MODE_ROLLOVER: "rollover",
    speech_pb2.POSITION_MODE_CAPPED: "capped",
}


def _position_mode(mode: int) -> str:
    return _POSITION_MODES.get(mode, "")


def _result(m: speech_pb2.RecognitionResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "result_id": m.result_id,
        "utterance_index": m.utterance_index,
        "is_final": m.is_final,
        "text": m.text,
        "delta": m.delta,
        "start_s": duration_s(m.start_offset),
        "end_s": duration_s(m.end_offset),
    }
    if m.revised:  # a final that replaces the utterance's interim text rather than extending it
        out["revised"] = True
    if m.channel:  # separate recognition per channel: 1-based
        out["channel"] = m.channel
    if m.words:
        out["words"] = [
            {
                "word": w.word,
                "start_s": duration_s(w.start_offset),
                "end_s": duration_s(w.end_offset),
            }
            for w in m.words
        ]
    return out


def _speech_event(m: speech_pb2.SpeechEvent) -> dict[str, Any]:
    out: dict[str, Any] = {
        "event": _enum_name(speech_pb2.SpeechEventType, m.type, "SPEECH_EVENT_TYPE_"),
        "offset_s": duration_s(m.offset),
    }
    if m.digit:
        out["digit"] = m.digit
    if m.channel:
        out["channel"] = m.channel
    return out


def _ended(m: speech_pb2.SessionEnded) -> dict[str, Any]:
    return {
        "reason": _enum_name(speech_pb2.SessionEndReason, m.reason, "SESSION_END_REASON_"),
        "message": m.message,
        "audio_duration_s": duration_s(m.audio_duration),
    }


def _warning(m: speech_pb2.Warning) -> dict[str, Any]:
    return {"code": m.code, "message": m.message}


def _phrase_hints_updated(m: speech_pb2.PhraseHintsUpdated) -> dict[str, Any]:
    return {"phrases": _phrases(m.phrase_hints), "offset_s": duration_s(m.audio_offset)}


def response_to_dict(response: speech_pb2.StreamingRecognizeResponse) -> dict[str, Any]:
    """`{"seq": n, "type": kind, ...fields of that kind}`.

    `type` is the name of the set oneof field: started, result, speech_event, ended, warning,
    flow_status or phrase_hints_updated ("unknown" for a kind newer than this client).
    """
    kind = response.WhichOneof("response")
    out: dict[str, Any] = {"seq": response.seq, "type": kind or "unknown"}
    if kind == "started":
        out.update(_started(response.started))
    elif kind == "result":
        out.update(_result(response.result))
    elif kind == "speech_event":
        out.update(_speech_event(response.speech_event))
    elif kind == "ended":
        out.update(_ended(response.ended))
    elif kind == "warning":
        out.update(_warning(response.warning))
    elif kind == "phrase_hints_updated":
        out.update(_phrase_hints_updated(response.phrase_hints_updated))
    return out


def capabilities_to_dict(caps: speech_pb2.GetCapabilitiesResponse) -> dict[str, Any]:
    return {
        "encodings": [encoding_from_proto(e) or str(e) for e in caps.encodings],
        "min_sample_rate_hz": caps.min_sample_rate_hz,
        "max_sample_rate_hz": caps.max_sample_rate_hz,
        "max_audio_channel_count": caps.max_audio_channel_count,
        "languages": list(caps.languages),
        "engine": {"name": caps.engine.name, "model": caps.engine.model},
        "max_limits": _limits(caps.max_limits),
        "max_audio_bytes_per_message": caps.max_audio_bytes_per_message,
        "position_mode": _position_mode(caps.position_mode),
        "position_mode_reason": caps.position_mode_reason,
        "interim_stability": _interim_stability(caps.interim_stability),
        "phrase_hints": {
            "support": _phrase_hint_support(caps.phrase_hints.support),
            "max_phrases": caps.phrase_hints.max_phrases,
            "max_phrase_chars": caps.phrase_hints.max_phrase_chars,
            "min_boost": round(caps.phrase_hints.min_boost, 6),
            "max_boost": round(caps.phrase_hints.max_boost, 6),
            "default_boost": round(caps.phrase_hints.default_boost, 6),
        },
        "max_sessions": caps.max_sessions,
        "active_sessions": caps.active_sessions,
        "capacity": {
            "service_sessions": caps.capacity.service_sessions,
            "sidecar_slots": caps.capacity.sidecar_slots,
            "engine_sessions": caps.capacity.engine_sessions,
            "mismatches": caps.capacity.mismatches,
            "workers": [
                {"worker": w.worker, "sessions": w.sessions} for w in caps.capacity.workers
            ],
            "engines": [
                {
                    "engine": e.engine,
                    "ready": e.ready,
                    "sidecar_slots": e.sidecar_slots,
                    "engine_sessions": e.engine_sessions,
                    "max_sessions": e.max_sessions,
                }
                for e in caps.capacity.engines
            ],
        },
        **_runtime_entry(caps),
    }


def _runtime_entry(caps: speech_pb2.GetCapabilitiesResponse) -> dict[str, Any]:
    if not caps.HasField("position_runtime"):
        return {}
    return {"position_runtime": _position_runtime(caps.position_runtime)}


def _position_runtime(r: speech_pb2.PositionRuntime) -> dict[str, Any]:
    return {
        "model_runner": r.model_runner,
        "async_scheduling": r.async_scheduling,
        "kv_cache_dtype": r.kv_cache_dtype,
        "kv_groups": [
            {
                "kind": g.kind,
                "block_size": g.block_size,
                "window": g.window,
                "attention_backend": g.attention_backend,
                "key_layout": g.key_layout,
                "dtype": g.dtype,
            }
            for g in r.kv_groups
        ],
    }


def _status_details(error: grpc.RpcError) -> status_pb2.Status | None:
    trailing = getattr(error, "trailing_metadata", None)
    for key, value in (trailing() if callable(trailing) else None) or ():
        if key == _STATUS_DETAILS_KEY and isinstance(value, bytes):
            status = status_pb2.Status()
            try:
                status.ParseFromString(value)
            except Exception:  # malformed trailer: fall back to code + details
                return None
            return status
    return None


def error_details(error: grpc.RpcError) -> dict[str, Any]:
    """The code, message and google.rpc details of a failed RPC as a dict.

    Always has `code` (e.g. "UNAVAILABLE") and `message`; adds `reason`,
    `domain` and `metadata` from ErrorInfo, `retry_delay_s` from RetryInfo and
    `field_violations` from BadRequest when the server sent them.
    """
    code = getattr(error, "code", None)
    details = getattr(error, "details", None)
    status_code = code() if callable(code) else None
    status = _status_details(error)
    message = (details() if callable(details) else None) or (status.message if status else "")
    out: dict[str, Any] = {
        "code": status_code.name if isinstance(status_code, grpc.StatusCode) else "UNKNOWN",
        "message": message or str(error),
    }
    if status is None:
        return out
    for any_msg in status.details:
        info = error_details_pb2.ErrorInfo()
        retry = error_details_pb2.RetryInfo()
        bad = error_details_pb2.BadRequest()
        if any_msg.Unpack(info):
            out.update(reason=info.reason, domain=info.domain, metadata=dict(info.metadata))
        elif any_msg.Unpack(retry):
            out["retry_delay_s"] = duration_s(retry.retry_delay)
        elif any_msg.Unpack(bad):
            out["field_violations"] = [
                {"field": v.field, "description": v.description} for v in bad.field_violations
            ]
    return out


def format_error(details: dict[str, Any]) -> str:
    """One line for humans, e.g. 'UNAVAILABLE (CAPACITY): no free slot; retry in 2.0s'."""
    head = details["code"]
    if details.get("reason"):
        head += f" ({details['reason']})"
    line = f"{head}: {details['message']}"
    for violation in details.get("field_violations", ()):
        line += f"; {violation['field']}: {violation['description']}"
    if "retry_delay_s" in details:
        line += f"; retry in {details['retry_delay_s']:g}s"
    return line
