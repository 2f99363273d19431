"""`voxgate serve --workers N`: a parent that runs one engine sidecar and N service workers on one port.

Like gunicorn's/uvicorn's workers: every worker is a whole `Server` (service/server.py) that binds the same
host:port with SO_REUSEPORT, so the kernel spreads connections across them. The parent:

- picks the port first (port 0 included) and holds it with an SO_REUSEPORT socket that never listens, so
  the port is the same for every worker and every restart; it prints `voxgate listening on host:port` once;
- spawns and supervises the engine sidecar (or one per GPU: --engines/--gpus) with the service's own
  EnginePool (restart with backoff); the workers attach to the same sockets in `--sidecar-external` mode
  and wait for them across restarts;
- restarts a worker that died (with backoff); its sessions are lost, as a single process's would be;
- keeps the one count of each tenant's sessions that every worker's admission asks
  (service/tenant_quota.py), so a tenant's quota holds across workers as on one process;
- forwards SIGTERM/SIGINT to the workers (each drains its sessions), then stops the sidecar; SIGHUP too
  (each worker reloads its TLS files and tokens);
- on SIGUSR2, replaces the workers one at a time (an upgrade in place: each new worker runs the code now
  installed): SIGTERM to one, which stops listening and drains, its replacement started at once, and the
  next only once that one serves. voxgate's own clients go on without losing a final.

Admission is exact across workers because the sidecar is the authority: it gets --max-sessions as its slot
count and refuses the session past it (RESOURCE_EXHAUSTED → UNAVAILABLE/CAPACITY, as on one process).
See docs in README ("Several service workers") for what is per worker (health, metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Coroutine
from dataclasses import asdict, replace
from typing import Any

import structlog

from engine_api.restart_backoff import BackoffPolicy, RestartBackoff
from engine_api.sockets import private_umask

from .config import Config
from .engine_pool import EnginePool
from .gpus import EngineLayoutError
from .logs import relay_lines
from .peers import WorkerRole
from .private_dirs import make_private_dir
from .sidecar_process import SidecarStartError
from .startup import start_unless_stopped
from .tenant_quota import QuotaServer

log = structlog.get_logger("workers")
WORKER_MODULE = "service.worker_main"
WORKER_START_TIMEOUT_S = 60.0
# A worker that ran stable_s before dying is restarted after the first delay again.
WORKER_RESTART = BackoffPolicy(first_s=0.5, max_s=10.0, stable_s=30.0)
REPLACEMENT_READY_TIMEOUT_S = 60.0  # SIGUSR2: how long a replacement may take to serve before the next goes
STOP_MARGIN_S = 10.0  # beyond --drain-grace-s, how long a worker may take to stop before it is killed


class WorkerStartError(RuntimeError):
    pass


def reserve_port(host: str, port: int) -> socket.socket:
    """A bound, never-listening SO_REUSEPORT socket on host:port (0: a free port): it holds the port for the
    workers, which bind it too, and only listening sockets take connections."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def worker_command(role: WorkerRole, config: Config) -> list[str]:
    return [
        sys.executable,
        "-m",
        WORKER_MODULE,
        "--index",
        str(role.index),
        "--count",
        str(role.count),
        "--peer-dir",
        role.peer_dir,
        "--parent-pid",
        str(os.getpid()),
        "--config",
        json.dumps(asdict(config)),
    ]


