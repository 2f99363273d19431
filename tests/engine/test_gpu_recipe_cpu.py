"""bench/gpu_recipe.sh, the one-command GPU benchmark, run on the CPU with the tiny checkpoint (NO_GPU=1).

What it cannot check here (no GPU): nvidia-smi sampling, the real checkpoint, the presets. Everything else
runs for real: `voxgate serve --engine voxtral`, `voxgate bench` against it, the metrics scrape, the summary.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def json_documents(text: str) -> list[dict[str, Any]]:
    decoder, docs, i = json.JSONDecoder(), [], 0
    text = text.strip()
    while i < len(text):
        doc, i = decoder.raw_decode(text, i)
        docs.append(doc)
        while i < len(text) and text[i].isspace():
            i += 1
    return docs


def test_the_gpu_recipe_runs_end_to_end_on_the_cpu(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "recipe"
    env = {
        **os.environ,
        "NO_GPU": "1",
        "PRESET": "",
        "LEVELS": "1,2",
        "DURATION": "6",
        "OUT": str(out),
        "PORT": str(free_port()),
        "METRICS_PORT": str(free_port()),
        "EXTRA_SERVE_ARGS": "--max-model-len 4096",
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_recipe.sh"), "quick", str(tiny_model)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *_, summary = json_documents(proc.stdout)  # voxgate bench's own line, then the recipe's summary
    assert summary["max_real_time_sessions"] >= 1
    assert [lv["n"] for lv in summary["levels"]] == [1, 2]
    assert all(lv["errors"] == {} for lv in summary["levels"]), summary
    assert summary["vram_mib_first_last_min_max"] is None  # no nvidia-smi here
    report = json.loads((out / "bench.json").read_text())
    assert report["levels"][0]["results"] > 0, "the tiny model produced results through the recipe's server"
    metrics = (out / "metrics.txt").read_text()
    assert "voxgate_engine_reanchor_active" in metrics, "the server's metrics were scraped at the end"


def test_the_front_end_ceiling_mode_runs_on_the_cpu(tiny_model: Path, tmp_path: Path) -> None:
    # K = 2 only: each K is the quick mode (the test above, K = 1) with --engine-option frontends=K --workers K, and
    # every further K is another engine start (~70 s on an AVX2 runner) that tests nothing new.
    out = tmp_path / "frontends"
    env = {
        **os.environ,
        "NO_GPU": "1",
        "PRESET": "",
        "LEVELS": "2",
        "DURATION": "4",
        "OUT": str(out),
        "FRONTENDS": "2",
        "PORT": str(free_port()),
        "METRICS_PORT": str(free_port()),
        "EXTRA_SERVE_ARGS": "--max-model-len 4096",
    }
    proc = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_recipe.sh"), "frontends", str(tiny_model)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *_, summary = json_documents(proc.stdout)
    assert set(summary["max_real_time_sessions"]) == {"frontends=2"}
    report = json.loads((out / "k2" / "bench.json").read_text())
    assert report["levels"][0]["results"] > 0, "results through two front ends"
    assert "frontend_index" in (out / "k2" / "serve.log").read_text(), "two front ends were placement targets"
