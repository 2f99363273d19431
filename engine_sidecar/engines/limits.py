"""The sidecar's flow-control bounds, each named once, with its unit and what happens when it is reached.

Modules take their bound from here; VoxtralOptions takes the default of its configurable ones from here.
The README's "Tuning: flow-control limits" table is generated from LIMITS (scripts/gen_limits_table.py).
"""

from __future__ import annotations

from engine_api.limits import Limit, Unit

# Not the service's queue of one engine link (service/limits.py ENGINE_OUTPUTS), which buffers the same
# outputs on the other side of the socket.
OUTPUTS = Limit(
    "engine outputs held for the service's stream",
    256,
    Unit.MESSAGES,
    "per engine session",
    "the engine waits for the stream to take them (backpressure)",
)
# voxtral only. Its request's own audio queue is unbounded in vLLM's realtime buffer: this bounds it.
BACKLOG = Limit(
    "audio fed to Voxtral, not yet transcribed",
    3000,
    Unit.AUDIO_MS,
    "per engine session",
    "the sidecar stops reading the session's audio until the model catches up; the service's "
    "engine queue then fills (backpressure); at least 1000 (the model's look-ahead)",
    "--engine-option max_backlog_ms=N",
)
ADMISSION_LAG = Limit(
    "Voxtral lag behind real time",
    1000,
    Unit.AUDIO_MS,
    "any live session",
    "new sessions are refused (UNAVAILABLE / CAPACITY) and readiness is NOT_SERVING until "
    "no session lags this much; 0: no such refusal",
    "--engine-option admission_max_lag_ms=N",
)

LIMITS: tuple[Limit, ...] = (OUTPUTS, BACKLOG, ADMISSION_LAG)
