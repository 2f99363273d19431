"""Per-tenant session quotas, counted once for the whole service.

On one process the count is this process's sessions. Under `voxgate serve --workers N` each worker admits
its own sessions, so a count per worker would let a tenant hold N times its quota: the parent keeps the one
book (`QuotaServer`, a Unix socket in its 0700 directory) and every worker takes and gives back its sessions'
slots there (`SharedQuotas`). Each worker is one connection: when a worker dies its connection closes and
every slot it held is given back at once, as its sessions are gone with it.

The protocol is one JSON object per line, each answered `{"ok": bool}` in order: `{"take": id, "tenant": t,
"slots": n, "quota": q}` and `{"give": id}`. A session's end reaches its client only once its give is
answered (service/api.py), so a client that saw its session end may start the next one on any worker, as on
one process.

The book also keeps the one count of sessions the whole service holds (every session, with or without a
tenant): each worker reports its own count whenever it changes, `{"held": n, "worker": i}`, answered with
the service's total and each worker's share, `{"ok": true, "total": N, "workers": [[i, n], ...]}`. The
capacity audit and GetCapabilities compare and report that total, not one worker's share of it
(service/capacity.py); `voxgate status` shows the shares too.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import structlog

log = structlog.get_logger("quotas")
MAX_LINE_BYTES = 4096  # a tenant name and a session id: far less; longer is a broken peer


@dataclass(frozen=True)
class ServiceSessions:
    """Sessions the whole service holds, and each worker's share (`--workers N`; empty on one process)."""

    total: int
    by_worker: tuple[tuple[int, int], ...] = ()


@dataclass
class _Held:
    tenant: str
    slots: int


@dataclass
class QuotaBook:
    """Slots held per tenant, by holder (a worker's connection) and session id."""

    _held: dict[tuple[object, str], _Held] = field(default_factory=dict)
    _per_tenant: dict[str, int] = field(default_factory=dict)
    _sessions: dict[object, int] = field(default_factory=dict)  # each holder's own count of its sessions
    _worker_of: dict[object, int] = field(default_factory=dict)  # each holder's worker index, as it said

    def report(self, holder: object, sessions: int, worker: int | None = None) -> ServiceSessions:
        """A worker's count of the sessions it holds; the whole service's, with each worker's share."""
        self._sessions[holder] = sessions
        if worker is not None:
            self._worker_of[holder] = worker
        shares = sorted((self._worker_of[h], n) for h, n in self._sessions.items() if h in self._worker_of)
        return ServiceSessions(sum(self._sessions.values()), tuple(shares))

    def take(self, holder: object, session_id: str, tenant: str, slots: int, quota: int) -> bool:
        """All `slots` for the session, or none when they would take `tenant` past `quota` (0: no quota)."""
        held = self._per_tenant.get(tenant, 0)
        if quota and held + slots > quota:
            return False
        self.give_back(holder, session_id)  # the same id twice counts once
        self._held[(holder, session_id)] = _Held(tenant, slots)
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + slots
        return True

    def give_back(self, holder: object, session_id: str) -> None:
        entry = self._held.pop((holder, session_id), None)
        if entry is not None:
            left = self._per_tenant[entry.tenant] - entry.slots
            if left:
                self._per_tenant[entry.tenant] = left
            else:
                del self._per_tenant[entry.tenant]

    def drop(self, holder: object) -> int:
        """Give back everything `holder` held (its worker is gone); how many slots that was."""
        self._sessions.pop(holder, None)
        self._worker_of.pop(holder, None)
        ids = [sid for h, sid in self._held if h is holder]
        slots = sum(self._held[(holder, sid)].slots for sid in ids)
        for sid in ids:
            self.give_back(holder, sid)
        return slots

    def held(self, tenant: str) -> int:
        return self._per_tenant.get(tenant, 0)


class Quotas(Protocol):
    async def take(self, session_id: str, tenant: str, slots: int, quota: int) -> bool: ...

    def give_back(self, session_id: str) -> asyncio.Future[dict[str, object]] | None:
        """Gives the session's slots back; a future when that is not done yet (done: others see them free)."""

    def report(self, sessions: int) -> None:
        """This process's count of its sessions changed (sent in order, not waited for)."""

    async def service_sessions(self, sessions: int) -> ServiceSessions:
        """Reports this process's count and returns the whole service's."""


class LocalQuotas:
    """One process: the book is this process's."""

    def __init__(self) -> None:
        self.book = QuotaBook()

    async def take(self, session_id: str, tenant: str, slots: int, quota: int) -> bool:
        return self.book.take(self, session_id, tenant, slots, quota)

    def give_back(self, session_id: str) -> None:
        self.book.give_back(self, session_id)

    def report(self, sessions: int) -> None:
        pass

    async def service_sessions(self, sessions: int) -> ServiceSessions:
        return ServiceSessions(sessions)


class QuotaLedgerUnreachable(ConnectionError):
    pass


