"""ReanchorAsyncScheduler driven at scheduler level on the CPU, step by step, against ReanchorScheduler.

vLLM forces async scheduling off on the CPU, so no engine here ever runs the async variant. Its scheduler needs no
engine, though: both are built from a hand-made VllmConfig (a config.json-only model, no weights, no tokenizer) and
a hand-made KVCacheConfig with two sliding-window groups of different block sizes (like Voxtral's decoder and
encoder groups), and driven the way vLLM's EngineCore drives them:

- sync (`EngineCore.step`): schedule, execute, update — each step's output comes back before the next schedule;
- async (`EngineCore.step_with_batch_queue`, two batches in flight): the next step is scheduled before the
  previous step's output is back, so every output arrives one step late.

A streaming session is fed like the realtime front end feeds it: one chunk per step, each a resumable request of
one prompt token whose output is sampled and which then stops (`max_tokens` 1, Voxtral's `realtime_max_tokens`);
the next chunk resumes it (`_update_request_as_session`), which is where a shift may fire.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_guard import import_vllm

import_vllm("vllm")  # skips without vLLM, fails in CI (VOXGATE_REQUIRE_VLLM=1)

MAX_MODEL_LEN = 160
MARGIN = 32
DECODER_BLOCK, ENCODER_BLOCK = 16, 4  # shifts are multiples of 16
DECODER_WINDOW, ENCODER_WINDOW = 32, 24
STOP_TOKEN = 999


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config-only-model")
    (path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["MistralForCausalLM"],
                "model_type": "mistral",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 2,
                "vocab_size": 1000,
                "max_position_embeddings": 4096,
                "sliding_window": DECODER_WINDOW,
                "rope_theta": 10000.0,
                "torch_dtype": "float32",
            }
        )
    )
    return path


def build(model_dir: Path, async_scheduling: bool) -> Any:
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec
    from vllm.v1.structured_output import StructuredOutputManager

    from engine_sidecar.engines.voxtral.reanchor.scheduler import ReanchorAsyncScheduler, ReanchorScheduler
    from engine_sidecar.engines.voxtral.reanchor.settings import ReanchorSettings

    model = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN, dtype="float32")
    config = VllmConfig(
        model_config=model,
        scheduler_config=SchedulerConfig(
            max_num_seqs=4,
            max_num_batched_tokens=512,
            max_model_len=MAX_MODEL_LEN,
            is_encoder_decoder=False,
            enable_chunked_prefill=True,
        ),
        cache_config=CacheConfig(block_size=DECODER_BLOCK, enable_prefix_caching=False),
        additional_config=ReanchorSettings(margin_tokens=MARGIN).as_config(),
    )
    # What vLLM resolves on a GPU (the CPU platform forces it off while building the config).
    config.scheduler_config.async_scheduling = async_scheduling
    config.cache_config.num_gpu_blocks = 64

    def group(name: str, block: int, window: int) -> Any:
        return KVCacheGroupSpec(
            [name],
            SlidingWindowSpec(
                block_size=block, num_kv_heads=1, head_size=8, dtype=torch.float32, sliding_window=window
            ),
        )

    kv = KVCacheConfig(
        num_blocks=64,
        kv_cache_tensors=[],
        kv_cache_groups=[
            group("decoder", DECODER_BLOCK, DECODER_WINDOW),
            group("encoder", ENCODER_BLOCK, ENCODER_WINDOW),
        ],
    )
    cls = ReanchorAsyncScheduler if async_scheduling else ReanchorScheduler
    return cls(
        vllm_config=config,
        kv_cache_config=kv,
        block_size=DECODER_BLOCK,
        log_stats=False,
        structured_output_manager=StructuredOutputManager(config),
    )


@dataclass
class Run:
    shifts: list[tuple[int, int, tuple[tuple[int, ...], ...]]] = field(default_factory=list)  # (D, clock, blocks)
    state: tuple[int, int, int] = (0, 0, 0)  # the session at the end: computed tokens, tokens, prompt tokens
    in_flight_at_shift: list[int] = field(default_factory=list)  # the session's in-flight tokens at each shift
    deferred: int = 0  # chunk boundaries at which the async variant held a due shift back
    chunks: int = 0


def drive(
    model_dir: Path,
    async_scheduling: bool,
    chunks: int,
    *,
    ahead: bool = False,
    stop_early: bool = False,
    connect: bool = True,
) -> Run:
    """Feed one streaming session `chunks` chunks. ahead: each chunk is sent as soon as the previous one is
    scheduled (it waits in the session's streaming queue while that one is in flight), not after its output.
    stop_early: chunks may decode up to 4 tokens but the first sampled token stops them, so under async
    scheduling a second step of the chunk is already in flight when it stops (its output goes stale)."""
    from vllm import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    from engine_sidecar.engines.voxtral.reanchor.settings import REQUEST_TAG

    sched = build(model_dir, async_scheduling)
    run = Run()
    handed: list[Any] = []  # what the scheduler hands the workers, as the engine core's collective_rpc would
    if connect:
        sched.voxgate_connect(handed.append)
    original_shift, original_idle = sched._vg_maybe_shift, sched._vg_idle

    def maybe_shift(session: Any, tag: str) -> None:
        before = dict(sched._vg_pending)
        original_shift(session, tag)
        if sched._vg_pending != before:
            run.in_flight_at_shift.append(session.num_in_flight_tokens + session.num_output_placeholders)

    def idle(session: Any) -> bool:
        result = bool(original_idle(session))
        run.deferred += not result and session.num_tokens >= MAX_MODEL_LEN - MARGIN
        return result

    sched._vg_maybe_shift, sched._vg_idle = maybe_shift, idle

    def chunk(token: int) -> Any:
        params = SamplingParams(
            max_tokens=4 if stop_early else 1,
            temperature=0.0,
            stop_token_ids=[STOP_TOKEN] if stop_early else None,
            extra_args={REQUEST_TAG: "front-end-id"},
        )
        run.chunks += 1
        return Request("session", [token], params, None, resumable=True)

    sched.add_request(Request("session", list(range(1, 9)), chunk(0).sampling_params, None, resumable=True))

    def complete(out: Any) -> None:
        """The worker's answer to one step: one sampled token per scheduled request."""
        ids = list(out.num_scheduled_tokens)
        token = STOP_TOKEN if stop_early else 100 + run.chunks % 50
        results = sched.update_from_output(
            out,
            ModelRunnerOutput(
                req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)}, sampled_token_ids=[[token] for _ in ids]
            ),
        )
        for outputs in results.values():
            for o in outputs.outputs:
                if o.new_token_ids and not ahead and run.chunks < chunks:
                    sched.add_request(chunk(o.new_token_ids[-1]))  # lock-step: the output is the next prompt

    in_flight: deque[Any] = deque()
    quiet = 0  # consecutive steps that scheduled nothing, with nothing in flight: the session is drained
    for _ in range(8 * chunks):
        out = sched.schedule()
        while handed:
            assert out.total_num_scheduled_tokens > 0  # handed over with a step that runs the model
            run.shifts += [(s.tokens, s.clock, s.blocks) for s in handed.pop(0)]
        if ahead and "session" in out.num_scheduled_tokens and run.chunks < chunks:
            sched.add_request(chunk(7))
        if not async_scheduling:
            complete(out)
        else:
            in_flight.append(out)
            while in_flight and (len(in_flight) == 2 or out.total_num_scheduled_tokens == 0):
                complete(in_flight.popleft())
        quiet = quiet + 1 if not in_flight and out.total_num_scheduled_tokens == 0 else 0
        if run.chunks >= chunks and quiet >= 2:
            break
    session = sched.requests["session"]
    run.state = (session.num_computed_tokens, session.num_tokens, session.num_prompt_tokens)
    return run


