"""Several voxgate processes logging at once to one shared stream: every line stays whole JSON.

The service, its sidecars and its workers inherit one stderr (a file in the tests, a pipe under a container
runtime), run unbuffered there (PYTHONUNBUFFERED=1: tests/helpers.py, the Docker images, the Helm chart).
Each line must reach it in one write, or two processes' lines interleave into one unparseable line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from tests.helpers import ROOT

PROCESSES = 4
LINES = 1500

# A process that logs through voxgate's real set-up; every 50th line is a wide one (over the 8 KiB a text
# stream writes in one piece; only with a file, where the kernel keeps a write whole at any size).
LOGGER = """
import sys
import structlog
from engine_api.logs import configure_logging
configure_logging()
log = structlog.get_logger("flood")
me, lines, wide = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "wide"
for i in range(lines):
    fields = {f"f{k}": str(k) * 1000 for k in range(9)} if wide and i % 50 == 0 else {}
    log.info("flood", proc=me, i=i, text="x" * (i % 300), **fields)
"""


def flood(stderr: IO[Any] | int, wide: bool) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return [
        subprocess.Popen(
            [sys.executable, "-c", LOGGER, str(i), str(LINES), "wide" if wide else "narrow"],
            cwd=ROOT,
            stderr=stderr,
            env=env,
        )
        for i in range(PROCESSES)
    ]


def assert_whole_lines(text: str) -> None:
    lines = text.splitlines()
    bad = [line[:200] for line in lines if not _is_json(line)]
    assert not bad, f"{len(bad)} of {len(lines)} lines are not one JSON record each, e.g. {bad[:3]}"
    seen = {(r["proc"], r["i"]) for r in map(json.loads, lines)}
    assert seen == {(p, i) for p in range(PROCESSES) for i in range(LINES)}


def _is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def test_processes_sharing_a_log_file_write_whole_lines(tmp_path: Path) -> None:
    log_path = tmp_path / "shared.log"
    with log_path.open("w") as shared:  # as start_server opens the server's log: one file, inherited by all
        procs = flood(shared, wide=True)
        assert [p.wait(timeout=120) for p in procs] == [0] * PROCESSES
    assert_whole_lines(log_path.read_text())


def test_processes_sharing_a_pipe_write_whole_lines() -> None:
    read_fd, write_fd = os.pipe()
    try:
        procs = flood(write_fd, wide=False)  # a pipe keeps a write whole only up to PIPE_BUF (4096 bytes)
    finally:
        os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        text = reader.read().decode()
    assert [p.wait(timeout=120) for p in procs] == [0] * PROCESSES
    assert_whole_lines(text)
