"""A voxtral sidecar with K front ends: one vLLM engine core, K AsyncLLM processes on it (engine option
`frontends=K`).

This is vLLM's own multi-client mechanism, the one `vllm serve --api-server-count K` runs
(`run_multi_api_server`): bind one ZMQ listener pair per client slot (`bind_engine_zmq_listeners`), launch
the EngineCore with every slot's addresses (`launch_core_engines`), and start one front-end process per slot
with `AsyncLLM(client_addresses, client_count, client_index)` (as `APIServerProcessManager` does). Each
front end serves the engine API on its own socket (frontend_client.frontend_socket), lists every front end's
socket in its status (the service follows each), and has its share of the engine's capacity.

This process supervises them. Unlike `vllm serve`, which stops everything when one API server dies, a dead
front end is replaced while the core and the other front ends keep serving: its sessions see an engine loss
(the service reconnects and replays). The core sends each slot its one-time "ready" message at start-up only,
so a replacement takes a spare slot (`frontend_spares`, bound at launch) and first aborts the requests the
dead one left parked in the scheduler. Replacements of one front end back off (engine_api/restart_backoff.py), so one
that dies at once again does not use up every spare in a second. When the core dies, or no spare slot is left,
this process exits non-zero and the service restarts the whole sidecar, as with one front end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

import structlog

from engine_api.restart_backoff import BackoffPolicy, RestartBackoff
from engine_sidecar.engines.voxtral.allocator import child_library, for_children
from engine_sidecar.engines.voxtral.allocator import describe as describe_allocator
from engine_sidecar.engines.voxtral.engine import EXIT_ENGINE_DEAD, extension_choice, phrase_bias_choice
from engine_sidecar.engines.voxtral.frontend_client import FrontEndClient
from engine_sidecar.engines.voxtral.options import VoxtralOptions
from engine_sidecar.engines.voxtral.probes import Probes
from engine_sidecar.engines.voxtral.procs import (
    ChildrenDieWithUs,
    check_vllm_version,
    on_cpu,
    set_env_defaults,
    set_release_env,
)
from engine_sidecar.process.frontend import run_frontend

log = structlog.get_logger("voxtral")

SUPERVISE_TICK_S = 0.5  # how often the loop looks at the stop flag between process events
STOP_GRACE_S = 10.0  # front ends get this long to stop their gRPC servers on SIGTERM
FRONTEND_RESTART = BackoffPolicy(first_s=0.5, max_s=8.0, stable_s=60.0)  # between replacements of one front end


def run_core_host(args: argparse.Namespace, options: VoxtralOptions) -> int:
    return CoreHost(args, options).run()


class CoreHost:
    def __init__(
        self,
        args: argparse.Namespace,
        options: VoxtralOptions,
        restart: BackoffPolicy = FRONTEND_RESTART,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._args = args
        self._k = options.frontends
        self._options = options
        self._slots = options.frontends + options.frontend_spares
        self._next_slot = options.frontends  # the next spare slot
        self._procs: dict[int, BaseProcess] = {}  # front end index -> its process
        self._clients: dict[int, FrontEndClient] = {}
        self._clock = clock
        self._backoff = {i: RestartBackoff(restart, clock) for i in range(self._k)}
        # index -> (when, spare slot, dead one's slot): a dead front end's replacement, waiting out its backoff
        self._due: dict[int, tuple[float, int, int]] = {}
        # index -> its "serving" event, held: one dropped here is unlinked before the child can open it
        self._ready: dict[int, Any] = {}
        self._ctx = multiprocessing.get_context("spawn")  # as vLLM: the listeners' sockets travel to the child
        self._children = ChildrenDieWithUs()
        self._stop = False
        self._listeners: Any = None
        self._manager: Any = None
        self._tensor_queue: Any = None

    def run(self) -> int:
        cpu = on_cpu()
        set_env_defaults(cpu)
        _, release = check_vllm_version(self._options.allow_unlisted_vllm)
        set_release_env(cpu, release)
        self._children.install()  # the engine core and the front ends die with this process
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.utils import bind_engine_zmq_listeners, launch_core_engines
        from vllm.v1.executor import Executor

        probes = Probes.from_env()  # a test's, as its front ends read them
        _, extension = extension_choice(self._options, release, probes)
        engine_args = AsyncEngineArgs(
            **self._options.engine_kwargs(
                self._args.model,
                on_cpu=cpu,
                reanchor=extension,
                probes=probes,
                phrase_bias=phrase_bias_choice(self._options, release),
            )
        )
        engine_args._api_process_count = self._slots  # as run_multi_api_server: the supervisor's rank is -1
        engine_args._api_process_rank = -1
        vllm_config = engine_args.create_engine_config(UsageContext.ENGINE_CONTEXT)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        self._listeners = bind_engine_zmq_listeners(vllm_config, self._slots)
        allocator = child_library(self._options.allocator, cpu)
        log.info("core_allocator", allocator=describe_allocator(allocator, self._options.allocator, cpu))
        try:
            with ExitStack() as launched:
                with for_children(allocator):  # the EngineCore (and its Worker) are spawned here, not the front ends
                    launch = launched.enter_context(
                        launch_core_engines(
                            vllm_config, Executor.get_class(vllm_config), False, self._listeners.addresses
                        )
                    )
                self._manager = launch.engine_manager
                self._tensor_queue = launch.tensor_queue
                ready = [self._start(i, slot=i, orphan=None) for i in range(self._k)]
                launch.watched_frontend_processes = list(self._procs.values())
            # The core is up (launch_core_engines' exit waited for it); now every front end must serve.
            if not self._wait_ready(ready):
                return self._shutdown(1)
            print(f"READY {os.getpid()}", flush=True)
            log.info("frontends_ready", frontends=self._k, spare_slots=self._slots - self._k, socket=self._args.socket)
            return self._supervise()
        except Exception:
            log.exception("core_host_failed")
            return self._shutdown(1)

    # -- front ends ----------------------------------------------------------------

    def _start(self, index: int, slot: int, orphan: int | None) -> Any:
        listeners = self._listeners
        inp, out = listeners.inputs[slot], listeners.outputs[slot]
        addresses: dict[str, Any] = {
            "input_address": inp.address,
            "output_address": out.address,
            "input_listener": inp.socket,
            "output_listener": out.socket,
        }
        if self._tensor_queue is not None:
            addresses["tensor_queue"] = self._tensor_queue
        client = FrontEndClient(
            index=index, count=self._k, slot=slot, slots=self._slots, addresses=addresses, orphan_slot=orphan
        )
        ready = self._ctx.Event()
        proc = self._ctx.Process(
            target=run_frontend, args=(self._args, self._options, client, ready), name=f"VoxgateFrontEnd_{index}"
        )
        proc.start()
        inp.close()  # the child holds the listening sockets now, as in vLLM's APIServerProcessManager
        out.close()
        self._procs[index], self._clients[index], self._ready[index] = proc, client, ready
        log.info("frontend_started", index=index, slot=slot, pid=proc.pid, replaces_slot=orphan)
        return ready

    def _wait_ready(self, events: list[Any]) -> bool:
        while not all(e.is_set() for e in events):
            if self._stop:
                return False
            if dead := [i for i, p in self._procs.items() if not p.is_alive()]:
                log.error("frontend_failed_to_start", indices=dead, exit_codes=[self._procs[i].exitcode for i in dead])
                return False
            if self._core_dead():
                log.critical("vllm_engine_dead", during="start-up", exit_code=EXIT_ENGINE_DEAD)
                return False
            wait([p.sentinel for p in self._procs.values()], timeout=SUPERVISE_TICK_S)
        return True

    def _supervise(self) -> int:
        while not self._stop:
            # A dead front end waiting for its replacement is not watched (its sentinel stays ready).
            by_sentinel = {p.sentinel: i for i, p in self._procs.items() if i not in self._due}
            fired = wait([*by_sentinel, *self._core_sentinels()], timeout=self._tick())
            if self._core_dead():
                log.critical(
                    "vllm_engine_dead",
                    exit_code=EXIT_ENGINE_DEAD,
                    action="every front end stops; the service restarts the sidecar",
                )
                return self._shutdown(EXIT_ENGINE_DEAD, kill=True)
            for sentinel in fired:
                if (index := by_sentinel.get(sentinel)) is not None and not self._replace(index):  # type: ignore[arg-type]
                    return self._shutdown(EXIT_ENGINE_DEAD, kill=True)
            self._start_due()
        return self._shutdown(0)

    def _tick(self) -> float:
        """How long to wait for a process event: a tick, or less when a replacement falls due sooner."""
        if not self._due:
            return SUPERVISE_TICK_S
        return min(SUPERVISE_TICK_S, max(min(when for when, _, _ in self._due.values()) - self._clock(), 0.0))

    def _start_due(self) -> None:
        now = self._clock()
        for index, (when, slot, orphan) in list(self._due.items()):
            if when <= now:
                del self._due[index]
                self._start(index, slot=slot, orphan=orphan)
                self._backoff[index].started()

    def _replace(self, index: int) -> bool:
        """Schedule a replacement for a dead front end on a spare slot, after its backoff; False when no spare
        slot is left."""
        dead = self._procs[index]
        dead.join(1)  # reap it: its exit code for the log
        old = self._clients[index]
        if self._next_slot >= self._slots:
            log.critical(
                "frontend_spares_exhausted",
                index=index,
                exit_code=dead.exitcode,
                slots=self._slots,
                action="the sidecar exits; the service restarts it",
            )
            return False
        slot, self._next_slot = self._next_slot, self._next_slot + 1
        delay = self._backoff[index].next_delay()
        log.warning(
            "frontend_died",
            index=index,
            slot=old.slot,
            exit_code=dead.exitcode,
            restart_in_s=delay,
            action=f"replaced on spare slot {slot} in {delay:g} s; its sessions reconnect",
        )
        self._due[index] = (self._clock() + delay, slot, old.slot)
        return True

    # -- the engine core -------------------------------------------------------------

    def _core_sentinels(self) -> list[Any]:
        return list(self._manager.sentinels()) if self._manager is not None else []

    def _core_dead(self) -> bool:
        return self._manager is not None and bool(self._manager.finished_procs())

    # -- stopping --------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop = True

    def _shutdown(self, code: int, kill: bool = False) -> int:
        procs = [p for p in self._procs.values() if p.is_alive()]
        for p in procs:
            if kill:
                p.kill()
            else:
                p.terminate()  # SIGTERM: the front end stops its gRPC server and its AsyncLLM client
        for p in procs:
            p.join(STOP_GRACE_S)
            if p.is_alive():
                p.kill()
                p.join(1)
        if self._manager is not None:
            self._manager.shutdown()
        if self._listeners is not None:
            self._listeners.cleanup()  # spare slots' listeners and every slot's ipc path
            self._listeners = None
        self._children.close()
        log.info("core_host_stopped", exit_code=code)
        sys.stdout.flush()
        return code
