from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ServerProcess, start_server
from tests.numeric_paths import describe, read_cpu

# CI (.ci/run) sets VOXGATE_FAIL_ON_SKIP=1: there every skip is a failure, except under these paths, each
# listed with its reason in docs/testing.md (tests/unit/test_ci_skips.py keeps the two in step).
CI_ALLOWED_SKIPS = {
    "tests/gpu/": "needs an NVIDIA GPU; CI has none (scripts/device_check_reanchor.sh runs them on a GPU box)",
}
FAIL_ON_SKIP = os.environ.get("VOXGATE_FAIL_ON_SKIP") == "1"


def _fail_disallowed_skip(report: Any) -> None:
    if not (FAIL_ON_SKIP and report.skipped and not hasattr(report, "wasxfail")):
        return
    if any(report.nodeid.startswith(prefix) for prefix in CI_ALLOWED_SKIPS):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped, and skips fail in CI (VOXGATE_FAIL_ON_SKIP=1): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    _fail_disallowed_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield  # a module-level pytest.importorskip skips the whole module here
    _fail_disallowed_skip(outcome.get_result())


# pytest-timeout (pyproject: 300 s) must outlast a test's setup plus the longest single wait it makes, so
# that a stuck step fails with its own message. vLLM starts in up to 240 s (tests/engine/conftest.py Harness)
# and one engine step may wait 600 s on a busy box: 900 s under these directories. A test or module that
# waits longer carries its own @pytest.mark.timeout, which wins.
DIRECTORY_TIMEOUTS_S = {"tests/engine/": 900, "tests/gpu/": 900}


# The extended lane: `make test` leaves these out, `make test-extended` runs them, and CI runs them after
# `make test` while its time allows (.ci/run). Each takes minutes for what it adds to the coverage `make test`
# already has. What it is, and why it is here (times: pytest --durations, 2 cores, 2026-12-05).
EXTENDED_LANE: dict[str, str] = {
    "tests/integration/test_worker_loss.py::test_sigusr2_replaces_every_worker_in_turn_without_losing_a_final": (
        "both workers replaced on SIGUSR2 under 4 sphinx sessions (30 s); the worker SIGKILL test stays"
    ),
    "tests/integration/test_worker_loss.py::test_a_rolling_restart_of_every_worker_loses_no_final_and_repeats_none": (
        "both workers restarted in turn under 8 real-time sphinx sessions (45 s); the worker SIGKILL test and "
        "tests/session/test_ending.py's drains at the endpoint stay"
    ),
    "tests/engine/test_reanchor_memory.py": "one 12-minute session re-anchoring at flat memory (70 s to 10 min); "
    "`make soak-memory` runs it longer, test_reanchor.py checks re-anchoring token for token",
    "tests/engine/test_reanchor_bf16.py": "bf16 re-anchoring within the spread of equivalent references "
    "(80-200 s); test_reanchor.py checks float32 token for token",
    "tests/integration/test_keyterms.py": "phrase hints measured on Whisper: the keyterm set three ways and the "
    "WER corpus twice (90 s); test_phrase_hints.py checks a hinted name in `make test`",
    "tests/integration/test_wer_harness.py::test_the_wer_corpus_through_voxgate_in_every_condition": "the WER "
    "corpus in every condition (90 s)",
    "tests/deploy/test_images.py": "builds both container images from scratch with mmdebstrap and podman "
    "(about 1 min); test_manifests.py checks every deployment file",
    "tests/reliability/test_wire_fuzz.py": "the wire fuzz and chaos driver for 75 s (80 s); `make soak` runs it "
    "for 30 minutes, test_fuzz.py and test_chaos.py keep its kinds of case in `make test`",
    "tests/engine/test_voxtral_service.py::test_load_never_changes_a_transcript": "8 sessions of load next to a "
    "lone run (60 s); test_four_desynchronized_sessions_keep_up_and_match_a_lone_run stays",
    "tests/reliability/test_chaos_voxtral.py": "SIGKILL of a Voxtral sidecar under 3 live sessions and its vLLM "
    "restart (50 s); test_chaos.py kills the fake engine's sidecar the same way in `make test`",
    "tests/integration/test_wer_harness.py::test_through_voxgate_wer_never_exceeds_the_engine_alone": "the WER "
    "corpus through voxgate and through the engine alone (50 s); test_sphinx_speech.py checks real speech",
    "tests/engine/test_gpu_recipe_cpu.py": "the GPU recipe run end to end on the CPU, quick mode and ceiling "
    "sweep (90 s); its pieces are tested on their own",
    "tests/engine/test_voxtral_streaming.py::test_the_front_end_holds_a_bounded_tail_of_a_long_requests_token_ids"
    "[vllm]": "the bounded tail on vLLM's own step path (28 s + 19 s teardown); the direct path's variant stays",
    "tests/reliability/test_backpressure.py::test_a_client_that_stops_reading_costs_bounded_memory": "a reader "
    "that stops, memory sampled for 30 s (34 s); test_a_10x_client_is_flow_controlled_and_nothing_is_lost stays",
    "tests/engine/test_reanchor.py::test_without_rotating_every_key_the_output_diverges_right_after_the_first_"
    "reanchor": "the negative controls: skipping the key rotation must change the output (45 s); the token-for-token "
    "checks of re-anchoring stay",
    "tests/engine/test_voxtral_allocator.py::test_vllms_processes_get_tcmalloc_and_the_front_end_keeps_its_malloc"
    "[system]": "the system allocator's variant (17 s); the default's stays",
    "tests/engine/test_reanchor_tripwire.py::test_a_refusal_says_what_it_refused_to_run_on": "the runtime named in "
    "a refusal (21 s); test_prefix_caching_falls_back_to_rollover_with_the_reason checks the refusal",
    "tests/engine/test_reanchor.py::test_a_missing_private_vllm_attribute_falls_back_to_rollover_with_the_reason": (
        "an engine started with a planted missing symbol (25 s); the symbol check itself is "
        "test_every_private_vllm_symbol_the_extension_relies_on_exists_in_the_installed_vllm, and "
        "test_prefix_caching_falls_back_to_rollover_with_the_reason checks the fallback"
    ),
    "tests/engine/test_reanchor.py::test_a_margin_that_leaves_no_room_falls_back_with_the_numbers": "a worker-side "
    "refusal with its numbers (18 s); test_prefix_caching_falls_back_to_rollover_with_the_reason checks the fallback",
}


