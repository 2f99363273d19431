"""The log processor chain bounds every line, whatever a field holds."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import structlog

from service.logs import (
    MAX_FIELD_CHARS,
    MAX_LINE_CHARS,
    MAX_TRACEBACK_CHARS,
    BoundedRenderer,
    bound_fields,
    relay_lines,
)


def render(**event: object) -> str:
    out = BoundedRenderer(structlog.processors.JSONRenderer())(None, "info", bound_fields(None, "info", dict(event)))
    assert isinstance(out, str)
    return out


def test_a_long_field_is_cut_and_the_line_stays_json() -> None:
    line = render(event="session_error", error="x" * 1_000_000, count=3)
    parsed = json.loads(line)
    assert len(parsed["error"]) < MAX_FIELD_CHARS + 40 and parsed["error"].startswith("x" * 100)
    assert parsed["count"] == 3 and len(line) <= MAX_LINE_CHARS


def test_a_traceback_keeps_its_end() -> None:
    trace = "Traceback (most recent call last):\n" + "  frame\n" * 10_000 + "ValueError: the cause"
    parsed = json.loads(render(event="failed", exception=trace))
    assert parsed["exception"].endswith("ValueError: the cause")
    assert len(parsed["exception"]) < MAX_TRACEBACK_CHARS + 40


def test_many_long_fields_are_shortened_to_fit_one_line() -> None:
    fields = {f"f{i}": "y" * 5000 for i in range(40)}
    line = render(event="wide", **fields)
    parsed = json.loads(line)
    assert len(line) <= MAX_LINE_CHARS and parsed["truncated"] is True and parsed["event"] == "wide"


def test_a_childs_overlong_stdout_line_is_relayed_and_never_blocks_it(tmp_path: Path) -> None:
    """A child's stdout line past the reader's limit (64 KiB) used to end the copying; the pipe then filled
    and the child (a sidecar, a worker) blocked on its next write for good."""
    long_line = "x" * 300_000
    child = "import sys; sys.stdout.write('first\\n' + 'x' * 300_000 + '\\nafter\\n' + 'tail'); sys.stdout.flush()"
    out_path = tmp_path / "relayed"

    async def run() -> int:
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", child, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        with out_path.open("wb") as out:
            relay = asyncio.ensure_future(relay_lines(proc.stdout, out.fileno()))
            code = await asyncio.wait_for(proc.wait(), 20)
            await asyncio.wait_for(relay, 20)
        return code

    assert asyncio.run(run()) == 0
    relayed = out_path.read_bytes()
    assert relayed.replace(b"\n", b"") == f"first{long_line}aftertail".encode()
    assert relayed.startswith(b"first\n") and relayed.endswith(b"after\ntail\n")
