"""The other numeric path really is another one, and the README's examples are read as a user sees them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT
from tests.numeric_paths import Cpu, NumericPath, default_path, describe, other_path, path_in_effect, read_cpu
from tests.readme_examples import Final, readme_examples

XEON = Cpu("GenuineIntel", "Xeon", frozenset({"avx2", "avx512f", "avx512_vnni"}), "x86_64")
EPYC = Cpu("AuthenticAMD", "EPYC", frozenset({"avx2", "avx512f"}), "x86_64")
OLD_EPYC = Cpu("AuthenticAMD", "EPYC", frozenset({"avx2"}), "x86_64")


def test_each_cpu_is_sent_down_the_path_the_other_vendor_takes() -> None:
    assert default_path(XEON).what.startswith("CTranslate2 on MKL")
    assert default_path(EPYC).what.startswith("CTranslate2 on oneDNN")
    assert other_path(XEON).env["CT2_USE_MKL"] == "0" and other_path(XEON).env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert other_path(EPYC).env == {"CT2_USE_MKL": "1", "CT2_FORCE_CPU_ISA": "AVX512", "ATEN_CPU_CAPABILITY": "avx512"}
    assert other_path(OLD_EPYC).env == {"CT2_USE_MKL": "1"}  # no AVX-512 to force


def test_the_path_in_effect_is_named_from_the_environment() -> None:
    assert path_in_effect(XEON, {}).name == "default"
    assert path_in_effect(XEON, dict(other_path(XEON).env)).name == "amd-like"
    assert path_in_effect(XEON, {"CT2_USE_MKL": "0"}) == NumericPath("custom", {"CT2_USE_MKL": "0"}, "set by hand")
    assert "numeric path: amd-like" in describe(XEON, dict(other_path(XEON).env))


def test_cpuinfo_is_read_from_its_first_processor(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC 9R14\nflags\t\t: fpu avx2 avx512f\n\nprocessor\t: 1\nvendor_id\t: Other\n"
    )
    cpu = read_cpu(info)
    assert (cpu.vendor, cpu.model) == ("AuthenticAMD", "AMD EPYC 9R14, family 25 model 17")
    assert cpu.avx512 and not cpu.intel and cpu.isa() == "AVX-512"
    assert read_cpu(tmp_path / "missing").vendor == ""


def _gemm_backends(env: dict[str, str]) -> list[str]:
    """CTranslate2's own log of the GEMM backends it chose, loading the Whisper model under `env`."""
    load = (
        "import ctranslate2; from engine_sidecar.engines.whisper.model import default_source; "
        "ctranslate2.models.Whisper(str(default_source().directory), device='cpu', compute_type='int8')"
    )
    out = subprocess.run(
        [sys.executable, "-c", load], env={"PATH": "/usr/bin:/bin", "CT2_VERBOSE": "1", **env},
        capture_output=True, text=True, timeout=120, cwd=ROOT, check=True,
    )  # fmt: skip
    return [line.split("] ", 3)[-1].strip() for line in out.stderr.splitlines() if "backend:" in line or "ISA:" in line]


def test_the_other_path_changes_the_kernels_whisper_runs() -> None:
    cpu = read_cpu()
    assert _gemm_backends({}) != _gemm_backends(dict(other_path(cpu).env))


def test_the_readme_finals_are_read_with_their_times() -> None:
    examples = readme_examples(ROOT / "README.md")
    assert examples[0].finals == (Final(0.0, 2.18, "Please call me back tomorrow morning."),)
    assert all(e.args[-1].startswith("tests/fixtures/") and "--json" not in e.args for e in examples)


def test_a_final_agrees_with_the_readme_on_words_and_times_not_on_punctuation() -> None:
    shown = Final(0.0, 2.18, "Please call me back tomorrow morning.")
    assert Final(0.0, 2.06, "please call me back tomorrow morning").agrees_with(shown)
    assert not Final(0.0, 2.06, "please call me back tomorrow").agrees_with(shown)
    assert not Final(0.0, 2.6, "Please call me back tomorrow morning.").agrees_with(shown)
    assert not Final(0.5, 2.18, "Please call me back tomorrow morning.").agrees_with(shown)
