"""CI smoke of `voxgate bench`: a few fake-engine sessions for ~12 s; the report has its fields and no errors.

No timing assertions: this machine is shared. The numbers are docs/benchmarks.md's business.
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from service.bench.audio import AUDIO_DIR, LONG_CLIP, SAMPLE_RATE, load_loop

ROOT = Path(__file__).resolve().parents[2]

LEVEL_FIELDS = {
    "n",
    "held",
    "sessions_kept_up",
    "errors",
    "first_result_p50_s",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "final_p50_s",
    "final_p99_s",
    "slip_max_s",
    "results",
    "processes",
    "cpu_cores_per_session",
    "sessions",
    "latencies",
    "lag_series",
    "load_avg_1m_after",
}
SESSION_FIELDS = {"first_result_s", "latency_p50_s", "latency_p99_s", "final_s", "slip_max_s", "keeps_up", "error"}


def test_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "bench",
            "--engine",
            "fake",
            "--sweep",
            "1,3",
            "--duration",
            "5",
            "--stagger-s",
            "0.3",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "level N=3" in proc.stderr  # progress goes to stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["report"] == str(out)
    report = json.loads(out.read_text())
    assert report["engine"] == "fake" and report["frame_ms"] == 20
    assert {"machine", "thresholds", "max_sessions_held", "levels", "runtime_s"} <= report.keys()
    assert [lv["n"] for lv in report["levels"]] == [1, 3]
    for level in report["levels"]:
        assert level.keys() >= LEVEL_FIELDS
        assert level["errors"] == {}
        assert level["results"] > 0 and level["latencies"]
        assert {"bench", "service", "sidecar"} <= level["processes"].keys()
        assert len(level["sessions"]) == level["n"]
        for s in level["sessions"]:
            assert s.keys() >= SESSION_FIELDS
            assert s["error"] == "" and s["first_result_s"] is not None and s["final_s"] is not None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    for kind in ("latency-cdf", "lag", "sweep"):
        assert (tmp_path / f"bench-{kind}.png").stat().st_size > 1000


def test_bench_reports_a_refused_session(tmp_path: Path) -> None:
    out = tmp_path / "refused.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "bench",
            "--engine",
            "fake",
            "-n",
            "1",
            "--duration",
            "1",
            "--language",
            "xx-XX",
            "--retries",
            "0",
            "--no-plots",
            "--quiet",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    (level,) = json.loads(out.read_text())["levels"]
    assert not level["held"]
    assert [k.split(":")[0] for k in level["errors"]] == ["INVALID_ARGUMENT"]


def test_bench_takes_its_audio_from_audio_dir(tmp_path: Path) -> None:
    # Installed from a wheel there are no repository fixtures: --audio-dir names the speech to play, and an
    # empty one is refused with what to do.
    empty = tmp_path / "empty"
    empty.mkdir()
    base = [
        sys.executable,
        "-m",
        "service",
        "bench",
        "--engine",
        "fake",
        "-n",
        "1",
        "--duration",
        "1",
        "--retries",
        "0",
        "--no-plots",
        "--quiet",
    ]
    refused = subprocess.run(
        [*base, "--audio-dir", str(empty), "--out", str(tmp_path / "r.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and f"no 16 kHz mono PCM16 WAV files in {empty}" in refused.stderr
    speech = tmp_path / "speech"
    speech.mkdir()
    shutil.copy(AUDIO_DIR / LONG_CLIP, speech)
    run = subprocess.run(
        [*base, "--audio-dir", str(speech), "--out", str(tmp_path / "ok.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-3000:]


def test_the_default_audio_ships_in_the_package() -> None:
    # Installed from a wheel (the Docker images) the bench plays the clips inside the package: they are package
    # data, and the repository's test fixtures are links to them (one copy of each clip).
    clips = sorted(AUDIO_DIR.glob("*.wav"))
    assert AUDIO_DIR.is_relative_to(ROOT / "service") and len(clips) == 5
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["service"]
    for clip in clips:
        assert not clip.is_symlink()
        assert any(fnmatch.fnmatch(clip.relative_to(ROOT / "service").as_posix(), p) for p in patterns), clip
        fixture = ROOT / "tests" / "fixtures" / "audio" / clip.name
        assert fixture.resolve() == clip.resolve()
    assert len(load_loop()) / SAMPLE_RATE > 15
