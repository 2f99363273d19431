"""SIGTERM: the server's log stays JSON lines to the end (no stray traceback from a background task)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers import start_server


@pytest.mark.parametrize("run", range(2))
def test_sigterm_leaves_only_json_log_lines(tmp_path: Path, run: int) -> None:
    # Frequent health checks: one is due while the server shuts down (it used to hit a closed channel).
    server = start_server(tmp_path, "--sidecar-health-interval-s", "0.1", engine="fake")
    time.sleep(0.3)
    assert server.stop() == 0
    lines = server.log().splitlines()
    assert lines
    not_json = [line for line in lines if not line.startswith("{")]
    assert not not_json, "\n".join(not_json[:20])
    assert all(isinstance(json.loads(line), dict) for line in lines)
