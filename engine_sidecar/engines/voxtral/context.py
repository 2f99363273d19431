"""What the sessions of one Voxtral engine share: EngineContext."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from engine_api.phrases import PhraseHint
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.voxtral.chunk_render import Render
from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.engines.voxtral.probes import Probes
from engine_sidecar.engines.voxtral.reanchor_link import PositionChoice, StreamListener
from engine_sidecar.engines.voxtral.rollover import RolloverPolicy
from engine_sidecar.engines.voxtral.session_phrases import Encode, SessionPhrases
from engine_sidecar.engines.voxtral.timing import StreamGeometry
from engine_sidecar.engines.voxtral.token_text import TokenPieces


@dataclass
class EngineContext:
    """What sessions share: the engine, its geometry and options, counters, and the error handler."""

    llm: Any
    model_cls: Any
    geometry: StreamGeometry
    options: VoxtralOptions
    probes: Probes
    rollover: RolloverPolicy
    counters: EngineCounters
    on_request_error: Callable[[BaseException], None]  # exits the sidecar if the engine itself died
    clock: Callable[[], float]
    position_mode: PositionChoice = PositionChoice.rollover("")
    # request id -> what that request's session does with its re-anchor news (ReanchorLink dispatches)
    reanchor_listeners: dict[str, StreamListener] = field(default_factory=dict)
    flush_reanchor: Callable[[], Awaitable[None]] | None = None  # fetch pending events now
    fallback_rollover: RolloverPolicy | None = None  # a session whose re-anchoring failed rolls over by this
    request_prefix: str = "voxgate"  # of every request id; one per front end sharing an engine core
    render: Render | None = None  # each step's prompt -> engine input (chunk_render.py); None: vLLM's renderer
    direct_tasks: Any = None  # the engine's supported tasks where the direct step driver is in effect, else None
    token_pieces: TokenPieces | None = None  # each token's text (token_text.py); None: vLLM detokenizes
    phrase_encoder: Encode | None = None  # phrase hints -> tokens where the engine biases toward them, else None
    first_text_id: int = 0  # token ids below it are special, not text

    def phrases(self, hints: tuple[PhraseHint, ...]) -> SessionPhrases | None:
        return None if self.phrase_encoder is None else SessionPhrases(self.phrase_encoder, self.first_text_id, hints)

    def count(self, name: str) -> None:
        self.counters.extra[name] = self.counters.extra.get(name, 0) + 1
