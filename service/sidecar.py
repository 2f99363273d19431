"""Spawns and supervises the engine sidecar: ready handshake, health checks, restarts.

With `sidecar_external` someone else runs the sidecar (a second container in the
pod, a systemd unit): the service only attaches to its socket, health-checks it,
and when it goes away waits for it to come back. The same attach mode follows front end i > 0 of a sidecar
with several (voxtral `frontends=K`, service/engine_pool.py): the sidecar replaces a dead front end itself,
so losing that socket restarts nothing; only the supervisor of the spawned process restarts it.

While the sidecar is down, `ready` is False and new sessions are refused with
UNAVAILABLE + a retry delay; listeners hear every state change (health).

The sidecar runs as its own module (`python -m engine_sidecar`); the service knows it only through the
contract package, engine_api. Admission and readiness are derived from typed state (engine up, the running
engine's own EngineStatus, a free slot, not stopping) whenever any of it changes: a restarted engine starts
from its own first answer, never from what the one before it said.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any

import grpc
import structlog

from engine_api.frames import frames_socket
from engine_api.frontends import frontend_of
from engine_api.restart_backoff import BackoffPolicy, RestartBackoff
from engine_api.status import EngineStatus
from engine_api.v1 import engine_pb2, engine_pb2_grpc
from engine_api.wire import status_from_proto

from . import metrics
from .config import Config
from .logs import relay_lines
from .private_dirs import make_private_dir
from .sidecar_process import (
    SidecarStartError,
    check_private_socket,
    exit_code,
    sidecar_command,
)

log = structlog.get_logger("supervisor")
STATUS_TIMEOUT_S = 5.0
FAILED_CHECKS_BEFORE_RESTART = 3
# While the engine's last status said it takes no new session, it is asked again this often (not every
# --sidecar-health-interval-s): slots freed by someone else (another --workers process, another service on an
# external sidecar) or headroom regained reach readiness this late at most. Its own sessions' ends ask at once.
NOT_ADMITTING_STATUS_INTERVAL_S = 0.25
STALE_STUB_GRACE_S = 1.0
RESTART_MAX_S = 10.0  # the longest wait between restarts of a sidecar that keeps dying
RESTART_STABLE_S = 60.0  # a sidecar up this long is restarted after the first delay again


class SidecarSupervisor:
    def __init__(
        self,
        config: Config,
        on_ready_change: Callable[[bool], None],
        on_status: Callable[[], None] = lambda: None,
        index: int | None = None,
        env: Mapping[str, str] | None = None,
        frontend: int | None = None,
    ) -> None:
        self._config = config
        self.index = index  # its place in an engine pool of several (service/engine_pool.py); None: the only one
        self.frontend = frontend  # which front end of a sidecar with several it follows; None: it has one
        self._env = dict(env or {})  # over the service's own environment (a GPU pin: CUDA_VISIBLE_DEVICES)
        self._log = log.bind(engine_index=index) if index is not None else log
        self._log = self._log.bind(frontend_index=frontend) if frontend is not None else self._log
        self._on_ready_change = on_ready_change
        self._on_status = on_status  # after every status the sidecar answered (health checks)
        self._admission_logged = True  # the running engine's admission as last logged (a new engine: admitting)
        # Default: a fresh private directory (mkdtemp makes it 0700) that only this process uses.
        self._own_dir = None if config.sidecar_socket else make_private_dir()
        self._socket = self._own_dir / "engine.sock" if self._own_dir else Path(config.sidecar_socket)
        self._proc: asyncio.subprocess.Process | None = None
        self._channel: grpc.aio.Channel | None = None
        self.stub: engine_pb2_grpc.EngineStub | None = None
        self.status: engine_pb2.GetStatusResponse | None = None  # the latest answer (kept while the engine is down)
        self.engine_status: EngineStatus | None = None  # the running engine's own; None until it has answered
        self.ready = False  # a sidecar is up and has answered
        self._ready_event = asyncio.Event()
        self._down_event = asyncio.Event()
        self.restarts = 0
        first = config.sidecar_restart_backoff_s
        # A sidecar that dies soon after each start (a bad environment, a model that cannot load) is restarted
        # less and less often; one that ran a minute is restarted after the first delay again.
        self._restart_backoff = RestartBackoff(
            BackoffPolicy(first_s=first, max_s=max(RESTART_MAX_S, first), stable_s=RESTART_STABLE_S)
        )
        self._attached_before = False
        self._frontend_away = False  # front end 0 of several is being replaced by the sidecar (not ready meanwhile)
        self._stopping = False
        self._check_now = asyncio.Event()
        self._frames_refused = False  # its frames socket was refused once (logged once)
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def socket(self) -> Path:
        """The socket it serves on (front end 0's, for a sidecar with several front ends)."""
        return self._socket

    @property
    def frames_socket(self) -> Path | None:
        """Its sidecar's frames socket (engine_api/frames.py), where sessions go; None when it is missing or not
        private to this user (logged once)."""
        path = frames_socket(self._socket)
        try:
            check_private_socket(path)
        except (OSError, SidecarStartError) as exc:
            if not self._frames_refused:
                self._frames_refused = True
                self._log.warning(
                    "frames_socket_refused",
                    error=str(exc),
                    action="sessions go to another engine, or fail as the engine's loss",
                )
            return None
        return path

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def start(self) -> None:
        """First start: failure here is fatal (a broken install should not serve).

        External: attach in the background; readiness stays NOT_SERVING until the sidecar answers.
        """
        if self._config.sidecar_external:
            if not self._config.sidecar_socket:
                raise SidecarStartError("--sidecar-external needs --sidecar-socket")
            self._keep(self._follow_external())
            return
        await self._spawn()
        self._keep(self._supervise())

    def _keep(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _spawn(self) -> None:
        c = self._config
        cmd = sidecar_command(c, self._socket)
        self._log.info("sidecar_spawn", cmd=" ".join(cmd))
        env = {**os.environ, **self._env}
        self._proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, env=env)
        assert self._proc.stdout is not None
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), c.sidecar_start_timeout_s)
        except TimeoutError:
            self._proc.kill()
            raise SidecarStartError(f"sidecar not ready within {c.sidecar_start_timeout_s:.0f}s") from None
        if not line.startswith(b"READY"):
            await self._proc.wait()
            raise SidecarStartError(f"sidecar exited with {self._proc.returncode} before it was ready")
        self._keep(relay_lines(self._proc.stdout))
        check_private_socket(self._socket)
        self._channel = _engine_channel(self._socket)
        self.stub = engine_pb2_grpc.EngineStub(self._channel)
        try:
            status = await self.stub.GetStatus(engine_pb2.GetStatusRequest(), timeout=STATUS_TIMEOUT_S)
        except grpc.RpcError:
            # A sidecar that does not answer is no use: never leave it (and its vLLM engine) running.
            self._proc.kill()
            await self._close_channel()
            raise
        self._log.info("sidecar_ready", pid=self._proc.pid, engine=status.engine, model=status.model)
        self._frontend_away = False  # a new process: its front end 0 is there
        self._restart_backoff.started()
        self._take_status(status)
        self._set_ready(True)

    def _set_ready(self, ready: bool) -> None:
        """The engine came up (after its first answer) or went away. Down forgets the engine's own status, so a
        restarted one is judged from its own first answer only."""
        if ready:
            self._ready_event.set()
            self._down_event.clear()
        else:
            self._ready_event.clear()
            self._down_event.set()
            self.engine_status = None
            self._admission_logged = True
        if ready != self.ready:
            self.ready = ready
            self._on_ready_change(ready)

    def _take_status(self, status: engine_pb2.GetStatusResponse) -> None:
        """An answer of the engine that runs now: its first after a (re)start, or a health check's."""
        self.status = status
        index, count = frontend_of(status.counters)
        if count > 1 and self.frontend != index:  # one of several front ends, which its status says
            self.frontend = index
            self._log = self._log.bind(frontend_index=index)
        self.engine_status = status_from_proto(status)
        metrics.engine_status(str(self.index or 0), dict(status.counters))
        admitting = self._engine_admits(status, self.engine_status)
        if admitting != self._admission_logged:  # no headroom or no slot: a load balancer should look elsewhere
            self._admission_logged = admitting
            self._log.info("engine_admission", admitting=admitting, reason=self.engine_status.refusal)

    async def wait_ready(
        self, timeout_s: float, failed: engine_pb2_grpc.EngineStub | None = None
    ) -> engine_pb2_grpc.EngineStub | None:
        """The engine's stub once it is ready (within timeout_s), else None.

        `failed`: a stub whose stream just broke; give the supervisor a moment to
        notice a dead sidecar rather than hand the stale stub back.
        """
        if failed is not None and self.stub is failed:
            self._check_now.set()  # external: the broken stream is the first sign the sidecar went away
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._down_event.wait(), STALE_STUB_GRACE_S)
        if not self.ready and timeout_s > 0 and not self._stopping:
            try:
                await asyncio.wait_for(self._ready_event.wait(), timeout_s)
            except TimeoutError:
                return None
        return self.stub if self.ready else None

    async def _supervise(self) -> None:
        while not self._stopping:
            assert self._proc is not None
            exited = asyncio.ensure_future(exit_code(self._proc))
            checks = asyncio.ensure_future(self._health_checks())
            try:
                await asyncio.wait({exited, checks}, return_when=asyncio.FIRST_COMPLETED)
            finally:  # stop() cancels us: the checks must not outlive the channel they use
                checks.cancel()
                if self._stopping:
                    exited.cancel()
            if not exited.done():
                self._proc.kill()  # hung: restart it
                await exited
            self._set_ready(False)
            await self._close_channel()
            if self._stopping:
                return
            self._log.warning("sidecar_died", returncode=self._proc.returncode, restarts=self.restarts)
            await self._restart()

    async def _restart(self) -> None:
        while not self._stopping:
            delay = self._restart_backoff.next_delay()
            self._log.info("sidecar_restart_in", delay_s=delay)
            await asyncio.sleep(delay)
            self.restarts += 1
            metrics.SIDECAR_RESTARTS.inc()
            try:
                await self._spawn()
                return
            except (SidecarStartError, OSError, grpc.RpcError) as exc:
                self._log.error("sidecar_restart_failed", error=str(exc))

    async def _follow_external(self) -> None:
        """Attach to a sidecar someone else runs; when it goes away, wait for the next one."""
        while not self._stopping:
            await self._attach()
            await self._health_checks()
            self._set_ready(False)
            await self._close_channel()
            if not self._stopping:
                self._log.warning("sidecar_lost", socket=str(self._socket))

    async def _attach(self) -> None:
        waiting_logged = False
        while not self._stopping:
            channel = _engine_channel(self._socket)
            stub = engine_pb2_grpc.EngineStub(channel)
            try:
                status = await stub.GetStatus(engine_pb2.GetStatusRequest(), timeout=STATUS_TIMEOUT_S)
            except grpc.RpcError as exc:
                await channel.close()
                if not waiting_logged:
                    self._log.info("sidecar_waiting", socket=str(self._socket), error=str(exc.code()))
                    waiting_logged = True
                await asyncio.sleep(self._config.sidecar_restart_backoff_s)
                continue
            if self._attached_before and not self.frontend:  # a re-attach is a restart of the sidecar (for
                # front end i > 0, only of that front end: the spawned process's supervisor counts the sidecar's)
                self.restarts += 1
                metrics.SIDECAR_RESTARTS.inc()
            self._attached_before = True
            self._channel, self.stub = channel, stub
            self._log.info("sidecar_attached", socket=str(self._socket), engine=status.engine, model=status.model)
            self._take_status(status)
            self._set_ready(True)
            return

    async def _health_checks(self) -> None:
        failures = 0
        while failures < FAILED_CHECKS_BEFORE_RESTART:
            interval = self._config.sidecar_health_interval_s
            if self.ready and not self.admitting:
                interval = min(interval, NOT_ADMITTING_STATUS_INTERVAL_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._check_now.wait(), interval)
            self._check_now.clear()
            if self.stub is None:
                return  # the channel was closed: stopping
            try:
                status = await self.stub.GetStatus(engine_pb2.GetStatusRequest(), timeout=STATUS_TIMEOUT_S)
                failures = 0
                self._take_status(status)
                if self._frontend_away and not self._stopping:  # front end 0 is back (see _front_end_away)
                    self._frontend_away = False
                    self._log.info("frontend_back", pid=status.pid)
                    self._set_ready(True)
                self._on_status()
            except grpc.RpcError as exc:
                if await self._front_end_away(exc):
                    continue
                failures += 1
                self._log.warning("sidecar_health_failed", failures=failures, error=str(exc.code()))
                if self._config.sidecar_external and exc.code() == grpc.StatusCode.UNAVAILABLE:
                    return  # nothing listens: it is gone (whoever runs it restarts it)

    async def _front_end_away(self, exc: grpc.RpcError) -> bool:
        """Front end 0 of a spawned sidecar with several: nothing listens on its socket while the process lives,
        so the sidecar is replacing that front end (it exits by itself when it cannot: core_host.py). Not ready
        meanwhile, and no restart; a fresh channel, so that the replacement is seen at once (no reconnect
        backoff of the dead one's)."""
        if (
            self.frontend != 0
            or self._config.sidecar_external
            or exc.code() != grpc.StatusCode.UNAVAILABLE
            or self._proc is None
            or self._proc.returncode is not None
        ):
            return False
        if not self._frontend_away:
            self._frontend_away = True
            self._log.warning("frontend_away", socket=str(self._socket), action="the sidecar replaces it")
            self._set_ready(False)
        await self._close_channel()
        if not self._stopping:  # stopping: the checks end at the closed channel
            self._channel = _engine_channel(self._socket)
            self.stub = engine_pb2_grpc.EngineStub(self._channel)
        return True

    @property
    def attached(self) -> bool:
        """It follows a sidecar it did not spawn (--sidecar-external, or a front end i > 0 of its own)."""
        return self._config.sidecar_external

    @property
    def admitting(self) -> bool:
        """The engine that runs now takes new sessions: it is up, and its latest answer says it has headroom
        (its EngineStatus) and a free slot. False while no engine is up, or the new one has not answered."""
        if not self.ready or self.status is None or self.engine_status is None:
            return False
        return self._engine_admits(self.status, self.engine_status)

    @staticmethod
    def _engine_admits(status: engine_pb2.GetStatusResponse, engine: EngineStatus) -> bool:
        free_slot = not status.max_sessions or status.active_sessions < status.max_sessions
        return free_slot and engine.admitting

    @property
    def serving(self) -> bool:
        """Readiness as far as the engine goes: up, admitting, and not stopping (the server adds its own room
        and draining)."""
        return self.ready and self.admitting and not self._stopping

    def check_soon(self) -> None:
        """Ask for a health check now rather than at the next interval (capacity just changed)."""
        self._check_now.set()

    async def _close_channel(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        self._channel = None
        self.stub = None

    async def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping = True
        self._set_ready(False)
        for task in list(self._tasks):
            task.cancel()
        await self._close_channel()
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
        with contextlib.suppress(FileNotFoundError):
            self._socket.unlink()
        if self._own_dir is not None:  # ours alone; it may hold other front ends' sockets (`<socket>.<i>`)
            shutil.rmtree(self._own_dir, ignore_errors=True)


def _engine_channel(socket: Path) -> grpc.aio.Channel:
    # A private subchannel pool: otherwise every channel to this socket path shares one connection and its
    # reconnect backoff, and a restarted sidecar is refused because the dead one's backoff is still running.
    return grpc.aio.insecure_channel(f"unix:{socket}", options=[("grpc.use_local_subchannel_pool", 1)])
