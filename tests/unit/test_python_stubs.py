"""The committed Python protobuf/gRPC modules are what scripts/gen_protos.py makes from proto/ (no drift).

The Go and Node code has the same check in tests/integration/test_other_clients.py (gen_clients.sh --check).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, load_script

SCRIPT = ROOT / "scripts" / "gen_protos.py"


def _check(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)


def test_committed_python_stubs_match_proto() -> None:
    proc = _check(SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_fails_on_an_edited_a_missing_and_a_stale_module(tmp_path: Path) -> None:
    """Negative control on a copy of the repository's proto/, generator and output directories (TARGETS)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / SCRIPT.name)
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    targets = sorted({out.relative_to(ROOT) for out in load_script("gen_protos").TARGETS.values()})
    for rel in targets:
        shutil.copytree(ROOT / rel, tmp_path / rel, ignore=shutil.ignore_patterns("__pycache__"))
    copy = tmp_path / "scripts" / SCRIPT.name
    assert _check(copy).returncode == 0, "the untouched copy matches"

    first = tmp_path / targets[0]
    edited = sorted(first.glob("*_pb2.py"))[0]
    edited.write_text(edited.read_text() + "# edited by hand\n")
    missing = sorted(first.glob("*_pb2_grpc.pyi"))[0]
    missing.unlink()
    (first / "old_pb2.py").write_text("# from a proto that is gone\n")

    proc = _check(copy)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rel = targets[0]
    assert f"{rel / edited.name}: differs" in proc.stderr
    assert "+# edited by hand" not in proc.stderr and "-# edited by hand" in proc.stderr  # committed vs generated
    assert f"{rel / missing.name}: missing" in proc.stderr
    assert f"{rel / 'old_pb2.py'}: not generated from proto/" in proc.stderr
