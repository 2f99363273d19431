"""Client strings, bounded before they are echoed into a status message, ErrorInfo metadata or a log line."""

from __future__ import annotations

ECHO_CHARS = 40  # the most of a client's string an error message quotes


def quoted(text: str, limit: int = ECHO_CHARS) -> str:
    """repr() of `text`, cut to `limit` characters with its full length noted when longer."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}… ({len(text)} characters)"