class Workers:
    def __init__(self, config: Config) -> None:
        if config.workers < 1:
            raise ValueError("--workers must be >= 1")
        self._config = config
        self._dir = make_private_dir("workers-")  # 0700: the engine and worker sockets
        self._holder: socket.socket | None = None
        # Per-tenant session quotas, counted once for every worker (service/tenant_quota.py).
        self._quotas = QuotaServer(WorkerRole(0, config.workers, str(self._dir)).quota_socket())
        self._engines: EnginePool | None = None
        self._worker_config = config
        self._procs: list[asyncio.subprocess.Process | None] = [None] * config.workers
        self._tasks: set[asyncio.Task[None]] = set()
        self._watchers: list[asyncio.Task[None]] = []  # one per worker: restarts it when it dies
        self._stop = asyncio.Event()
        self._stopping = False
        self._replacing: set[int] = set()  # pids of workers stopped to be replaced (SIGUSR2): no backoff
        self._spawned = [asyncio.Event() for _ in range(config.workers)]  # set when worker i's replacement listens
        self._rolling: asyncio.Task[None] | None = None
        self.port = 0

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._signal_workers, signal.SIGHUP)
        loop.add_signal_handler(signal.SIGUSR2, self._replace_workers)
        try:
            if await start_unless_stopped(self.start(), self._stop):
                await self._stop.wait()
            else:
                log.info("stopped_while_starting")
        finally:
            clean = await self.shutdown()
        return 0 if clean else 1

    async def start(self) -> None:
        c = self._config
        try:
            self._holder = reserve_port(c.host, c.port)
        except OSError as exc:
            raise WorkerStartError(f"cannot listen on {c.host}:{c.port}: {exc.strerror or exc}") from exc
        self.port = self._holder.getsockname()[1]
        worker = replace(c, port=self.port, workers=1)
        if not c.sidecar_external:  # else the workers attach to the sidecar(s) someone else runs
            # The workers' pools name the same sockets (engine.sock, or engine.sock.<i> for --engines/--gpus).
            engine_socket = str(self._dir / "engine.sock")
            self._engines = EnginePool(replace(c, sidecar_socket=engine_socket), _log_engine_ready)
            worker = replace(worker, sidecar_external=True, sidecar_socket=engine_socket)
        self._worker_config = worker
        with private_umask():
            await self._quotas.start()
        await asyncio.gather(*(self._spawn(i) for i in range(c.workers)))
        print(f"voxgate listening on {c.host}:{self.port}", flush=True)
        log.info("listening", host=c.host, port=self.port, workers=c.workers, engine=c.engine)
        self._watchers = [asyncio.create_task(self._watch(i)) for i in range(c.workers)]
        if self._engines is not None:
            await self._engines.start()  # as on one process: the port answers (NOT_SERVING) meanwhile

    def _keep(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self, index: int) -> None:
        """Start worker `index` and wait until it listens (its `voxgate listening` line)."""
        c = self._worker_config
        role = WorkerRole(index, self._config.workers, str(self._dir))
        config = replace(c, metrics_port=c.metrics_port + index if c.metrics_port else 0)  # a port each
        proc = await asyncio.create_subprocess_exec(*worker_command(role, config), stdout=asyncio.subprocess.PIPE)
        self._procs[index] = proc
        assert proc.stdout is not None
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), WORKER_START_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            raise WorkerStartError(f"worker {index} did not listen within {WORKER_START_TIMEOUT_S:.0f}s") from None
        if not line.startswith(b"voxgate listening"):
            await proc.wait()
            raise WorkerStartError(f"worker {index} exited with {proc.returncode} before it listened")
        self._keep(relay_lines(proc.stdout))
        log.info("worker_started", index=index, pid=proc.pid)

    async def _watch(self, index: int) -> None:
        """Restart worker `index` whenever it dies, with backoff, until the parent stops."""
        backoff = RestartBackoff(WORKER_RESTART)
        while not self._stopping:
            proc = self._procs[index]
            assert proc is not None
            code = await proc.wait()
            if self._stopping:
                return
            if proc.pid in self._replacing:  # stopped on purpose: its replacement starts at once
                self._replacing.discard(proc.pid)
                delay = 0.0
                log.info("worker_stopped_for_replacement", index=index, pid=proc.pid, returncode=code)
            else:
                delay = backoff.next_delay()
                log.warning("worker_died", index=index, pid=proc.pid, returncode=code, restart_in_s=delay)
            while not self._stopping:
                await asyncio.sleep(delay)
                backoff.started()
                delay = backoff.next_delay()  # the next try's, should this one fail (doubles, as after a death)
                try:
                    await self._spawn(index)
                    self._spawned[index].set()
                    break
                except (WorkerStartError, OSError) as exc:
                    log.error("worker_restart_failed", index=index, error=str(exc))

    def _replace_workers(self) -> None:
        if self._stopping or (self._rolling is not None and not self._rolling.done()):
            return  # one replacement round at a time
        self._rolling = asyncio.create_task(self._replace_in_turn())

    async def _replace_in_turn(self) -> None:
        """Each worker in turn: SIGTERM (it stops listening and drains), its replacement, then the next once
        the replacement serves (its engine attached), so one worker always admits."""
        log.info("workers_replacing", workers=len(self._procs))
        for index, proc in enumerate(self._procs):
            if self._stopping:
                return
            if proc is None or proc.returncode is not None:
                continue
            self._spawned[index].clear()
            self._replacing.add(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            await self._spawned[index].wait()
            role = WorkerRole(index, self._config.workers, str(self._dir))
            if not await worker_serving(role, REPLACEMENT_READY_TIMEOUT_S):
                log.warning("worker_replacement_not_serving", index=index, timeout_s=REPLACEMENT_READY_TIMEOUT_S)
        log.info("workers_replaced", workers=len(self._procs))

    def _signal_workers(self, sig: int) -> None:
        for proc in self._procs:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)

    async def shutdown(self) -> bool:
        """Every worker drains (SIGTERM) and exits; then the sidecar stops. True if all exited cleanly."""
        self._stopping = True
        for watcher in self._watchers:  # no restarts from here on
            watcher.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        self._signal_workers(signal.SIGTERM)
        log.info("draining", workers=sum(p is not None and p.returncode is None for p in self._procs))
        codes = await asyncio.gather(*(self._stop_worker(p) for p in self._procs if p is not None))
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._quotas.stop()
        if self._engines is not None:
            await self._engines.stop()
        if self._holder is not None:
            self._holder.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        log.info("stopped", returncodes=codes)
        # -SIGTERM: our SIGTERM reached a worker before Python had run a line of it (just spawned, so it
        # held nothing). Death by the signal we sent to stop it is the stop we asked for.
        return all(code in (0, -signal.SIGTERM) for code in codes)

    async def _stop_worker(self, proc: asyncio.subprocess.Process) -> int:
        try:
            return await asyncio.wait_for(proc.wait(), self._config.drain_grace_s + STOP_MARGIN_S)
        except TimeoutError:
            log.warning("worker_kill", pid=proc.pid)
            proc.kill()
            return await proc.wait()


async def worker_serving(role: WorkerRole, timeout_s: float) -> bool:
    """Worker `role.index` answers SERVING on its private socket within `timeout_s` (its own readiness)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from .server import SPEECH_SERVICE

    deadline = asyncio.get_running_loop().time() + timeout_s
    async with grpc.aio.insecure_channel(f"unix:{role.socket()}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=SPEECH_SERVICE), timeout=min(left, 5))
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            await asyncio.sleep(0.1)
    return False


def _log_engine_ready(ready: bool) -> None:
    log.info("engine_ready" if ready else "engine_not_ready")


def run_workers(config: Config) -> int:
    try:
        return asyncio.run(Workers(config).serve())
    except KeyboardInterrupt:
        return 0
    except (WorkerStartError, SidecarStartError, EngineLayoutError, OSError, ValueError) as exc:
        print(f"voxgate: {exc}", file=sys.stderr)
        return 1
