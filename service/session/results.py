"""Engine outputs → the client's responses: interim and final results, and the engine's notices."""

from __future__ import annotations

from engine_api.outputs import Closed, Delta, Diagnostic, EngineOutput, Flushed, Revision

from .. import metrics
from ..events import Notice
from ..transcript import UtteranceAssembler
from .log import ResponseLog
from .stats import SessionStats


class Results:
    def __init__(self, session_id: str, interim_results: bool, log: ResponseLog, stats: SessionStats) -> None:
        self._assembler = UtteranceAssembler(session_id)
        self._interim_results = interim_results
        self._log = log
        self._stats = stats

    def take(self, out: EngineOutput) -> None:
        """One engine output, in session time. Progress says nothing to the client."""
        if isinstance(out, Delta):
            result = self._assembler.add(out.text, out.start_ms, out.end_ms)
            if result is not None and self._interim_results:
                self._stats.result(final=False)
                self._log.append(result)
        elif isinstance(out, Revision):  # the engine's final text of the utterance: the final result's
            self._assembler.revise((d.text, d.start_ms, d.end_ms) for d in out.deltas)
        elif isinstance(out, Flushed | Closed):
            self.finalize()
        elif isinstance(out, Diagnostic):
            metrics.ENGINE_EVENTS.labels(out.kind).inc()
            self._log.append(Notice(f"ENGINE_{out.kind.upper()}", out.message))

    def finalize(self) -> None:
        """The current utterance is over: its text (what the client saw as interim text included) is final."""
        result = self._assembler.finalize()
        if result is not None:
            self._stats.result(final=True)
            self._log.append(result)
