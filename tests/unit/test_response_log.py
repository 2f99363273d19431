"""The session's response log: numbered, coalescing while undelivered, bounded, replayable."""

from __future__ import annotations

import asyncio

from service.events import FlowReport, SessionOutput, SpeechEvent
from service.session.log import ResponseLog
from service.transcript import Result


def interim(utterance: int, text: str, delta: str) -> Result:
    return Result(f"s-{utterance}", utterance, False, text, delta, 0, 0, ())


def final(utterance: int, text: str) -> Result:
    return Result(f"s-{utterance}", utterance, True, text, text, 0, 0, ())


def flow(acked: int) -> FlowReport:
    return FlowReport(acked, acked * 32, 0, 0)


def read_all(log: ResponseLog, after_seq: int = 0) -> list[tuple[int, SessionOutput]]:
    async def run() -> list[tuple[int, SessionOutput]]:
        log.close()
        return [(e.seq, e.item) async for e in log.read(after_seq)]

    return asyncio.run(run())


def test_a_client_that_stops_reading_holds_one_interim_and_one_flow_status_not_all() -> None:
    log = ResponseLog()
    text = ""
    for i in range(1000):  # interleaved: each new one is never the last entry's kind
        log.append(flow(i))
        text += f" w{i}"
        log.append(interim(0, text, f" w{i}"))
    assert log.pending() == 2
    (_, report), (_, result) = read_all(log)
    assert report == flow(999)
    assert isinstance(result, Result) and result.text == text and result.delta == text  # no delta lost


def test_finals_and_speech_events_are_never_coalesced() -> None:
    log = ResponseLog()
    log.append(SpeechEvent(True, 0))
    log.append(interim(0, "a", "a"))
    log.append(final(0, "a b"))
    log.append(interim(1, "c", "c"))
    log.append(SpeechEvent(False, 900))
    log.append(interim(1, "c d", " d"))
    log.append(final(1, "c d e"))
    items = [item for _, item in read_all(log)]
    assert items == [
        SpeechEvent(True, 0),
        interim(0, "a", "a"),
        final(0, "a b"),
        interim(1, "c d", "c d"),
        SpeechEvent(False, 900),
        final(1, "c d e"),
    ]


def test_a_delivered_entry_is_not_replaced_and_seqs_stay_consecutive() -> None:
    log = ResponseLog()

    async def run() -> list[tuple[int, SessionOutput]]:
        got: list[tuple[int, SessionOutput]] = []
        reader = log.read(0)
        log.append(interim(0, "a", "a"))
        log.append(flow(1))
        entry = await anext(reader)
        got.append((entry.seq, entry.item))
        # While the reader is between entries: the delivered interim stays; the undelivered flow is replaced.
        log.append(interim(0, "a b", " b"))
        log.append(flow(2))
        log.close()
        got += [(e.seq, e.item) async for e in reader]
        return got

    assert asyncio.run(run()) == [(1, interim(0, "a", "a")), (2, flow(2)), (3, interim(0, "a b", " b"))]


def test_a_resume_reads_from_after_its_last_seq_and_old_entries_are_bounded() -> None:
    log = ResponseLog(retained=4)
    for i in range(10):
        log.append(final(i, f"t{i}"))
    assert [seq for seq, _ in read_all(log, after_seq=7)] == [8, 9, 10]
    assert [seq for seq, _ in read_all(log, after_seq=0)] == [7, 8, 9, 10]  # delivered, trimmed to 4
