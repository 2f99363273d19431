"""The service's logging: the line format it shares with the engine sidecar (engine_api.logs), whose lines
go to the same stderr."""

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
    "write_line",
]
