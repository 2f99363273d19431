"""The voxtral engine's pure parts: options, timing formula, rollover policy, watchdog (no vLLM needed)."""

from __future__ import annotations

import pytest

from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.engines.voxtral.phrase_trie import PROCESSOR_V1, PROCESSOR_V2
from engine_sidecar.engines.voxtral.rollover import BudgetRollover
from engine_sidecar.engines.voxtral.timing import StreamGeometry
from engine_sidecar.engines.voxtral.vllm_window.versions import RELEASES
from engine_sidecar.engines.voxtral.watchdog import FREEZE, RUT, Watchdog

# Voxtral-Mini-4B-Realtime's tokenizer values (and the tiny checkpoint's).
G = StreamGeometry(
    prompt_tokens=23,
    left_pad_frames=16,
    right_pad_frames=17,
    delay_ms=480,
    frame_ms=80,
    samples_per_frame=1280,
    blank_token_id=32,
)


def test_options_from_a_dict_of_flags() -> None:
    o = VoxtralOptions.from_mapping({"max-model-len": 4096, "max_num_seqs": 4, "decoder_sliding_window": 512})
    assert (o.max_model_len, o.max_num_seqs, o.batched_tokens()) == (4096, 4, 1600)
    kwargs = o.engine_kwargs("/m", on_cpu=True)
    assert kwargs["mm_processor_cache_gb"] == 0 and kwargs["enable_prefix_caching"] is False
    assert kwargs["enforce_eager"] is True and "gpu_memory_utilization" not in kwargs
    assert kwargs["hf_overrides"] == {"text_config": {"sliding_window": 512}}
    assert o.engine_kwargs("/m", on_cpu=False)["enforce_eager"] is False
    with pytest.raises(ValueError, match="unknown voxtral option"):
        VoxtralOptions.from_mapping({"max_model_length": 1})
    with pytest.raises(ValueError):
        VoxtralOptions.from_mapping({"max_model_len": 64})


def test_the_phrase_bias_processor_follows_the_model_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    o = VoxtralOptions()
    assert o.phrase_bias_processor(RELEASES["0.32"]) == PROCESSOR_V1
    assert o.phrase_bias_processor(RELEASES["0.34"]) == PROCESSOR_V2, "0.34 has only model runner V2"
    assert o.phrase_bias_processor(None) is None, "an unlisted vLLM: nothing vouches for its internals"
    assert VoxtralOptions.from_mapping({"phrase_bias": "false"}).phrase_bias_processor(RELEASES["0.32"]) is None
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert o.phrase_bias_processor(RELEASES["0.33"]) == PROCESSOR_V2
    assert o.engine_kwargs("/m", on_cpu=True, phrase_bias=PROCESSOR_V2)["logits_processors"] == [PROCESSOR_V2]
    assert "logits_processors" not in o.engine_kwargs("/m", on_cpu=True)


def test_the_stall_timeout_is_also_taken_by_its_old_name() -> None:
    # The engine's stall watchdog was `freeze_timeout_s`, the name of the service's own freeze watch too.
    assert VoxtralOptions().stall_timeout_s == 10.0
    assert VoxtralOptions.from_mapping({"freeze_timeout_s": 3.0}).stall_timeout_s == 3.0
    assert VoxtralOptions.from_mapping({"stall-timeout-s": 4.0}).stall_timeout_s == 4.0
    with pytest.raises(ValueError, match="given twice"):
        VoxtralOptions.from_mapping({"freeze_timeout_s": 3.0, "stall_timeout_s": 4.0})


def test_token_k_covers_frame_k_of_the_request() -> None:
    assert [G.token_span_ms(k, 0, 10_000) for k in range(3)] == [(0, 80), (80, 160), (160, 240)]
    assert G.token_span_ms(5, 17_440, 10_000) == (17_440 + 400, 17_440 + 480)  # after a rollover
    assert G.token_span_ms(130, 0, 10_000) == (9_920, 10_000)  # right padding: clamped to the audio
    assert G.token_span_ms(200, 0, 10_000) == (9_920, 10_000)


def test_request_capacity_leaves_room_for_padding() -> None:
    assert G.max_request_samples(256, 4) == (256 - 16 - 17 - 1 - 4) * 1280
    with pytest.raises(ValueError):
        G.max_request_samples(48, 4)


def test_rollover_prefers_silence_then_the_cap() -> None:
    p = BudgetRollover.for_cap(cap_samples=100_000, silence_window_samples=30_000)
    assert p.soft_samples == 70_000
    assert p.split(10_000, 1_280, speech=False) is None  # too early to bother
    assert p.split(70_000, 1_280, speech=True) is None
    assert p.split(70_000, 1_280, speech=False) == 0  # silence past the soft mark: roll before it
    assert p.split(99_000, 5_120, speech=True) == 1_000  # at the cap: split the chunk
    assert BudgetRollover.for_cap(100_000, 90_000).soft_samples == 50_000


def test_watchdog_rut_needs_speech_and_a_long_blank_run() -> None:
    now = [0.0]
    dog = Watchdog(rut_blank_frames=10, stall_timeout_s=5.0, frame_ms=80, clock=lambda: now[0])
    for _ in range(20):
        dog.on_token(blank=True)
        dog.on_audio(80, speech=False)
    assert dog.check(backlog_ms=0) is None  # blanks over silence are healthy
    for _ in range(11):
        dog.on_token(blank=True)
        dog.on_audio(80, speech=True)
    assert dog.check(backlog_ms=0) == RUT
    dog.on_token(blank=False)
    assert dog.check(backlog_ms=0) is None


def test_watchdog_stall_needs_audio_waiting() -> None:
    now = [0.0]
    dog = Watchdog(rut_blank_frames=0, stall_timeout_s=5.0, frame_ms=80, clock=lambda: now[0])
    now[0] = 6.0
    assert dog.check(backlog_ms=0) is None  # nothing fed: silence from the client is not a freeze
    assert dog.check(backlog_ms=400) == FREEZE
    dog.on_token(blank=True)
    assert dog.check(backlog_ms=400) is None


def test_kv_sessions_from_the_pool_and_the_windows() -> None:
    from engine_sidecar.engines.voxtral.admission import kv_sessions

    # Tiny model on CPU: decoder window 128 in blocks of 512 -> 2 blocks; encoder 17 in blocks of 128 -> 2.
    assert kv_sessions(2048, [512, 128], [128, 17], 8192) == 2047 // 4
    # Real model, block size 16 on CUDA: decoder (128-token blocks) window 8192 -> 65; encoder 16 -> 750/16 -> 48.
    assert kv_sessions(10_000, [128, 16], [8192, 750], 16384) == 9999 // 113
    # Full attention holds up to max_model_len.
    assert kv_sessions(1000, [16], [None], 4096) == 999 // 257


def test_admission_refuses_only_while_a_session_is_behind_real_time() -> None:
    from engine_sidecar.engines.voxtral.admission import lag_refusal

    assert lag_refusal([0, 200, 900], 1000) is None
    refusal = lag_refusal([0, 1500, 2500], 1000)
    assert refusal is not None and "2 session(s) behind real time by up to 2500 ms" in refusal
    assert lag_refusal([5000], 0) is None  # off
