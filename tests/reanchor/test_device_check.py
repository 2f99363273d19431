"""The torch-only device check (scripts/device_check.py) runs on the CPU in CI, so it cannot rot before a GPU
box runs it with --device cuda."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_device_check_passes_on_the_cpu_and_reports_every_check() -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "device_check.py"), "--device", "cpu", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = json.loads(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
    assert report["ok"] is True
    kinds = [c["check"] for c in report["checks"]]
    assert kinds.count("rotation") == 8 and kinds.count("cost") == 2 and "graph" in kinds and "stacking" in kinds
    assert "extension" in kinds
    assert all(c["stacked_ms_median"] > 0 for c in report["checks"] if c["check"] == "cost")
    for check in report["checks"]:
        for case in [check] if check["check"] == "rotation" else check.get("cases", []):
            assert case["max_rel_err"] <= 4 * case["ulp"] < case["off_by_one_token_rel_err"] / 10


def test_device_check_imports_no_vllm() -> None:
    script = str(ROOT / "scripts" / "device_check.py")
    code = (
        "import runpy, sys; sys.argv = ['x', '--help']\n"
        f"try:\n    runpy.run_path({script!r}, run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "assert not any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules), 'vllm imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)
