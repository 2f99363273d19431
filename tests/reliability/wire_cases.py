"""The wire fuzz's cases (what one client does) and the rules every stream keeps; the driver and the
server-wide invariants are in test_wire_fuzz.py."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import cast

import grpc

from service.phrase_hints import (
    IGNORED_WARNING,
    REJECTED_WARNING,
)
from tests.helpers import error_reason, silence, voiced
from tests.relay import Relay
from tests.reliability.wire import (
    MALFORMED,
    MAX_STATUS_DETAILS,
    REASONS,
    Api,
    Outcome,
    RawStream,
    WireServer,
    held_open,
    invalid_utf8_config,
    paced,
)
from tests.reliability.wire_hints import (
    HINTS_AT,
    HINTS_REQUEST_MAX,
    Ack,
    applied,
    first_difference,
    hint_boost,
    hint_list,
    hint_support,
    hints_config,
    hints_proto,
    vendor_candidates,
    vendor_contexts,
    voxgate_candidates,
)
from voxgate_client.v1 import speech_pb2 as pb

MAX_SESSIONS = 4
RESUME_WINDOW_S = 1.0
FREEZE_S = 3.0
STREAM_DEADLINE_S = 12.0  # no case should take longer; a stream still open then is a hang
CHUNK = 3200  # 100 ms of 16 kHz LINEAR16
ALLOWED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.OUT_OF_RANGE,
}
REFUSALS = {"CAPACITY", "ENGINE_UNAVAILABLE", "DRAINING"}  # admission may refuse any case under load


@dataclass(frozen=True)
class Case:
    kind: str
    api: str
    server: str
    seed: int

    def __str__(self) -> str:
        return f"{self.kind}:{self.api}:{self.server}:{self.seed}"


@dataclass
class Expect:
    """What one stream may end with, beyond the rules every stream keeps."""

    cancel: bool = False  # we cancel it (or cut its connection): CANCELLED/UNAVAILABLE without reason is ours
    deadline: bool = False  # we gave it a short deadline
    error: tuple[grpc.StatusCode, str] | None = None  # exactly this (or an admission refusal)
    clean_end: bool = False  # OK and (voxgate.v1) SessionEnded{CLIENT_END} last
    no_reset: bool = False  # no ENGINE_RESET warning: nothing froze
    words: list[str] | None = None  # the transcript's words


@dataclass
class Report:
    violations: list[tuple[str, str, str]] = field(default_factory=list)  # (invariant, where, detail)
    tally: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, invariant: str, where: str, detail: str) -> None:
        with self.lock:
            self.violations.append((invariant, where, detail))

    def count(self, key: str) -> None:
        with self.lock:
            self.tally[key] = self.tally.get(key, 0) + 1


# -- per-stream rules ---------------------------------------------------------------------------


def check(case: Case, api: Api, out: Outcome, exp: Expect, report: Report, note: str = "") -> None:
    where = f"case {case} {note}".strip()
    code, reason = out.code, out.reason
    kinds: list[str] = []
    parsed: list[pb.StreamingRecognizeResponse] = []
    if api.has_session_events:
        parsed = out.parsed()
        kinds = [r.WhichOneof("response") or "" for r in parsed]
    got = f"-> {code.name} {reason} {out.details[:120]!r} after {out.took_s:.2f}s, {len(out.responses)} responses"
    end = pb.SessionEndReason.Name(parsed[-1].ended.reason) if kinds and kinds[-1] == "ended" else ""
    report.count(f"{case.kind}/{code.name}{'/' + (reason or end) if reason or end else ''}")
    refused = code == grpc.StatusCode.UNAVAILABLE and reason in REFUSALS
    # The client's own cancel can cross the server's answer: a refusal's trailers (CAPACITY) under a local CANCELLED.
    local = code == grpc.StatusCode.CANCELLED and out.details.startswith("Locally cancelled")
    ours = exp.cancel and (local or code in (grpc.StatusCode.CANCELLED, grpc.StatusCode.UNAVAILABLE) and not reason)
    if code in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL):
        report.add("never UNKNOWN/INTERNAL for client faults", where, got)
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED and not exp.deadline:
        report.add("stream ends within its deadline", where, got)
    elif code == grpc.StatusCode.CANCELLED and not ours:
        report.add("no cancel the client did not ask for", where, got)
    elif (
        code not in (grpc.StatusCode.OK, grpc.StatusCode.DEADLINE_EXCEEDED)
        and not ours
        and (code not in ALLOWED or reason not in REASONS)
    ):
        report.add("documented status with an ErrorInfo reason", where, got)
    if len(out.details) > MAX_STATUS_DETAILS or out.meta_bytes > MAX_STATUS_DETAILS:
        report.add(
            "client input echoed only bounded",
            where,
            f"details {len(out.details)} B, ErrorInfo metadata {out.meta_bytes} B",
        )
    if api.has_session_events:
        if code == grpc.StatusCode.OK and parsed and kinds[-1] != "ended":
            report.add("OK ends with SessionEnded", where, f"{got}: last {kinds[-1:]}")
        if (
            code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION)
            and parsed
            and not (kinds[-1] == "ended" and parsed[-1].ended.reason == pb.SESSION_END_REASON_ERROR)
        ):
            report.add("an error mid-session is preceded by SessionEnded{ERROR}", where, f"{got}: last {kinds[-1:]}")
        resets = [r.warning.code for r in parsed if r.HasField("warning") and r.warning.code == "ENGINE_RESET"]
        if exp.no_reset and resets:
            report.add("a pause is not a freeze (no ENGINE_RESET)", where, f"{got}: {len(resets)} ENGINE_RESET")
    if refused:
        return
    if exp.error is not None and (code, reason) != exp.error:
        report.add(f"expected {exp.error[0].name}/{exp.error[1]}", where, got)
    if exp.clean_end:
        ended = parsed[-1].ended.reason if kinds and kinds[-1] == "ended" else None
        if code != grpc.StatusCode.OK or (api.has_session_events and ended != pb.SESSION_END_REASON_CLIENT_END):
            report.add("a half-closed session ends OK with SessionEnded{CLIENT_END}", where, f"{got}, end {ended}")
    if exp.words is not None and code == grpc.StatusCode.OK:
        words = " ".join(r.result.text for r in parsed if r.HasField("result") and r.result.is_final).split()
        if words != exp.words:
            report.add("the transcript does not depend on pauses", where, f"{words} != {exp.words}")


# -- the cases ----------------------------------------------------------------------------------


@dataclass
class Ctx:
    case: Case
    rng: random.Random
    server: WireServer
    api: Api
    report: Report


def speech(rng: random.Random, lo: float, hi: float) -> bytes:
    return voiced(round(rng.uniform(lo, hi), 1))


def audio_items(api: Api, pcm: bytes, pace_s: float) -> list[bytes | float]:
    items: list[bytes | float] = []
    for i in range(0, len(pcm), CHUNK):
        items += [api.audio(pcm[i : i + CHUNK]), float(pace_s)] if pace_s else [api.audio(pcm[i : i + CHUNK])]
    return items


def garbage(rng: random.Random, api: Api, valid: bytes) -> bytes:
    """Bytes that do not decode as a request of `api`."""
    for _ in range(100):
        pick = rng.randrange(4)
        if pick == 0:
            data = rng.randbytes(rng.randint(1, 64))
        elif pick == 1:
            data = valid[: rng.randint(1, len(valid) - 1)]  # truncated
        elif pick == 2:
            flipped = bytearray(valid)
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            data = bytes(flipped)
        else:
            data = invalid_utf8_config(api)
        if not api.decodes(data):
            return data
    return b"\xff\xff\xff\xff"


def stream(
    ctx: Ctx,
    items: Callable[[threading.Event], Iterator[bytes]],
    timeout: float = STREAM_DEADLINE_S,
    target: str | None = None,
) -> RawStream:
    return RawStream(target or ctx.server.target, ctx.api, items, timeout)


def case_garbage_first(ctx: Ctx) -> None:
    """An undecodable (or barely decodable) first message, maybe followed by audio."""
    rng, api = ctx.rng, ctx.api
    first = garbage(rng, api, api.config("en-US")) if rng.random() < 0.85 else rng.choice([b"", rng.randbytes(3)])
    tail = audio_items(api, voiced(0.3), 0.0) if rng.random() < 0.5 else []
    s = stream(ctx, lambda done: paced([first, *tail], done))
    exp = Expect(error=None if api.decodes(first) else (grpc.StatusCode.INVALID_ARGUMENT, MALFORMED))
    check(ctx.case, api, s.finish(), exp, ctx.report, f"first={first[:24]!r}")


def case_garbage_after_config(ctx: Ctx) -> None:
    """Config, some audio, one undecodable message; then more audio and half-close, or the client just waits."""
    rng, api = ctx.rng, ctx.api
    items = [api.config("en-US"), *audio_items(api, speech(rng, 0, 1.5), rng.choice([0.0, 0.05]))]
    bad = garbage(rng, api, api.audio(voiced(0.1)) if rng.random() < 0.6 else api.config("en-US"))
    items.append(bad)
    wait = rng.random() < 0.5
    if not wait:
        items += audio_items(api, voiced(0.3), 0.0)
    s = stream(ctx, lambda done: held_open(paced(items, done), done, STREAM_DEADLINE_S if wait else 0))
    exp = Expect(error=(grpc.StatusCode.INVALID_ARGUMENT, MALFORMED))
    check(ctx.case, api, s.finish(), exp, ctx.report, f"bad={bad[:24]!r} client_waits={wait}")


def case_cancel(ctx: Ctx) -> None:
    """Cancel at a random moment: at once, between config and SessionStarted, or mid-speech."""
    rng, api = ctx.rng, ctx.api
    at = rng.choice([0.0, rng.uniform(0, 0.05), rng.uniform(0, 0.3), rng.uniform(0, 2.5)])
    _cancel_at(ctx, [api.config("en-US"), *audio_items(api, speech(rng, 0.5, 3), rng.choice([0.0, 0.05, 0.1]))], at)


def case_cancel_burst(ctx: Ctx) -> None:
    """Many callers who hang up within 300 ms of their config, all at once (issue 17, item 1)."""
    n = ctx.rng.randint(MAX_SESSIONS + 2, 3 * MAX_SESSIONS)
    moments = [ctx.rng.uniform(0, 0.3) for _ in range(n)]
    threads = [threading.Thread(target=_cancel_one, args=(ctx, at), daemon=True) for at in moments]
    for t in threads:
        t.start()
    for t in threads:
        t.join(STREAM_DEADLINE_S + 5)


def _cancel_one(ctx: Ctx, at: float) -> None:
    _cancel_at(ctx, [ctx.api.config("en-US"), *audio_items(ctx.api, voiced(1.0), 0.1)], at)


def _cancel_at(ctx: Ctx, items: list[bytes | float], at: float) -> None:
    """Send `items` paced and cancel the call `at` seconds in: the stream must end CANCELLED, nothing leaks."""
    api = ctx.api
    s = stream(ctx, lambda done: held_open(paced(items, done), done, STREAM_DEADLINE_S))
    timer = threading.Timer(at, s.cancel)
    timer.start()
    out = s.finish()
    timer.cancel()
    check(ctx.case, api, out, Expect(cancel=True), ctx.report, f"cancel_at={at:.3f}s")


def case_deadline(ctx: Ctx) -> None:
    """The client's own deadline expires at a random point of a live session."""
    rng, api = ctx.rng, ctx.api
    timeout = rng.choice([rng.uniform(0.01, 0.2), rng.uniform(0.2, 3)])
    items = [api.config("en-US"), *audio_items(api, speech(rng, 1, 4), 0.1)]
    s = stream(ctx, lambda done: held_open(paced(items, done), done, STREAM_DEADLINE_S), timeout=timeout)
    check(ctx.case, api, s.finish(), Expect(deadline=True), ctx.report, f"timeout={timeout:.3f}s")


