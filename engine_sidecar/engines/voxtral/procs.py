"""Process hygiene for the vLLM engine inside the sidecar: environment, version window, dying together.

vLLM runs its EngineCore (and, under it, a Worker) as child processes. On the
CPU platform it forces the multiprocessing *spawn* method, so fork hooks never
run in them, and a SIGKILLed sidecar would leave them orphaned, holding memory
or a GPU. The fix: point multiprocessing's spawn executable at a tiny wrapper
that sets PR_SET_PDEATHSIG (which survives execve) and then execs the real
interpreter. The Worker dies with the EngineCore through vLLM's own death pipe.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import tempfile
from pathlib import Path

from engine_sidecar.engines.voxtral.vllm_window.versions import Release, check_window, installed_version

COMMON_ENV_DEFAULTS = {
    # The sidecar's stdout carries the READY handshake the service waits for; vLLM logs to stdout by default.
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    "HF_HUB_OFFLINE": "1",  # models are local paths; never reach for a hub at run time
}
CPU_ENV_DEFAULTS = {
    "VLLM_HOST_IP": "127.0.0.1",  # engine-internal sockets stay on loopback
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; vLLM's CPU default would take far more
}
GPU_ENV_DEFAULTS = {
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


def check_vllm_version(allow_unlisted: bool) -> tuple[str, Release | None]:
    """The installed vLLM's version and its release of the window (None: unlisted, allowed); refuses the rest."""
    version = installed_version()
    return version, check_window(version, allow_unlisted)


def on_cpu() -> bool:
    try:
        from importlib.metadata import version

        version("vllm-cpu")
        return True
    except Exception:
        return False


def set_env_defaults(cpu: bool) -> None:
    """Before vLLM is first imported: it reads some of its environment at import time."""
    for key, value in {**COMMON_ENV_DEFAULTS, **(CPU_ENV_DEFAULTS if cpu else GPU_ENV_DEFAULTS)}.items():
        os.environ.setdefault(key, value)


def set_release_env(cpu: bool, release: Release | None) -> None:
    """Once the release is known, before the engine is built (vLLM reads these switches lazily)."""
    if not cpu and release is not None:
        for key, value in release.gpu_env.items():
            os.environ.setdefault(key, value)


class ChildrenDieWithUs:
    """Installs the PDEATHSIG spawn wrapper for this process; undo with close().

    The wrapper lives at a fixed per-user, per-interpreter path and is never deleted: a SIGKILLed
    sidecar could not clean up after itself, and a spawn may happen at any time (resource tracker).
    """

    def __init__(self) -> None:
        self._installed = False

    @staticmethod
    def wrapper_path() -> Path:
        tag = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"voxgate-spawn-{os.getuid()}" / f"python-{tag}"

    def install(self) -> None:
        if not sys.platform.startswith("linux"):
            return
        wrapper = self.wrapper_path()
        content = _WRAPPER.format(python=sys.executable, parent_env=PARENT_ENV)
        wrapper.parent.mkdir(mode=0o700, exist_ok=True)
        if wrapper.parent.stat().st_uid != os.getuid():
            raise RuntimeError(f"{wrapper.parent} belongs to another user")
        if not wrapper.exists() or wrapper.read_text() != content:
            tmp = wrapper.with_suffix(f".{os.getpid()}")
            tmp.write_text(content)
            tmp.chmod(0o700)
            tmp.replace(wrapper)  # atomic: a concurrent sidecar never runs a half-written file
        os.environ[PARENT_ENV] = str(os.getpid())
        multiprocessing.set_executable(str(wrapper))
        self._installed = True

    def close(self) -> None:
        if self._installed:
            multiprocessing.set_executable(sys.executable)
            self._installed = False
