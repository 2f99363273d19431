"""The service's logging: the line format it shares with the engine sidecar (engine_api.logs), whose lines
go to the same stderr."""

import asyncio
import sys

from engine_api.logs import (
    MAX_FIELD_CHARS,
    MAX_LINE_CHARS,
    MAX_TRACEBACK_CHARS,
    BoundedRenderer,
    bound_fields,
    configure_logging,
    write_line,
)

__all__ = [
    "MAX_FIELD_CHARS",
    "MAX_LINE_CHARS",
    "MAX_TRACEBACK_CHARS",
    "BoundedRenderer",
    "bound_fields",
    "configure_logging",
    "relay_lines",
    "write_line",
]


async def relay_lines(stream: asyncio.StreamReader, fd: int | None = None) -> None:
    """Copy a child's stdout to our stderr (or fd) until it closes, a line per write (stderr is shared).

    Nothing much should come out there, but the copying must never stop while the child lives: a full pipe
    would block it. A line longer than the reader's limit goes out in limit-sized pieces instead of ending
    the copy (StreamReader.readline raises on it)."""
    out = sys.stderr.fileno() if fd is None else fd
    while True:
        try:
            line = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:  # the end: what came after the last newline, if anything
            if exc.partial:
                write_line(out, exc.partial)
            return
        except asyncio.LimitOverrunError as exc:  # an over-long line: pass on what is buffered, go on
            line = await stream.readexactly(exc.consumed)
        write_line(out, line)
