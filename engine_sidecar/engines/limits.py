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

# whisper only.
WHISPER_STREAMS_PER_CORE = Limit(
    "Whisper streams",
    2,
    Unit.SESSIONS,
    "per core the sidecar may run on (its CPU affinity)",
    "the engine's capacity: more sessions get UNAVAILABLE / CAPACITY",
)
WHISPER_ADMISSION_LAG = Limit(
    "Whisper decodes behind",
    3000,
    Unit.WALL_MS,
    "the engine's oldest waiting decode",
    "new sessions are refused (UNAVAILABLE / CAPACITY) and readiness is NOT_SERVING until decoding catches up",
)
WHISPER_SEGMENT = Limit(
    "Whisper audio decoded in one piece",
    25_000,
    Unit.AUDIO_MS,
    "per utterance",
    "the utterance is cut after its last word a second before the limit: that part's text is final and is "
    "the prompt of the rest (the model reads at most 30 s)",
)

LIMITS: tuple[Limit, ...] = (
    OUTPUTS,
    BACKLOG,
    ADMISSION_LAG,
    WHISPER_STREAMS_PER_CORE,
    WHISPER_ADMISSION_LAG,
    WHISPER_SEGMENT,
)
