"""Per-session watchdog for the two ways a live Voxtral session goes quiet while looking healthy.

- Blank rut: over real speech the model emits only its blank token for minutes
  (healthy blank runs over speech are tens to ~165 frames; ruts are thousands).
  Declared when the run of blank tokens exceeds K frames *and* most of the audio
  pushed during that run was speech by the service's VAD.
- Stall: audio is being fed but no token has come out for T seconds
  (`stall_timeout_s`; reported as a FREEZE_RECOVERY diagnostic). The service
  has its own, coarser watch (`--freeze-timeout-s`: service/session/freeze.py).

Pure bookkeeping: the session asks check() and recovers (rollover) itself.
Time comes from an injected clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine_api.outputs import DiagnosticKind

RUT = DiagnosticKind.RUT_RECOVERY
FREEZE = DiagnosticKind.FREEZE_RECOVERY


@dataclass
class Watchdog:
    rut_blank_frames: int  # K; 0 disables
    stall_timeout_s: float  # T; 0 disables
    frame_ms: int
    clock: Callable[[], float]
    blank_run: int = 0
    speech_ms_in_run: int = 0
    last_output_at: float = 0.0

    def __post_init__(self) -> None:
        self.last_output_at = self.clock()

    def on_token(self, blank: bool) -> None:
        self.last_output_at = self.clock()
        if blank:
            self.blank_run += 1
        else:
            self.blank_run = 0
            self.speech_ms_in_run = 0

    def on_audio(self, chunk_ms: int, speech: bool) -> None:
        if speech:
            self.speech_ms_in_run += chunk_ms

    def reset(self) -> None:
        self.blank_run = 0
        self.speech_ms_in_run = 0
        self.last_output_at = self.clock()

    def check(self, backlog_ms: int) -> DiagnosticKind | None:
        """RUT or FREEZE when the session needs recovering, else None."""
        k = self.rut_blank_frames
        if k and self.blank_run > k and self.speech_ms_in_run * 2 >= k * self.frame_ms:
            return RUT
        if self.stall_timeout_s and backlog_ms > 0 and self.clock() - self.last_output_at > self.stall_timeout_s:
            return FREEZE
        return None
