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
    (bad / "other.proto").write_text(
        'syntax = "proto3";\npackage voxgate.v1;\nenum Color {\n  COLOR_UNSPECIFIED = 0;\n  RED = 1;\n}\n'
    )
    proc = _run_buf(tmp_path, "lint", str(tmp_path / "proto"))
    assert proc.returncode != 0
    assert 'Enum value name "RED" should be prefixed with "COLOR_"' in proc.stdout


def _unavailable(reason: str) -> None:
    if os.environ.get("VOXGATE_REQUIRE_CLIENT_TOOLCHAINS") == "1":
        pytest.fail(f"{reason} (VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1)")
    pytest.skip(reason)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def breaking_baseline() -> tuple[str, str]:
    """(commit, what it is) that proto/ must stay wire-compatible with.

    The newest release tag (v1.2.3 or 1.2.3) reachable from HEAD; before the first release, the commit
    that first added proto/voxgate, so every change since the protos were published is checked, and a
    checkout of main is not compared with itself.
    """
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        _unavailable("not a git checkout (or no git): no baseline to compare proto/ against")
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        _unavailable("shallow clone: the baseline commit may be missing (git fetch --unshallow --tags)")
    tag = _git("describe", "--tags", "--abbrev=0", "--match", "v[0-9]*", "--match", "[0-9]*", "HEAD")
    if tag.returncode == 0:
        name = tag.stdout.strip()
        return _git("rev-parse", f"{name}^{{commit}}").stdout.strip(), f"release tag {name}"
    first = _git("rev-list", "--reverse", "HEAD", "--", "proto/voxgate").stdout.split()
    assert first, "no commit on HEAD touches proto/voxgate"
    return first[0], "the first commit with proto/voxgate (no release tag yet)"


def _baseline(tmp_path: Path, commit: str) -> str:
    """proto/ as of commit, in a directory, configured by today's buf.yaml (the baseline may predate it)."""
    tar = tmp_path / "baseline.tar"
    subprocess.run(
        ["git", "archive", "--format=tar", "-o", str(tar), commit, "proto"], cwd=ROOT, check=True, timeout=60
    )
    (tmp_path / "baseline").mkdir()
    subprocess.run(["tar", "-xf", str(tar), "-C", str(tmp_path / "baseline")], check=True, timeout=60)
    shutil.copy(ROOT / "proto" / "buf.yaml", tmp_path / "baseline" / "proto" / "buf.yaml")
    return str(tmp_path / "baseline" / "proto")


def _breaking(tmp_path: Path, proto_dir: Path, against: str) -> subprocess.CompletedProcess[str]:
    return _run_buf(tmp_path, "breaking", str(proto_dir), "--against", against)


def test_buf_breaking_against_the_last_release(tmp_path: Path) -> None:
    """No wire-incompatible change to proto/ (working tree) since the last release tag, or since the first protos."""
    commit, what = breaking_baseline()
    proc = _breaking(tmp_path, ROOT / "proto", _baseline(tmp_path, commit))
    assert proc.returncode == 0, f"against {what} ({commit[:12]}):\n{proc.stdout}{proc.stderr}"


def test_buf_breaking_fails_on_a_removed_field(tmp_path: Path) -> None:
    """Negative control: the same check against the same baseline fails once a field it has is removed."""
    commit, _ = breaking_baseline()
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    speech = tmp_path / "proto" / "voxgate" / "v1" / "speech.proto"
    removed = "    bytes audio = 2;\n"  # StreamingRecognizeRequest.audio, there since the first commit
    assert removed in speech.read_text()
    speech.write_text(speech.read_text().replace(removed, ""))
    proc = _breaking(tmp_path, tmp_path / "proto", _baseline(tmp_path, commit))
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert 'field "2" with name "audio" on message "StreamingRecognizeRequest" was deleted' in proc.stdout, proc.stdout
