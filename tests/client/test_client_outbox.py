"""The resuming client's outbox: what a reconnect resends, and what an acknowledgement releases."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator

from voxgate_client import FINALIZE, Phrase, SetPhrases, StreamConfig
from voxgate_client.outbox import AsyncOutbox, Outbox
from voxgate_client.v1 import speech_pb2 as pb

CONFIG = StreamConfig(encoding="linear16", sample_rate_hz=16000)
FIRST = pb.StreamingRecognizeRequest(config=pb.StreamingConfig())
ITEM = 100  # bytes per audio item


def answered() -> threading.Event:
    """The server's first response on the connection has arrived."""
    event = threading.Event()
    event.set()
    return event


def answered_async() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


def outbox_items(items: int) -> Iterator[bytes]:
    return (bytes([k]) * ITEM for k in range(items))


def outbox(items: int) -> Outbox:
    return Outbox(outbox_items(items), CONFIG, pace=None, max_unacked=1 << 20)


def take(sender: Iterator[pb.StreamingRecognizeRequest], n: int) -> list[pb.StreamingRecognizeRequest]:
    return [next(sender) for _ in range(n)]


def audio_offsets(requests: list[pb.StreamingRecognizeRequest]) -> list[int]:
    return [r.audio[0] * ITEM for r in requests if r.WhichOneof("request") == "audio"]


def test_a_resend_starts_at_the_resume_offset_and_stays_contiguous_whatever_acks_arrive() -> None:
    box = outbox(6)
    first = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    assert audio_offsets(take(first, 5)[1:]) == [0, 100, 200, 300]  # sent; the connection then dies unacked

    resend = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    assert box.resume_offset() == 0
    # The resumed stream first replays what the server logged before the drop: acks up to 300. The
    # server skips 300 resent bytes by count, so all of them must still be sent, from offset 0.
    box.ack(300)
    assert box.resume_offset() == 0
    assert audio_offsets(list(resend)[1:]) == [0, 100, 200, 300, 400, 500]


def test_an_ack_releases_what_this_connection_sent() -> None:
    box = outbox(4)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    take(sender, 3)  # config, items 0 and 1
    box.ack(200)
    assert box.resume_offset() == 200
    box.ack(400)  # more than was sent: releases only what was
    assert box.resume_offset() == 200
    take(sender, 2)
    box.ack(400)
    assert box.resume_offset() == 400 and not box.finished()  # the iterable has not said it is done
    assert list(sender) == []
    assert box.finished()


def test_a_finalize_is_kept_until_audio_after_it_is_acknowledged() -> None:
    items = [b"\1" * ITEM, FINALIZE, b"\2" * ITEM]
    box = Outbox(iter(items), CONFIG, pace=None, max_unacked=1 << 20)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    take(sender, 4)
    box.ack(100)
    assert box.resume_offset() == 100  # the finalize at 100 may not have arrived: resent
    box.ack(200)
    assert box.resume_offset() == 200


def test_the_asyncio_outbox_resends_contiguously_too() -> None:
    async def run() -> list[int]:
        box = AsyncOutbox(outbox_items(6), CONFIG, pace=None, max_unacked=1 << 20)
        first = box.sender(FIRST, box.new_epoch(), asyncio.Event(), answered_async())
        assert audio_offsets([await anext(first) for _ in range(5)][1:]) == [0, 100, 200, 300]
        resend = box.sender(FIRST, box.new_epoch(), asyncio.Event(), answered_async())
        box.ack(300)  # replayed before the resend: must not cut it short
        assert box.resume_offset() == 0
        return audio_offsets([r async for r in resend][1:])

    assert asyncio.run(run()) == [0, 100, 200, 300, 400, 500]


def test_a_source_that_blocks_does_not_hold_up_acknowledgements() -> None:
    release = threading.Event()

    def live() -> Iterator[bytes]:
        yield b"\0" * ITEM
        release.wait(10)  # a microphone between chunks
        yield b"\1" * ITEM

    box = Outbox(live(), CONFIG, pace=None, max_unacked=1 << 20)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    take(sender, 2)
    reader = threading.Thread(target=lambda: take(sender, 1))
    reader.start()  # blocked in the source
    start = time.monotonic()
    box.ack(ITEM)
    assert time.monotonic() - start < 1 and box.resume_offset() == ITEM
    release.set()
    reader.join(5)


def test_a_sender_cancelled_inside_a_live_source_leaves_the_source_to_the_next_one() -> None:
    # grpc.aio cancels the task draining a dead connection's requests. If that lands while the
    # sender awaits the caller's async source, the source must not be ended by it: the next
    # connection's sender gets the item the read was waiting for, and the rest.
    async def run() -> list[int]:
        spoken = asyncio.Event()

        async def microphone() -> AsyncIterator[bytes]:
            yield bytes([0]) * ITEM
            await spoken.wait()
            for k in (1, 2):
                yield bytes([k]) * ITEM

        box = AsyncOutbox(microphone(), CONFIG, pace=None, max_unacked=1 << 20)
        first = box.sender(FIRST, box.new_epoch(), asyncio.Event(), answered_async())
        await anext(first)
        await anext(first)  # item 0
        pending = asyncio.ensure_future(anext(first))  # waits inside the microphone
        await asyncio.sleep(0.01)
        pending.cancel()  # the connection died
        await asyncio.gather(pending, return_exceptions=True)
        resend = box.sender(FIRST, box.new_epoch(), asyncio.Event(), answered_async())
        spoken.set()
        return audio_offsets([r async for r in resend][1:])

    assert asyncio.run(run()) == [0, 100, 200]