# The other-CPU lane (`make test-other-cpu`, in CI after `make test`): the tests of a real engine's output, run
# again under another numeric path (tests/numeric_paths.py: on an Intel CPU, the oneDNN/AVX2 kernels an AMD EPYC
# takes), so that a test that would fail on another CPU fails on this one. What each checks:
OTHER_CPU_LANE: dict[str, str] = {
    "tests/unit/test_numeric_paths.py": "the other path runs other kernels",
    "tests/unit/test_engine_contract.py": "whisper's and sphinx's finals are one decode of their samples",
    "tests/unit/test_whisper_judged.py": "the real model's judgement of a hinted name",
    "tests/integration/test_whisper_speech.py": "the README's examples and every encoding on Whisper",
    "tests/integration/test_phrase_hints.py::test_whisper_writes_a_hinted_name_it_cannot_spell_alone": "a hint",
    "tests/integration/test_wer_harness.py::test_whisper_through_voxgate_is_the_model_alone_and_meets_its_wer": (
        "Whisper's WER on the corpus subset, through voxgate and alone"
    ),
    "tests/integration/test_sphinx_speech.py": "PocketSphinx's words and the fixture README's WER",
    "tests/integration/test_compat_riva.py::test_the_final_is_the_engines_own_hypothesis": "Riva's final",
    "tests/integration/test_compat_google.py::test_the_final_is_the_engines_own_hypothesis": "Google's final",
    "tests/engine/test_reanchor.py::test_reanchored_engine_is_token_identical_to_one_that_never_reaches_the_cap": (
        "Voxtral's float32 re-anchoring parity on PyTorch's other kernels"
    ),
}


def pytest_report_header() -> str:
    """Which CPU and which numeric path ran: an engine's output follows them (docs/testing.md)."""
    return describe(read_cpu(), os.environ)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.nodeid.startswith(prefix) for prefix in EXTENDED_LANE):
            item.add_marker(pytest.mark.extended)
        if any(item.nodeid.startswith(prefix) for prefix in OTHER_CPU_LANE):
            item.add_marker(pytest.mark.other_cpu)
        if item.nodeid.startswith("tests/vllm_sources/"):
            item.add_marker(pytest.mark.vllm_sources)
        for prefix, seconds in DIRECTORY_TIMEOUTS_S.items():
            if item.nodeid.startswith(prefix) and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(seconds))


@pytest.fixture(scope="module")
def whisper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("whisper"), engine="whisper")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sphinx_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("sphinx"), engine="sphinx")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = start_server(tmp_path_factory.mktemp("fake"), engine="fake")
    yield server
    server.stop()


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
