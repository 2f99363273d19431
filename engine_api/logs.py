"""structlog set-up for both processes: JSON lines when stderr is not a TTY, readable lines when it is.

The service and the engine sidecar it spawns write to the same stderr, so they share one line format.

Every line is bounded (defence in depth: client strings are validated and cut
before they get here): a field's text is cut to MAX_FIELD_CHARS (a traceback
keeps its last MAX_TRACEBACK_CHARS), and a line still over MAX_LINE_CHARS is
replaced by its event name and short fields, marked `"truncated": true`.

Every line reaches stderr in ONE write (LineLogger, write_line). The processes share one inherited stderr
and run unbuffered there (PYTHONUNBUFFERED=1 in the images and the tests), where structlog's PrintLogger
(print) writes a line and its newline in two calls: two processes' lines then interleaved into one
unparseable line. A single write(2) stays whole in a file at any size, and in a pipe up to PIPE_BUF.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

MAX_FIELD_CHARS = 1024
MAX_TRACEBACK_CHARS = 8192
MAX_LINE_CHARS = 12288  # below the wire fuzzer's 16 KiB alarm
SHORT_FIELD_CHARS = 128
TRACEBACK_FIELDS = frozenset({"exception", "stack"})


def _cut(value: str, limit: int, keep_end: bool = False) -> str:
    if len(value) <= limit:
        return value
    note = f"…[{len(value) - limit} more characters]"
    return note + value[-limit:] if keep_end else value[:limit] + note


def bound_fields(_logger: Any, _name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Cut every long field (text, or anything whose str() is long) to its bound."""
    for key, value in event.items():
        if isinstance(value, bool | int | float) or value is None:
            continue
        text = value if isinstance(value, str) else str(value)
        limit = MAX_TRACEBACK_CHARS if key in TRACEBACK_FIELDS else MAX_FIELD_CHARS
        if len(text) > limit:
            event[key] = _cut(text, limit, keep_end=key in TRACEBACK_FIELDS)
    return event


class BoundedRenderer:
    """Render with `inner`; a line over max_chars is rendered again from short fields only."""

    def __init__(self, inner: structlog.typing.Processor, max_chars: int = MAX_LINE_CHARS) -> None:
        self._inner = inner
        self._max_chars = max_chars

    def __call__(self, logger: Any, name: str, event: MutableMapping[str, Any]) -> Any:
        line = self._inner(logger, name, dict(event))
        if not isinstance(line, str) or len(line) <= self._max_chars:
            return line
        short = {
            k: v if isinstance(v, bool | int | float) or v is None else _cut(str(v), SHORT_FIELD_CHARS)
            for k, v in event.items()
        }
        return self._inner(logger, name, {**short, "truncated": True})


def write_line(fd: int, line: bytes) -> None:
    """`line` (newline added when missing) in one os.write; the loop only finishes a rare short write."""
    data = memoryview(line if line.endswith(b"\n") else line + b"\n")
    while data:
        data = data[os.write(fd, data) :]


class LineLogger:
    """A structlog logger whose every line is one write to `fd` (no lock needed: the kernel orders writes)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def msg(self, message: str) -> None:
        write_line(self._fd, message.encode("utf-8", "backslashreplace"))

    log = debug = info = warn = warning = error = critical = exception = fatal = failure = err = msg


def stderr_logger(*_args: Any) -> LineLogger | structlog.PrintLogger:
    """The logger factory: stderr's fd, or print where stderr has none (replaced in-process, e.g. captured)."""
    try:
        return LineLogger(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return structlog.PrintLogger(sys.stderr)


def configure_logging(level: str = "info") -> None:
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer() if sys.stderr.isatty() else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            bound_fields,
            BoundedRenderer(renderer),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=stderr_logger,
        cache_logger_on_first_use=True,
    )
