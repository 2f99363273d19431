"""The contract package between the service and the sidecar: converters, wire values, boundaries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_api.info import EngineInfo, InterimStability, KvGroupRuntime, PositionMode, PositionRuntime
from engine_api.outputs import Closed, Delta, Diagnostic, DiagnosticKind, EngineOutput, Flushed, Progress, Revision
from engine_api.status import EngineStatus, SessionStat
from engine_api.v1 import engine_pb2
from engine_api.wire import opened_to_proto, output_from_proto, output_to_proto, status_from_proto, status_to_proto
from engine_sidecar.engines import create_engine
from service.config import Config
from service.proto_edge import POSITION_MODES, interim_stability
from service.sidecar_process import sidecar_command
from tests.helpers import ROOT, imported_modules
from voxgate_client.v1 import speech_pb2 as pb

OUTPUTS: list[EngineOutput] = [
    Delta(" hello", 0, 300, (1, 2)),
    Revision((Delta(" a", 0, 100), Delta(" b", 100, 200))),
    Flushed(marker=7, audio_ms=1200),
    Progress(audio_ms=500),
    Closed(audio_ms=1300),
    *[Diagnostic(kind, f"{kind} happened", 42) for kind in DiagnosticKind],
]


@pytest.mark.parametrize("out", OUTPUTS, ids=lambda o: type(o).__name__)
def test_every_output_crosses_the_wire_unchanged(out: EngineOutput) -> None:
    wire = engine_pb2.SessionOutput.FromString(output_to_proto(out).SerializeToString())
    assert output_from_proto(wire) == out


def test_diagnostic_kinds_keep_their_wire_values_and_names() -> None:
    for kind in DiagnosticKind:
        msg = output_to_proto(Diagnostic(kind, "", 0))
        assert engine_pb2.DiagnosticKind.Name(msg.diagnostic.kind) == f"DIAGNOSTIC_KIND_{kind.name}"
    assert [k.value for k in DiagnosticKind] == [
        "warning",
        "rollover",
        "reanchor",
        "rut_recovery",
        "freeze_recovery",
        "reanchor_failed",
    ]
    assert DiagnosticKind.RUT_RECOVERY == "rut_recovery"  # a str: metric labels and warning codes unchanged


def test_position_modes_keep_their_wire_strings() -> None:
    info = EngineInfo("voxtral", "m", 4, ("en",), position_mode=PositionMode.REANCHOR)
    assert opened_to_proto(info).opened.position_mode == "reanchor"
    assert {PositionMode.REANCHOR.value, PositionMode.ROLLOVER.value} <= POSITION_MODES.keys()
    assert PositionMode.NONE == "" and EngineInfo("fake", "m", 1, ()).position_mode == ""
    assert PositionMode.from_wire("rollover") is PositionMode.ROLLOVER
    assert PositionMode.from_wire("something newer") is PositionMode.NONE


def test_interim_stability_keeps_its_wire_strings() -> None:
    info = EngineInfo("sphinx", "m", 1, ("en",), interim_stability=InterimStability.REVISABLE)
    wire = opened_to_proto(info).opened.interim_stability
    assert wire == "revisable" and InterimStability.from_wire(wire) is InterimStability.REVISABLE
    assert EngineInfo("fake", "m", 1, ()).interim_stability == "append_only"
    assert InterimStability.from_wire("something newer") is InterimStability.NONE
    assert (
        interim_stability("append_only")
        == interim_stability(InterimStability.APPEND_ONLY)
        == pb.INTERIM_STABILITY_APPEND_ONLY
    )
    assert interim_stability("") == interim_stability("something newer") == pb.INTERIM_STABILITY_UNSPECIFIED


def test_the_status_crosses_the_wire_typed() -> None:
    runtime = PositionRuntime("R", False, "auto", (KvGroupRuntime("decoder", 128, 128, "B", "L", "float32"),))
    info = EngineInfo("voxtral", "m", 4, ("en",), position_mode=PositionMode.REANCHOR, position_runtime=runtime)
    status = EngineStatus(
        admitting=False, refusal="a session lags", sessions=(SessionStat("s1", 1000, 2, 50, PositionMode.REANCHOR),)
    )
    wire = status_to_proto(info, status, {"sessions_active": 1}, active_sessions=1, opening_sessions=0, pid=9)
    wire = engine_pb2.GetStatusResponse.FromString(wire.SerializeToString())
    assert status_from_proto(wire) == status
    assert "admitting" not in wire.counters  # no magic counter: a field of its own
    assert (wire.max_sessions, wire.active_sessions, wire.position_mode) == (4, 1, "reanchor")
    assert wire.position_runtime.kv_groups[0].block_size == 128


def test_a_sidecar_that_does_not_say_admits() -> None:
    assert status_from_proto(engine_pb2.GetStatusResponse(ready=True)).admitting


async def test_light_engines_say_whether_they_admit(tmp_path: Path) -> None:
    assert create_engine("sphinx", "", 1).status() == EngineStatus()
    gate = tmp_path / "refuse"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"refuse_while": str(gate)}))
    fake = create_engine("fake", str(script), 1)
    assert fake.status().admitting
    gate.touch()
    refused = fake.status()
    assert not refused.admitting and str(gate) in refused.refusal


def test_the_service_starts_the_sidecar_as_its_own_module() -> None:
    cmd = sidecar_command(
        Config(engine="voxtral", preset="16gb", engine_options=("max_num_seqs=2", "x=y")), Path("/run/x.sock")
    )
    assert cmd[1:3] == ["-m", "engine_sidecar"]
    assert cmd[cmd.index("--socket") + 1] == "/run/x.sock"
    assert cmd[-6:] == ["--preset", "16gb", "--engine-option", "max_num_seqs=2", "--engine-option", "x=y"]


def _modules(package: str) -> list[Path]:
    return [p for p in sorted((ROOT / package).rglob("*.py")) if "_proto" not in p.parts]


def _top(name: str) -> str:
    return name.split(".")[0]


def test_the_service_imports_the_sidecar_only_in_its_composition_root() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in _modules("service")
        if p != ROOT / "service" / "cli.py" and "engine_sidecar" in {_top(n) for n in imported_modules(p)}
    ]
    assert offenders == []


def test_the_sidecar_and_the_contract_never_import_the_service() -> None:
    for package, forbidden in (("engine_sidecar", {"service"}), ("engine_api", {"service", "engine_sidecar"})):
        offenders = [
            str(p.relative_to(ROOT)) for p in _modules(package) if {_top(n) for n in imported_modules(p)} & forbidden
        ]
        assert offenders == [], package


def test_only_the_client_package_imports_its_private_stubs() -> None:
    client = ROOT / "clients" / "python" / "voxgate_client"
    paths = [
        p
        for d in ("service", "engine_sidecar", "engine_api", "tests", "bench", "scripts")
        for p in sorted((ROOT / d).rglob("*.py"))
    ]
    offenders = [
        str(p.relative_to(ROOT))
        for p in paths
        if not p.is_relative_to(client) and any(n.startswith("voxgate_client._proto") for n in imported_modules(p))
    ]
    assert offenders == []


def test_the_sphinx_engine_caps_malloc_arenas_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine_sidecar.engines.sphinx import cap_malloc_arenas

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert cap_malloc_arenas(8)  # glibc's mallopt took it (8: harmless for the test process)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert not cap_malloc_arenas(8)
