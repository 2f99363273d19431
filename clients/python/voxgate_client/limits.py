"""The Python client's flow-control bounds, each named once, with its unit and what happens at it.

The server's are in the service (service/limits.py) and the engine sidecar
(engine_sidecar/engines/limits.py); voxgate's "Tuning: flow-control limits" table is
generated from all three.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Unit = Literal["ms of audio", "messages", "bytes"]


@dataclass(frozen=True)
class Limit:
    name: str  # what is bounded, for people
    value: int  # the bound (the default, where `setting` changes it)
    unit: Unit
    scope: str  # what one bound applies to
    at_limit: str  # what happens when it is reached
    setting: str = ""  # what sets it; "": fixed


UNACKED_AUDIO: Final = Limit(
    "audio sent but not acknowledged (resume)",
    4 * 1024 * 1024,
    "bytes",
    "per stream",
    "no more audio is read from the caller's iterable until the server's acknowledgements "
    "catch up (backpressure)",
    "ResumePolicy(max_unacked_bytes=N)",
)

LIMITS: Final[tuple[Limit, ...]] = (UNACKED_AUDIO,)