def test_no_audio_goes_out_before_the_server_answers_the_config() -> None:
    # A refusal (SESSION_ATTACHED, CAPACITY) must come back before any audio write: grpc.aio would
    # report a write that fails on a refused call as INTERNAL and hide the refusal.
    box = outbox(2)
    answer = threading.Event()
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answer)
    assert next(sender) == FIRST
    got: list[pb.StreamingRecognizeRequest] = []
    reader = threading.Thread(target=lambda: got.append(next(sender)))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive() and not got, "audio waited for the answer"
    answer.set()
    reader.join(5)
    assert audio_offsets(got) == [0]


def test_without_resume_nothing_is_kept_and_no_ack_is_waited_for() -> None:
    # max_unacked=None (no resume): the server sends no acks, so a bound on unacknowledged audio
    # would stall the stream; items are sent once and forgotten, and gRPC flow control paces them.
    box = Outbox(outbox_items(50), CONFIG, pace=None, max_unacked=None)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    assert audio_offsets(list(sender)[1:]) == [k * ITEM for k in range(50)]
    assert box.finished() and box.resume_offset() == 50 * ITEM

    async def run() -> list[int]:
        box = AsyncOutbox(outbox_items(50), CONFIG, pace=None, max_unacked=None)
        sender = box.sender(FIRST, box.new_epoch(), asyncio.Event(), answered_async())
        sent = audio_offsets([r async for r in sender][1:])
        assert box.finished()
        return sent

    assert asyncio.run(run()) == [k * ITEM for k in range(50)]


# A session lost with its server process (a crashed worker): the new session redoes the audio from the end of
# the last final result, so what was acknowledged after it is kept, apart from what a resume resends.


def test_acknowledged_audio_after_the_last_final_is_kept_for_a_redo_not_resent_on_a_resume() -> None:
    box = Outbox(outbox_items(6), CONFIG, pace=None, max_unacked=1 << 20)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    take(sender, 7)  # config and all six items
    box.finalized(150)  # a final result ends inside item 1
    box.ack(400)
    assert box.resume_offset() == 400  # a resume of the same session starts at the acknowledgement
    resend = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    assert audio_offsets(list(resend)[1:]) == [400, 500]
    # The session is gone: a new one starts at the final's end, the chunk across it cut there.
    assert box.restart_at(box.finalized_offset()) == 150
    redo = list(box.sender(FIRST, box.new_epoch(), threading.Event(), answered()))[1:]
    assert [len(r.audio) for r in redo] == [50, 100, 100, 100, 100]
    assert audio_offsets(redo[1:]) == [200, 300, 400, 500]


def test_a_final_releases_what_was_kept_for_a_redo() -> None:
    box = Outbox(outbox_items(4), CONFIG, pace=None, max_unacked=1 << 20)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    take(sender, 5)
    box.ack(400)
    box.finalized(300)
    assert box.restart_at(box.finalized_offset()) == 300  # only item 3 is left to redo
    assert audio_offsets(list(box.sender(FIRST, box.new_epoch(), threading.Event(), answered()))[1:]) == [300]


def test_what_is_kept_for_a_redo_is_bounded_by_max_unacked() -> None:
    box = Outbox(outbox_items(8), CONFIG, pace=None, max_unacked=3 * ITEM)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    for k in range(8):  # a monologue with no final: the acknowledgements keep the stream going
        take(sender, 2 if k == 0 else 1)
        box.ack((k + 1) * ITEM)
    assert list(sender) == [] and box.finished()
    # Only the newest three items are kept: the redo starts at the oldest audio still held.
    assert box.restart_at(box.finalized_offset()) == 500


def test_a_redo_starts_with_the_phrase_hints_in_force_where_it_starts() -> None:
    first, second = SetPhrases((Phrase("Ozempic"),)), SetPhrases((Phrase("Siobhan"),))
    items = [b"\1" * ITEM, first, b"\2" * ITEM, b"\3" * ITEM, second, b"\4" * ITEM]
    box = Outbox(iter(items), CONFIG, pace=None, max_unacked=1 << 20)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event(), answered())
    take(sender, 7)
    box.ack(400)
    assert box.phrases_before(100) is None, "the change at 100 may not have arrived: it is resent"
    box.finalized(250)  # the first change is behind the last final: only it is needed before there
    assert box.phrases_before(box.finalized_offset()) == first.phrases
    assert box.restart_at(250) == 250
    redo = list(box.sender(FIRST, box.new_epoch(), threading.Event(), answered()))[1:]
    assert [r.WhichOneof("request") for r in redo] == ["audio", "phrase_hints", "audio"], "the later one resent"
    assert box.phrases_before(400) == second.phrases
