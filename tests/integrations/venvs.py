"""The Pipecat test environment: a virtual environment of its own, cached under .venv-integrations/.

Pipecat cannot go into the project's venv: pipecat-ai 1.14.0 requires protobuf<7 (and soxr~=1.0),
while voxgate (and voxgate-client's generated code) needs protobuf>=7.35. Installed alone, it
would downgrade protobuf and break voxgate. Pipecat itself runs on protobuf 7 (its own generated
code is 5.x, which the 7.x runtime accepts), so its venv gets pipecat-ai first, then voxgate-client
and pipecat-voxgate from this checkout (editable), with the protobuf and grpcio of the project's
venv: pip upgrades protobuf over pipecat's pin and says so; the import check at the end is what
counts. (LiveKit Agents installs into the project venv without changing any package there: the
dev extra in pyproject.toml.)

    .venv/bin/python -m tests.integrations.venvs     # build or check it (what `make test` runs)

Rebuilt only when the pins, the Python or the two packages' pyproject.toml change (a stamp file
records them): ~2 min and ~550 MB the first time (onnxruntime, numba/llvmlite, ... come with
pipecat-ai), nothing after.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / ".venv-integrations"
PIPECAT_VENV = VENVS / "pipecat"
PIPECAT_PINS = ("pipecat-ai==1.14.0",)  # the Pipecat release pipecat-voxgate is tested with
EDITABLE = (ROOT / "clients" / "python", ROOT / "clients" / "pipecat-voxgate")
CHECK = (
    "import google.protobuf, pipecat, pipecat_voxgate, voxgate_client; "
    "from pipecat.pipeline.worker import PipelineWorker; "
    "print(f'pipecat {pipecat.__version__}, protobuf {google.protobuf.__version__}')"
)


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _stamp() -> dict[str, object]:
    # The wire libraries the server's venv has: the Pipecat venv speaks with the same ones.
    pins = [*PIPECAT_PINS, f"protobuf=={version('protobuf')}", f"grpcio=={version('grpcio')}"]
    projects = hashlib.sha256(b"".join((p / "pyproject.toml").read_bytes() for p in EDITABLE)).hexdigest()
    return {"pins": pins, "python": sys.version, "projects": projects}


def pipecat_python() -> Path:
    """The Pipecat venv's interpreter, built first if missing or stale (under a lock)."""
    VENVS.mkdir(exist_ok=True)
    stamp_path = PIPECAT_VENV / ".voxgate-stamp.json"
    want = _stamp()
    with (VENVS / "pipecat.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if stamp_path.exists() and json.loads(stamp_path.read_text()) == want and _python(PIPECAT_VENV).exists():
                return _python(PIPECAT_VENV)
            _build(want)
            stamp_path.write_text(json.dumps(want))
            return _python(PIPECAT_VENV)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build(stamp: dict[str, object]) -> None:
    shutil.rmtree(PIPECAT_VENV, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter the project venv is made from
    _run([base, "-m", "venv", str(PIPECAT_VENV)])
    py = str(_python(PIPECAT_VENV))
    pins = [str(p) for p in stamp["pins"]]  # type: ignore[attr-defined]
    _run([py, "-m", "pip", "install", "--quiet", *pins[: len(PIPECAT_PINS)]])
    # voxgate-client needs protobuf>=7.35: pip upgrades it over pipecat-ai's protobuf<7 (and reports
    # the conflict on stderr; it is the one expected).
    editable = [arg for p in EDITABLE for arg in ("-e", str(p))]
    _run([py, "-m", "pip", "install", "--quiet", *editable, *pins[len(PIPECAT_PINS) :]])
    _run([py, "-c", CHECK])


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


if __name__ == "__main__":
    python = pipecat_python()
    subprocess.run([str(python), "-c", CHECK], check=True)
