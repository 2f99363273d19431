"""The service's flow-control bounds, each named once, with its unit and what happens when it is reached.

Modules take their bound from here; Config takes the default of each configurable one from here (its flag
changes it per server). The README's "Tuning: flow-control limits" table is generated from LIMITS
(scripts/gen_limits_table.py; tests/unit/test_limits_table.py fails when the two differ).
"""

from __future__ import annotations

from engine_api import frames
from engine_api.audio import CHUNK_MS
from engine_api.limits import Limit, Unit


def flag(config_field: str) -> str:
    """The command-line flag of a Config field (config.add_config_arguments' rule)."""
    return "--" + config_field.replace("_", "-")


# Client → service: the transport and the request.
MESSAGE = Limit(
    "gRPC message",
    4 * 1024 * 1024,
    Unit.BYTES,
    "per request",
    "the RPC fails with RESOURCE_EXHAUSTED (gRPC's own check, before the service sees it)",
    flag("max_message_bytes"),
)
AUDIO_MESSAGE = Limit(
    "audio in one request",
    65536,
    Unit.BYTES,
    "per request",
    "the stream fails with INVALID_ARGUMENT / AUDIO_MESSAGE_TOO_LARGE",
    flag("max_audio_bytes_per_message"),
)
TRANSPORT_WINDOW = Limit(
    "unread client audio in the transport",
    65536,
    Unit.BYTES,
    "per stream",
    "HTTP/2 flow control holds the client (a fixed window: no BDP growth)",
)
# Service → engine: audio waiting for the engine, and kept for a replay.
ENGINE_QUEUE = Limit(
    "audio waiting for the engine",
    64 * CHUNK_MS,
    Unit.AUDIO_MS,
    "per session",
    "the service stops reading the client; HTTP/2 flow control holds it (backpressure)",
)
ENGINE_IN_FLIGHT = Limit(
    "audio in flight to the sidecar",
    frames.IN_FLIGHT_BYTES,
    Unit.BYTES,
    "per engine stream",
    "the service's write waits and its engine queue fills (backpressure)",
    "",
)
REPLAY = Limit(
    "audio kept for a replay after a seam",
    30000,
    Unit.AUDIO_MS,
    "per session",
    "the oldest is dropped: a fresh engine session gets only the newest this much",
    flag("max_replay_ms"),
)
# Engine → service → client: outputs and responses.
ENGINE_OUTPUTS = Limit(
    "engine outputs read from the sidecar",
    64,
    Unit.MESSAGES,
    "per engine stream",
    "the service stops reading the sidecar's stream; the frames socket's small buffers hold the engine",
)
RESPONSES_RETAINED = Limit(
    "delivered responses kept for a resume",
    512,
    Unit.MESSAGES,
    "per session",
    "the oldest delivered is dropped: a resume gets the responses still held "
    "(undelivered ones are never dropped; interims and FlowStatus coalesce)",
)

LIMITS: tuple[Limit, ...] = (
    MESSAGE,
    AUDIO_MESSAGE,
    TRANSPORT_WINDOW,
    ENGINE_QUEUE,
    ENGINE_IN_FLIGHT,
    REPLAY,
    ENGINE_OUTPUTS,
    RESPONSES_RETAINED,
)

ENGINE_QUEUE_CHUNKS = ENGINE_QUEUE.value // CHUNK_MS  # the queue's maxsize: it holds 80 ms chunks