def case_pause(ctx: Ctx) -> None:
    """Speech, keep-alives for longer than the freeze timeout, speech, half-close: not a freeze, same words."""
    rng, api = ctx.rng, ctx.api
    before, after = speech(rng, 0.8, 2), speech(rng, 0.4, 1)
    pause = rng.uniform(FREEZE_S + 0.5, FREEZE_S + 2.5)
    tail = silence(0.5)
    items = [api.config("en-US"), *audio_items(api, before, 0.05)]
    items += [x for _ in range(int(pause / 0.5)) for x in (0.5, api.keep_alive())]
    items += audio_items(api, after + tail, 0.05)
    s = stream(ctx, lambda done: paced(items, done))
    out = s.finish()
    words = None
    if ctx.case.server == "fake":  # deterministic: the same audio without the pause is the reference
        ref = stream(
            ctx, lambda done: paced([api.config("en-US"), *audio_items(api, before + after + tail, 0)], done)
        ).finish()
        if ref.code == grpc.StatusCode.OK:
            words = " ".join(r.result.text for r in ref.parsed() if r.HasField("result") and r.result.is_final).split()
    check(
        ctx.case,
        api,
        out,
        Expect(clean_end=True, no_reset=True, words=words),
        ctx.report,
        f"speech {len(before) / 32000:.1f}s, pause {pause:.1f}s, speech {len(after) / 32000:.1f}s",
    )


