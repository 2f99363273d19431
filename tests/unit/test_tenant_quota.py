"""Per-tenant quotas counted once across workers (service/tenant_quota.py): the book, and the parent's server
with its workers' clients over a real Unix socket."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from service.tenant_quota import (
    LocalQuotas,
    QuotaBook,
    QuotaLedgerUnreachable,
    QuotaServer,
    ServiceSessions,
    SharedQuotas,
)


def test_the_book_counts_slots_per_tenant_across_holders() -> None:
    book, a, b = QuotaBook(), object(), object()
    assert book.take(a, "s1", "acme", 1, 3) and book.take(b, "s2", "acme", 2, 3)
    assert not book.take(b, "s3", "acme", 1, 3), "a fourth slot is past the quota, whoever asks"
    assert book.take(b, "s3", "globex", 5, 0), "0: no quota"
    assert book.held("acme") == 3
    book.give_back(a, "s1")
    book.give_back(a, "s2")  # not a's: nothing
    assert book.held("acme") == 2 and book.take(a, "s4", "acme", 1, 3)
    assert book.drop(b) == 7 and book.held("acme") == 1 and book.held("globex") == 0


def test_a_session_taken_twice_counts_once() -> None:
    book, a = QuotaBook(), object()
    assert book.take(a, "s1", "acme", 1, 1) and not book.take(a, "s2", "acme", 1, 1)
    book.give_back(a, "s1")
    assert book.take(a, "s1", "acme", 1, 1) and book.held("acme") == 1


async def test_local_quotas_are_the_process_book() -> None:
    quotas = LocalQuotas()
    assert await quotas.take("s1", "acme", 1, 1) and not await quotas.take("s2", "acme", 1, 1)
    quotas.give_back("s1")
    assert await quotas.take("s2", "acme", 1, 1)


@pytest.fixture
async def ledger(tmp_path: Path) -> AsyncIterator[QuotaServer]:
    server = QuotaServer(tmp_path / "quota.sock")
    await server.start()
    yield server
    await server.stop()


async def settled(server: QuotaServer, tenant: str, held: int) -> None:
    """A closed connection is noticed by the server in its own time: wait for it."""
    for _ in range(200):
        if server.book.held(tenant) == held:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{tenant} holds {server.book.held(tenant)}, not {held}")


async def test_two_workers_share_one_count(ledger: QuotaServer) -> None:
    w0, w1 = SharedQuotas(ledger.socket, 0), SharedQuotas(ledger.socket, 1)
    assert await w0.take("a", "acme", 1, 2) and await w1.take("b", "acme", 1, 2)
    assert not await w0.take("c", "acme", 1, 2) and not await w1.take("c", "acme", 1, 2)
    assert await w1.take("d", "globex", 1, 2)
    given = w0.give_back("a")
    assert given is not None and await given, "answered once the book has it back"
    assert ledger.book.held("acme") == 1
    assert await w1.take("e", "acme", 1, 2)
    await w0.close()
    await w1.close()


async def test_a_dead_workers_slots_are_given_back(ledger: QuotaServer) -> None:
    w0, w1 = SharedQuotas(ledger.socket, 0), SharedQuotas(ledger.socket, 1)
    assert await w0.take("a", "acme", 2, 2)
    assert not await w1.take("b", "acme", 1, 2)
    await w0.close()  # as a SIGKILLed worker's connection: closed by the kernel
    await settled(ledger, "acme", 0)
    assert await w1.take("b", "acme", 2, 2)
    await w1.close()


async def test_a_cancelled_take_is_given_back_and_the_next_take_gets_its_own_answer(ledger: QuotaServer) -> None:
    w0 = SharedQuotas(ledger.socket, 0)
    assert await w0.take("warm", "other", 1, 0)  # connected: the next take writes at once
    task = asyncio.create_task(w0.take("a", "acme", 1, 1))
    await asyncio.sleep(0)  # the take line is written; its answer not yet read
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    w0.give_back("a")  # what the servicer does for a take that did not return
    assert await w0.take("b", "acme", 1, 1), "a's slot came back, and this answer is b's"
    assert ledger.book.held("acme") == 1
    assert not await w0.take("c", "acme", 1, 1)
    await w0.close()


async def test_an_unreachable_ledger_is_said(tmp_path: Path) -> None:
    with pytest.raises(QuotaLedgerUnreachable):
        await SharedQuotas(tmp_path / "none.sock", 0).take("a", "acme", 1, 1)
    server = QuotaServer(tmp_path / "quota.sock")
    await server.start()
    w0 = SharedQuotas(server.socket, 0)
    assert await w0.take("a", "acme", 1, 1)
    await server.stop()
    await asyncio.sleep(0.05)
    with pytest.raises(QuotaLedgerUnreachable):
        await w0.take("b", "acme", 1, 1)
    assert w0.give_back("b") is None, "after a lost connection: nothing to give (its loss gave it all back)"
    assert await LocalQuotas().take("c", "acme", 1, 1)


async def test_a_broken_peer_loses_only_its_own_slots(ledger: QuotaServer) -> None:
    w0 = SharedQuotas(ledger.socket, 0)
    assert await w0.take("a", "acme", 1, 3)
    reader, writer = await asyncio.open_unix_connection(str(ledger.socket))
    writer.write(b'{"take": "x", "tenant": "acme", "slots": 1, "quota": 3}\n')
    assert await reader.readline() == b'{"ok":true}\n'
    writer.write(b"\xff" + os.urandom(63) + b"\n")  # garbage: the server drops this connection and what it held
    assert await reader.read() == b""
    writer.close()
    await settled(ledger, "acme", 1)
    assert await w0.take("b", "acme", 2, 3)
    await w0.close()


async def test_takes_in_flight_when_the_ledger_goes_are_said(ledger: QuotaServer) -> None:
    w0 = SharedQuotas(ledger.socket, 0)
    assert await w0.take("a", "acme", 1, 0)
    takes = [asyncio.create_task(w0.take(f"t{i}", "acme", 1, 0)) for i in range(3)]
    await ledger.stop()  # answered or said: none is left waiting
    for outcome in await asyncio.gather(*takes, return_exceptions=True):
        assert outcome is True or isinstance(outcome, QuotaLedgerUnreachable), outcome
    await w0.close()


async def test_the_service_count_is_every_workers_sessions(ledger: QuotaServer) -> None:
    """One truth about capacity across workers: each reports its own count, and gets the service's with each
    worker's share."""
    assert await LocalQuotas().service_sessions(3) == ServiceSessions(3)  # one process: its own
    w0, w1 = SharedQuotas(ledger.socket, 0), SharedQuotas(ledger.socket, 1)
    assert await w0.service_sessions(2) == ServiceSessions(2, ((0, 2),))
    assert await w1.service_sessions(3) == ServiceSessions(5, ((0, 2), (1, 3)))
    w0.report(1)  # a session of w0's ended: sent at once, in order on w0's connection
    assert await w0.service_sessions(1) == ServiceSessions(4, ((0, 1), (1, 3)))
    await w0.close()  # a dead worker's sessions are gone with it
    for _ in range(200):
        if (await w1.service_sessions(3)).total == 3:
            break
        await asyncio.sleep(0.01)
    assert await w1.service_sessions(3) == ServiceSessions(3, ((1, 3),))
    await w1.close()