def test_outputs_one_step_late_give_the_same_shifts_as_the_sync_scheduler(model_dir: Path) -> None:
    sync = drive(model_dir, async_scheduling=False, chunks=400)
    late = drive(model_dir, async_scheduling=True, chunks=400)
    assert len(sync.shifts) >= 3, sync.shifts
    assert late.shifts == sync.shifts  # the same D, clock and live blocks of both groups, event for event
    assert late.state == sync.state
    unit = DECODER_BLOCK  # lcm of the groups' block sizes
    for tokens, clock, blocks in sync.shifts:
        # It fires as the resumed session reaches max_model_len - margin (its clock counts computed tokens, one less).
        assert tokens % unit == 0 and clock + tokens + 1 >= MAX_MODEL_LEN - MARGIN > clock
        assert all(blocks), "every group keeps live blocks to rotate"
    assert late.deferred == 0  # lock-step: the session is idle at every chunk boundary


def test_chunks_queued_while_the_previous_one_is_in_flight_give_the_same_shifts(model_dir: Path) -> None:
    """Stop/resume through the session's streaming queue: the next chunk arrives before the previous one's output,
    waits in the queue, and resumes the session when that output stops it."""
    sync = drive(model_dir, async_scheduling=False, chunks=400, ahead=True)
    late = drive(model_dir, async_scheduling=True, chunks=400, ahead=True)
    assert len(sync.shifts) >= 3
    assert late.shifts == sync.shifts and late.state == sync.state


def test_the_async_scheduler_never_shifts_a_session_with_work_in_flight(model_dir: Path) -> None:
    """A chunk that stops on its first token while its next decode step is already scheduled (async only):
    the session resumes with that step's output still to come (stale). The async variant holds the shift back
    until nothing of the session is in flight; the sync one never has anything in flight."""
    sync = drive(model_dir, async_scheduling=False, chunks=300, stop_early=True)
    late = drive(model_dir, async_scheduling=True, chunks=300, stop_early=True)
    assert sync.shifts and sync.deferred == 0 and set(sync.in_flight_at_shift) == {0}
    assert late.deferred > 0, "the case must arise: a due shift with the session's work in flight"
    assert late.shifts, "a held-back shift is issued once the session is idle"
    assert set(late.in_flight_at_shift) == {0}, late.in_flight_at_shift
    for tokens, clock, _ in late.shifts:
        assert tokens % DECODER_BLOCK == 0 and 0 < clock < MAX_MODEL_LEN - MARGIN


def test_a_scheduler_not_connected_to_the_workers_never_shifts(model_dir: Path) -> None:
    """Shifting positions with nobody to rotate the keys would corrupt the session: without the engine core's
    connection (reanchor/engine_core.py) the clock runs into max_model_len as stock vLLM's would."""
    for async_scheduling in (False, True):
        connected = drive(model_dir, async_scheduling, 130)
        alone = drive(model_dir, async_scheduling, 130, connect=False)
        assert connected.shifts and alone.shifts == []
        assert alone.state[0] >= MAX_MODEL_LEN - MARGIN > connected.state[0]
