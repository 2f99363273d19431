"""The tripwire's comparison: every shift the scheduler issued, acknowledged by every worker rank, or reported.

Pure data (what one EngineCore poll returns); the end-to-end case on a real engine is
tests/engine/test_reanchor_tripwire.py.
"""

from __future__ import annotations

from typing import Any

from engine_api.info import KvGroupRuntime, PositionRuntime
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.voxtral.reanchor.tripwire import Unacknowledged, check
from engine_sidecar.engines.voxtral.reanchor_link import ReanchorLink, StreamListener, runtime_summary


def issued(seq: int, tag: str = "r1", tokens: int = 128, clock: int = 160) -> dict[str, Any]:
    return {"seq": seq, "req_id": f"vllm-{tag}", "tag": tag, "tokens": tokens, "clock": clock}


def event(seq: int, tag: str = "r1", tokens: int = 128, clock: int = 160) -> dict[str, Any]:
    return {"seq": seq, "tag": tag, "tokens": tokens, "clock": clock, "count": seq, "rotate_ms": 0.5, "blocks": 3}


def test_shifts_every_rank_applied_are_events_and_nothing_else_is_reported() -> None:
    verdict = check(
        {
            "issued": [issued(1), issued(2, "r2")],
            "ranks": [{"events": [event(1), event(2, "r2")]}, {"events": [event(2, "r2"), event(1)]}],
        }
    )
    assert [e["seq"] for e in verdict.applied] == [1, 2]
    assert verdict.unacknowledged == []


def test_a_shift_no_rank_applied_is_unacknowledged() -> None:
    verdict = check({"issued": [issued(5, tokens=256, clock=200)], "ranks": [{"events": []}]})
    assert verdict.applied == []
    (u,) = verdict.unacknowledged
    assert (u.tag, u.seq, u.tokens, u.clock, u.missing_ranks, u.ranks) == ("r1", 5, 256, 200, (0,), 1)
    assert "no worker rank rotated" in u.describe() and "by 256 to 200" in u.describe()


def test_a_shift_one_rank_of_two_missed_is_unacknowledged_naming_that_rank() -> None:
    verdict = check(
        {"issued": [issued(1), issued(2)], "ranks": [{"events": [event(1), event(2)]}, {"events": [event(1)]}]}
    )
    assert [e["seq"] for e in verdict.applied] == [1]
    (u,) = verdict.unacknowledged
    assert u.seq == 2 and u.missing_ranks == (1,) and "worker rank(s) 1 of 2" in u.describe()


def test_no_rank_answering_is_not_taken_for_an_acknowledgement() -> None:
    (u,) = check({"issued": [issued(1)], "ranks": []}).unacknowledged
    assert u.seq == 1


def test_events_whose_issue_record_was_dropped_are_still_events() -> None:
    verdict = check({"issued": [], "ranks": [{"events": [event(9)]}]})
    assert [e["seq"] for e in verdict.applied] == [9]


def test_the_link_hands_events_and_failures_to_their_sessions_in_issue_order_and_counts_them() -> None:
    counters = EngineCounters()
    link = ReanchorLink(counters)
    seen: list[tuple[str, int]] = []
    link.listeners["r1"] = StreamListener(
        lambda e: seen.append(("event", e["seq"])), lambda u: seen.append(("failure", u.seq))
    )
    link.dispatch(
        {"issued": [issued(1), issued(2), issued(3, "gone")], "ranks": [{"events": [event(1), event(3, "gone")]}]}
    )
    assert seen == [("event", 1), ("failure", 2)]
    assert counters.extra == {"reanchors": 2, "reanchor_unacknowledged": 1}
    assert isinstance(Unacknowledged("r", 1, 1, 1, (0,), 1).describe(), str)