def case_half_close(ctx: Ctx) -> None:
    """Half-close at a random point: right after the config, mid-utterance, after keep-alives or a finalize."""
    rng, api = ctx.rng, ctx.api
    items: list[bytes | float] = [api.config("en-US")]
    for _ in range(rng.randint(0, 12)):
        pick = rng.random()
        if pick < 0.6:
            items.append(api.audio(voiced(0.1) if rng.random() < 0.7 else silence(0.1)))
        elif pick < 0.8:
            items.append(api.keep_alive())
        elif api.has_session_events:
            items.append(pb.StreamingRecognizeRequest(finalize=pb.Finalize()).SerializeToString())
        items.append(rng.choice([0.0, 0.0, 0.02, 0.1]))
    s = stream(ctx, lambda done: paced(items, done))
    check(ctx.case, api, s.finish(), Expect(clean_end=True), ctx.report, f"{len(items)} items")


def case_slow_reader(ctx: Ctx) -> None:
    """A client that sends in real time but reads nothing for a while, then everything."""
    rng, api = ctx.rng, ctx.api
    items = [api.config("en-US"), *audio_items(api, speech(rng, 1, 3) + silence(0.5), 0.1)]
    s = stream(ctx, lambda done: paced(items, done))
    quiet = rng.uniform(0.5, 4)
    time.sleep(quiet)
    check(ctx.case, api, s.finish(), Expect(clean_end=True), ctx.report, f"reads after {quiet:.1f}s")