class SharedQuotas:
    """A worker's view of the parent's book: one connection; every line is answered, in order."""

    def __init__(self, socket: Path, worker: int) -> None:
        self._socket = socket
        self._worker = worker  # this worker's index, told with each count
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._answers: deque[asyncio.Future[dict[str, object]]] = deque()  # one per line sent, in order
        self._connecting = asyncio.Lock()
        self._reports: set[asyncio.Future[ServiceSessions]] = set()  # reports waiting for the connection

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is None:
                reader, self._writer = await asyncio.open_unix_connection(str(self._socket), limit=MAX_LINE_BYTES)
                self._reading = asyncio.create_task(self._read_answers(reader, self._writer))
            return self._writer

    async def _read_answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error: Exception = ConnectionError("the quota ledger closed the connection")
        try:
            while line := await reader.readline():
                answer = json.loads(line)
                if not isinstance(answer, dict) or "ok" not in answer:
                    raise ValueError(f"not an answer: {line!r}")
                future = self._answers.popleft()
                if not future.done():  # a cancelled take's answer is dropped (its caller gives it back)
                    future.set_result(answer)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            error = exc
        finally:  # the parent dropped what this connection held: nothing pending can be answered now
            if self._writer is writer:
                self._writer = None
            writer.close()
            while self._answers:
                future = self._answers.popleft()
                if not future.done():
                    future.set_exception(QuotaLedgerUnreachable(f"{type(error).__name__}: {error}"))

    def _ask(self, writer: asyncio.StreamWriter, msg: dict[str, object]) -> asyncio.Future[dict[str, object]]:
        future: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        self._answers.append(future)
        writer.write(_line(msg))
        return future

    async def take(self, session_id: str, tenant: str, slots: int, quota: int) -> bool:
        """Asks the parent. Cancelled meanwhile, the caller gives the slots back: the give follows the take
        on the connection."""
        try:
            writer = await self._connect()
        except OSError as exc:
            raise QuotaLedgerUnreachable(f"{type(exc).__name__}: {exc}") from exc
        answer = await self._ask(writer, {"take": session_id, "tenant": tenant, "slots": slots, "quota": quota})
        return bool(answer["ok"])

    def give_back(self, session_id: str) -> asyncio.Future[dict[str, object]] | None:
        """Sent at once, in order with any take; None when there is no connection (its loss gave it back)."""
        if self._writer is None or self._writer.is_closing():
            return None
        future = self._ask(self._writer, {"give": session_id})
        future.add_done_callback(_retrieve)
        return future

    def report(self, sessions: int) -> None:
        if self._writer is not None and not self._writer.is_closing():
            self._ask(self._writer, {"held": sessions, "worker": self._worker}).add_done_callback(_retrieve)
        else:  # not connected yet (no tenant's session took a slot): connect first, the lock keeps the order
            task = asyncio.ensure_future(self.service_sessions(sessions))
            self._reports.add(task)
            task.add_done_callback(self._report_done)

    def _report_done(self, task: asyncio.Future[ServiceSessions]) -> None:
        self._reports.discard(task)
        if not task.cancelled():
            task.exception()  # an unreachable parent: this worker is being stopped

    async def service_sessions(self, sessions: int) -> ServiceSessions:
        try:
            writer = await self._connect()
        except OSError as exc:
            raise QuotaLedgerUnreachable(f"{type(exc).__name__}: {exc}") from exc
        answer = await self._ask(writer, {"held": sessions, "worker": self._worker})
        total, workers = answer.get("total"), answer.get("workers")
        if not isinstance(total, int):
            return ServiceSessions(sessions)
        shares = [(int(i), int(n)) for i, n in workers] if isinstance(workers, list) else []
        return ServiceSessions(total, tuple(shares))

    async def close(self) -> None:
        writer, reading = self._writer, self._reading
        self._writer = None
        if writer is not None:
            writer.close()
        if reading is not None:
            await asyncio.gather(reading, return_exceptions=True)


def _retrieve(future: asyncio.Future[dict[str, object]]) -> None:
    """A give's failure is no news (a lost connection gave everything back): no 'never retrieved' warning."""
    if not future.cancelled():
        future.exception()


class QuotaServer:
    """The parent's book, served to its workers on a Unix socket."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.book = QuotaBook()
        self._server: asyncio.Server | None = None
        self._peers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, str(self.socket), limit=MAX_LINE_BYTES)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # stops listening; the workers' connections are closed here (3.11 keeps them)
            for writer in list(self._peers):
                writer.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        holder = object()
        self._peers.add(writer)
        try:
            while line := await reader.readline():
                msg = json.loads(line)
                if "take" in msg:
                    ok = self.book.take(
                        holder, str(msg["take"]), str(msg["tenant"]), int(msg["slots"]), int(msg["quota"])
                    )
                    writer.write(_line({"ok": ok}))
                    await writer.drain()
                elif "held" in msg:
                    worker = msg.get("worker")
                    count = self.book.report(holder, int(msg["held"]), int(worker) if worker is not None else None)
                    shares = [list(share) for share in count.by_worker]
                    writer.write(_line({"ok": True, "total": count.total, "workers": shares}))
                else:
                    self.book.give_back(holder, str(msg["give"]))
                    writer.write(_line({"ok": True}))
        except (OSError, ValueError, KeyError, TypeError) as exc:  # a broken or killed worker
            log.warning("quota_peer_error", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._peers.discard(writer)
            if slots := self.book.drop(holder):
                log.info("quota_slots_released", slots=slots, why="worker connection closed")
            writer.close()


def _line(msg: dict[str, object]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"
