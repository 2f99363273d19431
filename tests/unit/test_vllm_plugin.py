"""voxgate's vLLM plugin runs in every vLLM process of the machine, whoever starts vLLM: it must never stop a
start, and it only adds new names to EngineCore. A fake `vllm.v1.engine.core` stands in for vLLM here."""

from __future__ import annotations

import logging
import sys
import types

import pytest

from engine_sidecar.engines.voxtral import vllm_plugin

CORE = "vllm.v1.engine.core"
CALLS = ("voxgate_reanchor_connect", "voxgate_reanchor_poll", "voxgate_abort_client")


def fake_vllm(monkeypatch: pytest.MonkeyPatch, core: types.ModuleType | None) -> None:
    for name in ("vllm", "vllm.v1", "vllm.v1.engine"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, CORE, core)  # type: ignore[arg-type]  # None: import fails


def test_a_vllm_without_what_the_plugin_needs_still_starts(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake_vllm(monkeypatch, None)
    with caplog.at_level(logging.WARNING):
        vllm_plugin.register()  # no exception: vLLM does not catch a plugin's
    assert "voxgate's vLLM plugin did not load" in caplog.text


def test_the_plugin_adds_its_calls_once_and_overrides_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType(CORE)

    def vllms_own(self: object) -> str:
        return "vLLM's"

    engine_core = type("EngineCore", (), {"voxgate_reanchor_poll": vllms_own})
    module.EngineCore = engine_core  # type: ignore[attr-defined]
    fake_vllm(monkeypatch, module)
    vllm_plugin.register()
    first = {name: getattr(engine_core, name) for name in CALLS}
    vllm_plugin.register()
    assert {name: getattr(engine_core, name) for name in CALLS} == first
    assert engine_core.voxgate_reanchor_poll is vllms_own  # an attribute already there is left alone


def test_connect_hands_the_scheduler_a_way_to_every_worker() -> None:
    from engine_sidecar.engines.voxtral.reanchor.engine_core import voxgate_reanchor_connect
    from engine_sidecar.engines.voxtral.reanchor.shift import Shift

    calls: list[tuple[str, tuple[object, ...]]] = []

    class Scheduler:
        rotate = None

        def voxgate_connect(self, rotate: object) -> None:
            self.rotate = rotate

    class Core:
        scheduler = Scheduler()

        def collective_rpc(self, method: str, args: tuple[object, ...] = ()) -> list[int]:
            calls.append((method, args))
            return [1, 1]

    core = Core()
    assert voxgate_reanchor_connect(core) is True
    shifts = (Shift("r", "t", 32, ((1, 2),), 100),)
    assert core.scheduler.rotate is not None and core.scheduler.rotate(shifts) == [1, 1]  # type: ignore[misc]
    assert calls == [("voxgate_rotate", (shifts,))]
    core.scheduler = object()  # type: ignore[assignment]  # stock vLLM's scheduler: no connection, no shifts
    assert voxgate_reanchor_connect(core) is False