def test_what_runs_is_summarised_per_kv_group() -> None:
    report = {
        "ok": True,
        "block_sizes": [128, 32],
        "windows": [128, 750],
        "runtime": {
            "runner": "vllm.v1.worker.cpu_model_runner.CPUModelRunner",
            "async_scheduling": False,
            "backends": ["CPUAttentionBackendImpl", "CPUAttentionBackendImpl"],
            "kv_cache_dtype": "auto",
        },
        "layers": [
            {"group": 0, "kind": "decoder", "layout": "token[32·1] dim[64·32]", "dtype": "float32"},
            {"group": 1, "kind": "encoder", "layout": "token[32·1] dim[64·32]", "dtype": "float32"},
        ],
    }
    runtime = runtime_summary(report)
    assert runtime is not None
    assert runtime.kv_groups[0] == KvGroupRuntime(
        "decoder", 128, 128, "CPUAttentionBackendImpl", "token[32·1] dim[64·32]", "float32"
    )
    line = runtime.describe()
    assert "runner vllm.v1.worker.cpu_model_runner.CPUModelRunner, async scheduling off" in line
    assert "group 1 (encoder, block 32, window 750): CPUAttentionBackendImpl, float32, keys token[32·1]" in line
    # A refusal reports what the workers found without layers (no probe ran): backends and geometry only.
    refused = runtime_summary(
        {
            "ok": False,
            "reason": "x",
            "block_sizes": [128],
            "windows": [0],
            "runtime": {"runner": "V2", "async_scheduling": True, "backends": ["FlashAttn"], "kv_cache_dtype": "fp8"},
        }
    )
    assert refused is not None
    assert "keys not probed" in refused.describe() and "async scheduling on" in refused.describe()
    assert runtime_summary({"ok": False, "reason": "x"}) is None


def test_the_runtime_reaches_the_public_capabilities_and_the_client() -> None:
    from engine_api.v1 import engine_pb2
    from engine_api.wire import runtime_to_proto
    from service.proto_edge import position_runtime
    from voxgate_client.responses import capabilities_to_dict
    from voxgate_client.v1 import speech_pb2

    runtime = PositionRuntime("R", False, "auto", (KvGroupRuntime("decoder", 128, 128, "B", "L", "float32"),))
    status = engine_pb2.GetStatusResponse(position_runtime=runtime_to_proto(runtime))
    caps = speech_pb2.GetCapabilitiesResponse(position_runtime=position_runtime(status))
    assert capabilities_to_dict(caps)["position_runtime"] == {
        "model_runner": "R",
        "async_scheduling": False,
        "kv_cache_dtype": "auto",
        "kv_groups": [
            {
                "kind": "decoder",
                "block_size": 128,
                "window": 128,
                "attention_backend": "B",
                "key_layout": "L",
                "dtype": "float32",
            }
        ],
    }
    assert position_runtime(engine_pb2.GetStatusResponse()) is None
    assert "position_runtime" not in capabilities_to_dict(speech_pb2.GetCapabilitiesResponse())


def test_front_ends_sharing_a_core_each_get_their_own_shifts_and_acks_and_never_lose_the_others() -> None:
    """Several front ends on one engine core (process/core_host.py): a poll drains everything; each front end's
    news (its tag prefix) goes to it, with every rank's acknowledgement, whichever front end polled first."""
    from engine_sidecar.engines.voxtral.reanchor.tripwire import Mailbox

    box = Mailbox()
    ranks = [
        {"events": [event(1, "voxgate.c0-a-0"), event(2, "voxgate.c1-b-0")], "total": 2, "armed": True},
        {"events": [event(2, "voxgate.c1-b-0"), event(1, "voxgate.c0-a-0")], "total": 2, "armed": True},
    ]
    first = box.exchange([issued(1, "voxgate.c0-a-0"), issued(2, "voxgate.c1-b-0")], ranks, "voxgate.c1-")
    second = box.exchange([], [{"events": [], "total": 2, "armed": True}] * 2, "voxgate.c0-")
    again = box.exchange([], [{"events": [], "total": 2, "armed": True}] * 2, "voxgate.c1-")
    for report, seq, tag in ((first, 2, "voxgate.c1-b-0"), (second, 1, "voxgate.c0-a-0")):
        verdict = check(report)
        assert [(e["seq"], e["tag"]) for e in verdict.applied] == [(seq, tag)]
        assert verdict.unacknowledged == []
        assert [r["armed"] for r in report["ranks"]] == [True, True]
    assert check(again).applied == [] and check(again).unacknowledged == []
    # A prefix is not a prefix of another front end's (slot 1 vs 10).
    box.exchange([issued(3, "voxgate.c10-z-0")], [{"events": [event(3, "voxgate.c10-z-0")]}], "voxgate.c1-")
    assert check(box.exchange([], [{"events": []}], "voxgate.c10-")).applied[0]["seq"] == 3
