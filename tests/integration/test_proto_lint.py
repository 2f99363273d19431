"""`buf lint` and `buf breaking` on proto/ (configuration: proto/buf.yaml).

buf comes from the `dev` extra (PyPI buf-bin) in the venv, or from PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

AGAINST_BRANCH = "main"


def _buf() -> str:
    venv_buf = Path(sys.executable).parent / "buf"
    found = str(venv_buf) if venv_buf.exists() else shutil.which("buf")
    if found is None:
        reason = "buf not installed (pip install buf-bin, part of the dev extra; or npm @bufbuild/buf)"
        if os.environ.get("VOXGATE_REQUIRE_CLIENT_TOOLCHAINS") == "1":
            pytest.fail(f"{reason} (VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1)")
        pytest.skip(reason)
    return found


def _run_buf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BUF_CACHE_DIR": str(tmp_path / "buf-cache")}
    return subprocess.run([_buf(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)


def test_buf_lint_passes(tmp_path: Path) -> None:
    proc = _run_buf(tmp_path, "lint", "proto")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lint_exception_is_limited_to_speech_proto(tmp_path: Path) -> None:
    """The ENUM_VALUE_PREFIX exception covers speech.proto only: a new proto file is still checked."""
    bad = tmp_path / "proto" / "voxgate" / "v1"
    bad.mkdir(parents=True)
    shutil.copy(ROOT / "proto" / "buf.yaml", tmp_path / "proto" / "buf.yaml")
    (bad / "other.proto").write_text('syntax = "proto3";\npackage voxgate.v1;\n'
                                     "enum Color {\n  COLOR_UNSPECIFIED = 0;\n  RED = 1;\n}\n")
    proc = _run_buf(tmp_path, "lint", str(tmp_path / "proto"))
    assert proc.returncode != 0
    assert 'Enum value name "RED" should be prefixed with "COLOR_"' in proc.stdout


def test_buf_breaking_against_main(tmp_path: Path) -> None:
    """No wire-incompatible change to proto/ against the main branch (on main: against itself)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout (or no git): nothing to compare against")
    has_main = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{AGAINST_BRANCH}"],
                              cwd=ROOT, capture_output=True)
    if has_main.returncode != 0:
        pytest.skip(f"no local branch {AGAINST_BRANCH!r} to compare against (git fetch origin main:main)")
    proc = _run_buf(tmp_path, "breaking", "proto", "--against", f".git#branch={AGAINST_BRANCH},subdir=proto")
    assert proc.returncode == 0, proc.stdout + proc.stderr