def case_vanish(ctx: Ctx) -> None:
    """The client disappears mid-stream: connection cut both ways, cut on its side only (the server hears
    nothing until its keepalive), or it stops reading and then closes its channel."""
    rng, api = ctx.rng, ctx.api
    how = rng.choice(["cut", "abandon", "stop_reading"])
    at = rng.uniform(0, 2)
    items = [api.config("en-US"), *audio_items(api, speech(rng, 1, 4), 0.1)]
    proxy = Relay(ctx.server.target)
    try:
        s = stream(ctx, lambda done: held_open(paced(items, done), done, STREAM_DEADLINE_S), target=proxy.target)
        if how == "stop_reading":
            s.read(limit=1)
        time.sleep(at)
        s.outcome.cancelled_by_us = True
        if how == "cut":
            proxy.cut()
        elif how == "abandon":
            proxy.abandon()
        else:
            s.channel.close()
        out = s.finish()
    finally:
        proxy.close()
    check(ctx.case, api, out, Expect(cancel=True), ctx.report, f"{how} at {at:.2f}s")


def case_long_string(ctx: Ctx) -> None:
    """A language_code far too long: INVALID_CONFIG, echoed bounded (not a metadata overflow, not a huge log)."""
    rng, api = ctx.rng, ctx.api
    size = rng.choice([300, 8 << 10, 64 << 10, 64 << 10, 1 << 20])
    lang = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz-", k=size))
    s = stream(ctx, lambda done: paced([api.config(lang), *audio_items(api, voiced(0.2), 0)], done))
    check(
        ctx.case,
        api,
        s.finish(),
        Expect(error=(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG")),
        ctx.report,
        f"language_code of {size} chars",
    )


def case_flood(ctx: Ctx) -> None:
    """Twice the capacity in short, valid sessions at once: some refused with CAPACITY, the rest clean."""
    api = ctx.api
    items = [api.config("en-US"), *audio_items(api, voiced(0.6) + silence(0.3), 0.02)]

    def one() -> None:
        check(ctx.case, api, stream(ctx, lambda done: paced(items, done)).finish(), Expect(clean_end=True), ctx.report)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(2 * MAX_SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(STREAM_DEADLINE_S + 5)


def case_worker_loss(ctx: Ctx) -> None:
    """A worker of `--workers 2` is lost under live calls of voxgate's own client (resume on): SIGKILL (a crash)
    or SIGTERM (a rolling restart; the supervisor starts it again). Every call goes on and every spoken
    segment gets exactly one final: none lost, none repeated (finals in order, none overlapping). Runs alone on
    its server (the loss would break the other cases' streams there)."""
    import os
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from service.bench.driver import OWN_CONNECTION
    from tests.reliability.streams import speech_pattern, uncovered
    from voxgate_client import SpeechClient, StreamConfig

    rng, server = ctx.rng, ctx.server
    how = rng.choice(["SIGKILL", "SIGTERM"])
    at = rng.uniform(0.3, 3.0)
    audio, spans = speech_pattern(rng.randint(3, 5), voiced_s=round(rng.uniform(0.6, 1.2), 1), silence_s=1.0)
    config = StreamConfig(encoding="linear16", sample_rate_hz=16000, endpointing_silence_ms=500)
    chunks = [audio[i : i + CHUNK] for i in range(0, len(audio), CHUNK)]

    def call() -> list[pb.StreamingRecognizeResponse]:
        with SpeechClient(server.target, channel_options=OWN_CONNECTION) as client:
            return list(client.stream(config, chunks, pace=1.0, timeout=STREAM_DEADLINE_S * 3, resume=True))

    with ThreadPoolExecutor(2) as pool:
        calls = [pool.submit(call) for _ in range(2)]
        time.sleep(at)
        victim = rng.choice(server.service_workers)
        os.kill(victim.pid, signal.SIGKILL if how == "SIGKILL" else signal.SIGTERM)
        where = f"case {ctx.case} {how} of worker {victim.index} at {at:.2f}s"
        for n, done in enumerate(calls):
            try:
                responses = done.result(timeout=STREAM_DEADLINE_S * 3 + 10)
            except Exception as exc:
                ctx.report.add("a lost worker costs voxgate's own client nothing", f"{where}, call {n}", repr(exc))
                continue
            ctx.report.count(f"worker_loss/{how}/ok")
            finals = [r.result for r in responses if r.HasField("result") and r.result.is_final]
            spans_of = [(f.start_offset.ToMilliseconds(), f.end_offset.ToMilliseconds()) for f in finals]
            if lost := uncovered(spans, finals):
                ctx.report.add("every final exactly once", f"{where}, call {n}", f"no final for {lost}: {spans_of}")
            if any(b[0] < a[1] for a, b in zip(spans_of, spans_of[1:], strict=False)):
                ctx.report.add("every final exactly once", f"{where}, call {n}", f"finals overlap: {spans_of}")
    if (problem := server.accept_worker_restart(victim.pid)) is not None:
        ctx.report.add("a lost worker is replaced", where, problem)


# -- phrase hints (wire_hints.py makes them and their expectations) ---------------------------


def case_hints(ctx: Ctx) -> None:
    """Phrase hints of every size and shape in the config (voxgate.v1's, or Riva's or Google's speech_contexts),
    then speech with phrase_hints replacements between its chunks (voxgate.v1), maybe a finalize, then a half-close
    or a cancel. A config past a limit is INVALID_CONFIG naming the field, and nothing else; else SessionStarted
    lists the hints as applied, and each replacement gets, in order, a PhraseHintsUpdated listing them as applied
    at the audio before it, or a warning PHRASE_HINTS_REJECTED naming the field; the call goes on either way."""
    rng, api = ctx.rng, ctx.api
    phrases, list_boost = hint_list(rng), hint_boost(rng, rng.random() >= 0.1)
    contexts = [] if api.has_session_events else vendor_contexts(rng, phrases)
    if api.has_session_events:
        candidates = voxgate_candidates(phrases, list_boost, "config.phrase_hints")
        start, bad = applied(candidates, "config.phrase_hints.phrases")
    else:
        start, bad = applied(vendor_candidates(contexts), HINTS_AT)
    items: list[bytes | float] = [hints_config(api, phrases, list_boost, contexts)]
    pcm = speech(rng, 0.5, 2.5) + (silence(0.5) if rng.random() < 0.5 else b"")
    chunks = [pcm[i : i + CHUNK] for i in range(0, len(pcm), CHUNK)]
    pace = rng.choice([0.0, 0.02, 0.05])
    replacements = rng.choice([0, 1, 1, 2, 3, 5, 8]) if api.has_session_events else 0
    at_chunk = sorted(rng.randint(0, len(chunks)) for _ in range(replacements))
    finalize_at = rng.randint(0, len(chunks)) if api.has_session_events and rng.random() < 0.4 else -1
    expected: list[Ack] = []
    sent = 0
    for i in range(len(chunks) + 1):
        if i == finalize_at:
            items.append(pb.StreamingRecognizeRequest(finalize=pb.Finalize()).SerializeToString())
        while at_chunk and at_chunk[0] == i:
            at_chunk.pop(0)
            new, new_boost = hint_list(rng), hint_boost(rng, rng.random() >= 0.1)
            items.append(pb.StreamingRecognizeRequest(phrase_hints=hints_proto(new, new_boost)).SerializeToString())
            now, field = applied(voxgate_candidates(new, new_boost, "phrase_hints"), "phrase_hints.phrases")
            expected.append(("rejected", field, 0) if field else ("updated", now, sent // 2 * 1000 // 16000))
        if i < len(chunks):
            items += [api.audio(chunks[i]), pace] if pace else [api.audio(chunks[i])]
            sent += len(chunks[i])
    if (largest := max(len(x) for x in items if isinstance(x, bytes))) > HINTS_REQUEST_MAX:
        raise AssertionError(f"a request of {largest} bytes: more than HINTS_REQUEST_MAX")
    cancel = not bad and rng.random() < 0.15
    at = rng.uniform(0, len(chunks) * pace + 0.5)
    s = stream(ctx, lambda done: held_open(paced(items, done), done, STREAM_DEADLINE_S if cancel else 0))
    timer = threading.Timer(at, s.cancel) if cancel else None
    if timer is not None:
        timer.start()
    out = s.finish()
    if timer is not None:
        timer.cancel()
    valid = sum(1 for e in expected if e[0] == "updated")
    note = (
        f"{len(phrases)} phrases ({bad or 'valid'}), {len(expected)} replacements ({valid} valid), "
        f"finalize={finalize_at >= 0}, {f'cancel at {at:.2f}s' if cancel else 'half-close'}"
    )
    if bad:
        exp = Expect(error=(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG"))
    else:
        exp = Expect(cancel=cancel, clean_end=not cancel)
    check(ctx.case, api, out, exp, ctx.report, note)
    where = f"case {ctx.case} {note}"
    if bad:
        if (out.code, out.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_CONFIG"):
            named = error_reason(s.call)[2].get("field")
            if named != bad or out.responses:
                ctx.report.add(
                    "phrase hints past a limit in the config: INVALID_CONFIG naming the field, nothing else",
                    where,
                    f"field {named!r}, expected {bad!r}; {len(out.responses)} responses",
                )
        return
    complete = out.code == grpc.StatusCode.OK
    if not api.has_session_events or not (complete or cancel):
        return
    parsed = out.parsed()
    if parsed and parsed[0].HasField("started"):
        listed = [(p.value, p.boost) for p in parsed[0].started.effective_config.phrase_hints.phrases]
        if listed != start:
            ctx.report.add(
                "SessionStarted lists the config's phrase hints as applied", where, first_difference(listed, start)
            )
    elif complete:
        ctx.report.add("SessionStarted lists the config's phrase hints as applied", where, "no SessionStarted first")
    acks: list[Ack] = []
    for r in parsed:
        if r.HasField("phrase_hints_updated"):
            u = r.phrase_hints_updated
            acks.append(
                ("updated", [(p.value, p.boost) for p in u.phrase_hints.phrases], u.audio_offset.ToMilliseconds())
            )
        elif r.HasField("warning") and r.warning.code == REJECTED_WARNING:
            acks.append(("rejected", r.warning.message, 0))
    one_each = "one PhraseHintsUpdated or PHRASE_HINTS_REJECTED per phrase_hints request, in order"
    if len(acks) > len(expected) or (complete and len(acks) != len(expected)):
        ctx.report.add(one_each, where, f"{[a[0] for a in acks]} for {[e[0] for e in expected]}")
    for n, (got, want) in enumerate(zip(acks, expected, strict=False)):
        ctx.report.count(f"hints/replacement {want[0]}")
        if got[0] != want[0]:
            ctx.report.add(one_each, where, f"[{n}] {got[0]} for {want[0]} {str(want[1])[:120]}: {str(got[1])[:200]}")
            break
        if got[0] == "rejected" and f"{want[1]}: " not in str(got[1]):
            ctx.report.add("PHRASE_HINTS_REJECTED names the field", where, f"[{n}] {want[1]}: {str(got[1])[:200]!r}")
        if got[0] == "updated" and got[1] != want[1]:
            listed, applied_now = cast(list[tuple[str, float]], got[1]), cast(list[tuple[str, float]], want[1])
            ctx.report.add(
                "PhraseHintsUpdated lists the phrase hints as applied",
                where,
                f"[{n}] {first_difference(listed, applied_now)}",
            )
        if got[0] == "updated" and got[2] != want[2]:
            ctx.report.add(
                "PhraseHintsUpdated.audio_offset is the audio before it", where, f"[{n}] {got[2]} ms for {want[2]} ms"
            )
    offsets = [a[2] for a in acks if a[0] == "updated"]
    if any(b < a for a, b in zip(offsets, offsets[1:], strict=False)):
        ctx.report.add("PhraseHintsUpdated.audio_offset never decreases", where, f"{offsets}")
    ignored = sum(1 for r in parsed if r.HasField("warning") and r.warning.code == IGNORED_WARNING)
    support = hint_support(ctx.server)
    if support == pb.PHRASE_HINT_SUPPORT_NONE:
        want_ignored = bool(start) + sum(1 for e in expected if e[0] == "updated" and e[1])
    else:
        want_ignored = 0
    if support != pb.PHRASE_HINT_SUPPORT_UNSPECIFIED and (
        ignored > want_ignored or complete and ignored != want_ignored
    ):
        ctx.report.add(
            "PHRASE_HINTS_IGNORED for each non-empty list an engine without hints gets, and only then",
            where,
            f"{ignored} for {want_ignored} ({pb.PhraseHintSupport.Name(support)})",
        )


CASES: dict[str, tuple[Callable[[Ctx], None], tuple[str, ...], int]] = {  # kind -> (run, apis, weight)
    "garbage_first": (case_garbage_first, ("voxgate", "riva", "google"), 3),
    "garbage_after_config": (case_garbage_after_config, ("voxgate", "riva", "google"), 3),
    "cancel": (case_cancel, ("voxgate", "voxgate", "riva", "google"), 4),
    "cancel_burst": (case_cancel_burst, ("voxgate", "voxgate", "riva", "google"), 1),
    "deadline": (case_deadline, ("voxgate", "riva", "google"), 2),
    "pause": (case_pause, ("voxgate",), 2),
    "half_close": (case_half_close, ("voxgate", "voxgate", "riva", "google"), 3),
    "slow_reader": (case_slow_reader, ("voxgate",), 1),
    "vanish": (case_vanish, ("voxgate", "voxgate", "riva", "google"), 2),
    "long_string": (case_long_string, ("voxgate", "riva", "google"), 1),
    "flood": (case_flood, ("voxgate",), 1),
    "worker_loss": (case_worker_loss, ("voxgate",), 1),  # the `workers` server only, alone in its batch
    "hints": (case_hints, ("voxgate", "voxgate", "riva", "google"), 3),
}
ONLY_ON = {"worker_loss": "workers"}
