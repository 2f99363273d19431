"""The resuming client's outbox: what a reconnect resends, and what an acknowledgement releases."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from voxgate_client import FINALIZE, StreamConfig
from voxgate_client._proto import speech_pb2 as pb
from voxgate_client.outbox import Outbox

CONFIG = StreamConfig(encoding="linear16", sample_rate_hz=16000)
FIRST = pb.StreamingRecognizeRequest(config=pb.StreamingConfig())
ITEM = 100  # bytes per audio item


def outbox(items: int) -> Outbox:
    return Outbox((bytes([k]) * ITEM for k in range(items)), CONFIG, pace=None, max_unacked=1 << 20)


def take(sender: Iterator[pb.StreamingRecognizeRequest], n: int) -> list[pb.StreamingRecognizeRequest]:
    return [next(sender) for _ in range(n)]


def audio_offsets(requests: list[pb.StreamingRecognizeRequest]) -> list[int]:
    return [r.audio[0] * ITEM for r in requests if r.WhichOneof("request") == "audio"]


def test_a_resend_starts_at_the_resume_offset_and_stays_contiguous_whatever_acks_arrive() -> None:
    box = outbox(6)
    first = box.sender(FIRST, box.new_epoch(), threading.Event())
    assert audio_offsets(take(first, 5)[1:]) == [0, 100, 200, 300]  # sent; the connection then dies unacked

    resend = box.sender(FIRST, box.new_epoch(), threading.Event())
    assert box.resume_offset() == 0
    # The resumed stream first replays what the server logged before the drop: acks up to 300. The
    # server skips 300 resent bytes by count, so all of them must still be sent, from offset 0.
    box.ack(300)
    assert box.resume_offset() == 0
    assert audio_offsets(list(resend)[1:]) == [0, 100, 200, 300, 400, 500]


def test_an_ack_releases_what_this_connection_sent() -> None:
    box = outbox(4)
    sender = box.sender(FIRST, box.new_epoch(), threading.Event())
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
    sender = box.sender(FIRST, box.new_epoch(), threading.Event())
    take(sender, 4)
    box.ack(100)
    assert box.resume_offset() == 100  # the finalize at 100 may not have arrived: resent
    box.ack(200)
    assert box.resume_offset() == 200
