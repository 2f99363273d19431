"""Engine dataclasses <-> internal protobuf messages (the sidecar's edge)."""

from __future__ import annotations

from ._proto import engine_pb2 as pb
from .engine import Closed, Delta, Diagnostic, EngineInfo, EngineOutput, Flushed, PositionRuntime, Progress, Revision

DIAGNOSTIC_KINDS = {
    "warning": pb.DIAGNOSTIC_KIND_WARNING,
    "rollover": pb.DIAGNOSTIC_KIND_ROLLOVER,
    "reanchor": pb.DIAGNOSTIC_KIND_REANCHOR,
    "rut_recovery": pb.DIAGNOSTIC_KIND_RUT_RECOVERY,
    "freeze_recovery": pb.DIAGNOSTIC_KIND_FREEZE_RECOVERY,
    "reanchor_failed": pb.DIAGNOSTIC_KIND_REANCHOR_FAILED,
}
DIAGNOSTIC_NAMES = {v: k for k, v in DIAGNOSTIC_KINDS.items()}


def _delta_to_proto(d: Delta) -> pb.TextDelta:
    return pb.TextDelta(text=d.text, start_ms=d.start_ms, end_ms=d.end_ms, token_ids=list(d.token_ids))


def _delta_from_proto(d: pb.TextDelta) -> Delta:
    return Delta(text=d.text, start_ms=d.start_ms, end_ms=d.end_ms, token_ids=tuple(d.token_ids))


def output_to_proto(out: EngineOutput) -> pb.SessionOutput:
    if isinstance(out, Delta):
        return pb.SessionOutput(delta=_delta_to_proto(out))
    if isinstance(out, Revision):
        return pb.SessionOutput(revision=pb.Revision(deltas=[_delta_to_proto(d) for d in out.deltas]))
    if isinstance(out, Flushed):
        return pb.SessionOutput(flushed=pb.Flushed(marker=out.marker, audio_ms=out.audio_ms))
    if isinstance(out, Diagnostic):
        return pb.SessionOutput(diagnostic=pb.Diagnostic(
            kind=DIAGNOSTIC_KINDS.get(out.kind, pb.DIAGNOSTIC_KIND_WARNING), message=out.message, at_ms=out.at_ms))
    if isinstance(out, Progress):
        return pb.SessionOutput(progress=pb.Progress(audio_ms=out.audio_ms))
    return pb.SessionOutput(closed=pb.Closed(audio_ms=out.audio_ms))


def output_from_proto(msg: pb.SessionOutput) -> EngineOutput | None:
    """None for messages that are not outputs (Opened)."""
    kind = msg.WhichOneof("output")
    if kind == "delta":
        return _delta_from_proto(msg.delta)
    if kind == "revision":
        return Revision(tuple(_delta_from_proto(d) for d in msg.revision.deltas))
    if kind == "flushed":
        return Flushed(marker=msg.flushed.marker, audio_ms=msg.flushed.audio_ms)
    if kind == "diagnostic":
        g = msg.diagnostic
        return Diagnostic(kind=DIAGNOSTIC_NAMES.get(g.kind, "warning"), message=g.message, at_ms=g.at_ms)
    if kind == "closed":
        return Closed(audio_ms=msg.closed.audio_ms)
    if kind == "progress":
        return Progress(audio_ms=msg.progress.audio_ms)
    return None


def opened_to_proto(info: EngineInfo) -> pb.SessionOutput:
    return pb.SessionOutput(opened=pb.Opened(
        engine=info.name, model=info.model, frame_ms=info.frame_ms,
        transcription_delay_ms=info.transcription_delay_ms, position_mode=info.position_mode,
        position_mode_reason=info.position_mode_reason, interim_stability=info.interim_stability))


def runtime_to_proto(runtime: PositionRuntime | None) -> pb.PositionRuntime | None:
    if runtime is None:
        return None
    return pb.PositionRuntime(
        model_runner=runtime.model_runner, async_scheduling=runtime.async_scheduling,
        kv_cache_dtype=runtime.kv_cache_dtype,
        kv_groups=[pb.KvGroupRuntime(kind=g.kind, block_size=g.block_size, window=g.window,
                                     attention_backend=g.attention_backend, key_layout=g.key_layout, dtype=g.dtype)
                   for g in runtime.kv_groups])
