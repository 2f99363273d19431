"""The contract's dataclasses <-> the engine API's protobuf messages: the one converter both sides use.

The sidecar turns its engine's outputs, info and status into messages; the service turns messages back
into the same dataclasses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._proto import engine_pb2 as pb
from .info import EngineInfo, PositionMode, PositionRuntime
from .outputs import Closed, Delta, Diagnostic, DiagnosticKind, EngineOutput, Flushed, Progress, Revision
from .status import EngineStatus, SessionStat

DIAGNOSTIC_KINDS: dict[DiagnosticKind, pb.DiagnosticKind.ValueType] = {
    DiagnosticKind.WARNING: pb.DIAGNOSTIC_KIND_WARNING,
    DiagnosticKind.ROLLOVER: pb.DIAGNOSTIC_KIND_ROLLOVER,
    DiagnosticKind.REANCHOR: pb.DIAGNOSTIC_KIND_REANCHOR,
    DiagnosticKind.RUT_RECOVERY: pb.DIAGNOSTIC_KIND_RUT_RECOVERY,
    DiagnosticKind.FREEZE_RECOVERY: pb.DIAGNOSTIC_KIND_FREEZE_RECOVERY,
    DiagnosticKind.REANCHOR_FAILED: pb.DIAGNOSTIC_KIND_REANCHOR_FAILED,
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
        return pb.SessionOutput(
            diagnostic=pb.Diagnostic(
                kind=DIAGNOSTIC_KINDS.get(out.kind, pb.DIAGNOSTIC_KIND_WARNING), message=out.message, at_ms=out.at_ms
            )
        )
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
        return Diagnostic(kind=DIAGNOSTIC_NAMES.get(g.kind, DiagnosticKind.WARNING), message=g.message, at_ms=g.at_ms)
    if kind == "closed":
        return Closed(audio_ms=msg.closed.audio_ms)
    if kind == "progress":
        return Progress(audio_ms=msg.progress.audio_ms)
    return None


def opened_to_proto(info: EngineInfo) -> pb.SessionOutput:
    return pb.SessionOutput(
        opened=pb.Opened(
            engine=info.name,
            model=info.model,
            frame_ms=info.frame_ms,
            transcription_delay_ms=info.transcription_delay_ms,
            position_mode=info.position_mode,
            position_mode_reason=info.position_mode_reason,
            interim_stability=info.interim_stability,
            phrase_hints=info.phrase_hints,
        )
    )


def runtime_to_proto(runtime: PositionRuntime | None) -> pb.PositionRuntime | None:
    if runtime is None:
        return None
    return pb.PositionRuntime(
        model_runner=runtime.model_runner,
        async_scheduling=runtime.async_scheduling,
        kv_cache_dtype=runtime.kv_cache_dtype,
        kv_groups=[
            pb.KvGroupRuntime(
                kind=g.kind,
                block_size=g.block_size,
                window=g.window,
                attention_backend=g.attention_backend,
                key_layout=g.key_layout,
                dtype=g.dtype,
            )
            for g in runtime.kv_groups
        ],
    )


def status_to_proto(
    info: EngineInfo,
    status: EngineStatus,
    counters: Mapping[str, int],
    *,
    active_sessions: int,
    opening_sessions: int,
    pid: int,
    frontend_sockets: Sequence[str] = (),
) -> pb.GetStatusResponse:
    """The sidecar's answer to GetStatus: the engine's info and status, the sidecar's own slot counts, and the
    sockets of the front ends that share its engine core."""
    return pb.GetStatusResponse(
        ready=True,
        engine=info.name,
        model=info.model,
        max_sessions=info.max_sessions,
        active_sessions=active_sessions,
        opening_sessions=opening_sessions,
        languages=list(info.languages),
        counters=dict(counters),
        pid=pid,
        position_mode=info.position_mode,
        position_mode_reason=info.position_mode_reason,
        position_runtime=runtime_to_proto(info.position_runtime),
        interim_stability=info.interim_stability,
        phrase_hints=info.phrase_hints,
        admitting=status.admitting,
        admission_refusal=status.refusal,
        frontend_sockets=list(frontend_sockets),
        sessions=[
            pb.SessionStat(
                session_id=s.session_id,
                audio_ms=s.audio_ms,
                reanchors=s.reanchors,
                clock=s.clock,
                position_mode=s.position_mode,
            )
            for s in status.sessions
        ],
    )


def status_from_proto(msg: pb.GetStatusResponse) -> EngineStatus:
    """The engine's status as the sidecar reported it. A sidecar that does not say (an older one) admits."""
    return EngineStatus(
        admitting=msg.admitting if msg.HasField("admitting") else True,
        refusal=msg.admission_refusal,
        sessions=tuple(
            SessionStat(
                session_id=s.session_id,
                audio_ms=s.audio_ms,
                reanchors=s.reanchors,
                clock=s.clock,
                position_mode=PositionMode.from_wire(s.position_mode),
            )
            for s in msg.sessions
        ),
    )
