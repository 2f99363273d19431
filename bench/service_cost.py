#!/usr/bin/env python3
"""The service process's own CPU per audio message and per stream, on the fake engine (issue 15).

Starts `voxgate serve --engine fake` from a source tree (`--tree`, run with PYTHONPATH and cwd set to it, so
one venv serves an old and a new tree alike), opens N sessions that each send LINEAR16 16 kHz mono in real
time, and reads the service's and the sidecar's utime+stime from /proc over a steady window (sessions all
started, none ending). Reports per tree and mode:

  us/msg   service CPU µs per audio message received in the window
  mc/stream service millicores per stream (CPU s / window s / N x 1000); the sidecar's the same way

Modes: `20` (20 ms frames, interim results off: the audio path alone) and `80i` (80 ms frames, interim
results on: a word every 400 ms comes back as an interim and a final).

The load generator is this process: pre-serialized requests written as bytes on a bare grpc.aio stream
(no protobuf per message on this side), responses read as bytes and dropped: as cheap as a grpc.aio client
gets, yet about what the service spends per message (reported as `bench`; the cores are shared).

    .venv/bin/python bench/service_cost.py                            # this tree, both modes
    .venv/bin/python bench/service_cost.py --trees /tmp/old,.         # side by side: A B B A per mode

Writes bench/results/service-cost-<stamp>.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import grpc.aio

SELF = Path(__file__).resolve()
ROOT = SELF.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "clients" / "python"))

from service.bench.audio import SAMPLE_RATE, frames, load_loop  # noqa: E402
from service.bench.machine import describe  # noqa: E402
from service.bench.procstats import is_sidecar, processes, read_proc  # noqa: E402
from service.bench.server import ServerProc, write_fake_script  # noqa: E402
from voxgate_client.v1 import speech_pb2 as pb  # noqa: E402

METHOD = "/voxgate.v1.Speech/StreamingRecognize"
FLOORS = {"grpc-floor": "aio", "grpc-sync-floor": "sync"}  # --trees names: gRPC reading the same requests, nothing else
MODES = {"20": (20, False), "80i": (80, True)}  # mode -> (frame ms, interim results)


@dataclass(frozen=True)
class Run:
    tree: str
    mode: str
    sessions: int
    window_s: float
    messages: int  # audio messages sent in the window
    responses: int  # responses received over the whole run
    service_cpu_s: float
    sidecar_cpu_s: float
    bench_cpu_s: float  # this process (the load generator: a grpc.aio client writing the same messages)
    slip_max_ms: float
    errors: int

    def _per_msg_us(self, cpu_s: float) -> float:
        return cpu_s / max(self.messages, 1) * 1e6

    def _per_stream_mc(self, cpu_s: float) -> float:
        return cpu_s / self.window_s / self.sessions * 1000

    @property
    def us_per_msg(self) -> float:
        return self._per_msg_us(self.service_cpu_s)

    @property
    def mc_per_stream(self) -> float:
        return self._per_stream_mc(self.service_cpu_s)

    @property
    def bench_us_per_msg(self) -> float:
        return self._per_msg_us(self.bench_cpu_s)

    @property
    def sidecar_mc_per_stream(self) -> float:
        return self._per_stream_mc(self.sidecar_cpu_s)


def _cpu(server_pid: int) -> tuple[float, float, float]:
    """(service, sidecar, bench) CPU seconds so far: the server process alone; its sidecar child alone; this
    process."""
    server, bench = read_proc(server_pid), read_proc(os.getpid())
    side = sum(s.cpu_s for s in processes().values() if s.ppid == server_pid and is_sidecar(s.cmdline))
    return (server.cpu_s if server else 0.0), side, (bench.cpu_s if bench else 0.0)


class Load:
    """N paced sessions; counts audio messages sent and the worst send slip."""

    def __init__(self, n: int, frame_ms: int, interim: bool, duration_s: float) -> None:
        self.n, self.frame_ms, self.duration_s = n, frame_ms, duration_s
        loop = load_loop()
        self.config = pb.StreamingRecognizeRequest(
            config=pb.StreamingConfig(
                encoding=pb.AUDIO_ENCODING_LINEAR16,
                sample_rate_hz=SAMPLE_RATE,
                audio_channel_count=1,
                language_code="en-US",
                interim_results=interim,
            )
        ).SerializeToString()
        self.audio = [
            [
                pb.StreamingRecognizeRequest(audio=f).SerializeToString()
                for f in frames(loop, i * 7919, duration_s, frame_ms)
            ]
            for i in range(n)
        ]
        self.sent = 0
        self.responses = 0
        self.errors = 0
        self.slip_max = 0.0

    async def _session(self, channel: grpc.aio.Channel, i: int, t0: float) -> None:
        call = channel.stream_stream(METHOD)()  # no (de)serializers: bytes as they are
        period = self.frame_ms / 1000

        async def read() -> None:
            while await call.read() is not grpc.aio.EOF:
                self.responses += 1

        reader = asyncio.create_task(read())
        try:
            await call.write(self.config)
            for k, msg in enumerate(self.audio[i]):
                due = t0 + k * period
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(wait)
                self.slip_max = max(self.slip_max, time.monotonic() - due)
                await call.write(msg)
                self.sent += 1
            await call.done_writing()
            await reader
        except grpc.aio.AioRpcError:
            self.errors += 1
            reader.cancel()

    async def run(self, target: str, server_pid: int, warm_s: float) -> tuple[float, int, float, float, float]:
        """Runs the load; returns (window s, messages in it, service, sidecar and bench CPU s)."""
        async with grpc.aio.insecure_channel(target) as channel:
            t0 = time.monotonic() + 0.2
            spread = self.frame_ms / 1000  # starts at different phases within one frame
            tasks = [asyncio.create_task(self._session(channel, i, t0 + spread * i / self.n)) for i in range(self.n)]
            await asyncio.sleep(t0 + warm_s - time.monotonic())
            w0, m0, (s0, c0, b0) = time.monotonic(), self.sent, _cpu(server_pid)
            await asyncio.sleep(self.duration_s - warm_s - 1.0)  # stop before the sessions end
            w1, m1, (s1, c1, b1) = time.monotonic(), self.sent, _cpu(server_pid)
            await asyncio.gather(*tasks)
        return w1 - w0, m1 - m0, s1 - s0, c1 - c0, b1 - b0


def floor_server(flavour: str) -> None:
    """gRPC's own floor: a bare server whose StreamingRecognize reads every request (undecoded) and answers
    nothing; readiness as `voxgate serve` has it, so ServerProc can start it. `aio` is grpc.aio (what the
    service runs on); `sync` is grpc's thread-per-call server, to show the floor is not asyncio's."""
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    handlers = {"aio": _aio_reader, "sync": _sync_reader}
    generic = grpc.method_handlers_generic_handler(
        "voxgate.v1.Speech", {"StreamingRecognize": grpc.stream_unary_rpc_method_handler(handlers[flavour])}
    )
    if flavour == "sync":
        from concurrent.futures import ThreadPoolExecutor

        server = grpc.server(ThreadPoolExecutor(max_workers=256))  # a thread per call: N sessions at once
        server.add_generic_rpc_handlers([generic])
        checker = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        checker.set("voxgate.v1.Speech", health_pb2.HealthCheckResponse.SERVING)
        print(f"listening on 127.0.0.1:{port}", flush=True)
        server.wait_for_termination()
        return

    async def serve() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers([generic])
        checker = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        await checker.set("voxgate.v1.Speech", health_pb2.HealthCheckResponse.SERVING)
        print(f"listening on 127.0.0.1:{port}", flush=True)
        await server.wait_for_termination()

    asyncio.run(serve())


async def _aio_reader(requests: object, context: grpc.aio.ServicerContext) -> bytes:
    async for _ in requests:  # type: ignore[attr-defined]
        pass
    return b""


def _sync_reader(requests: object, context: grpc.ServicerContext) -> bytes:
    for _ in requests:  # type: ignore[attr-defined]
        pass
    return b""


async def one_run(tree: Path, mode: str, n: int, duration_s: float, warm_s: float, tmp: Path) -> Run:
    frame_ms, interim = MODES[mode]
    script = write_fake_script(tmp / "fake-script.json", duration_s + 5)
    log = tmp / f"serve-{tree.name}-{mode}.log"
    cmd = [
        "env",
        "-C",
        str(tree),
        f"PYTHONPATH={tree}:{tree / 'clients' / 'python'}",
        sys.executable,
        "-m",
        "service",
        "serve",
        "--port",
        "0",
        "--engine",
        "fake",
        "--model",
        str(script),
        "--max-sessions",
        str(n + 8),
        "--idle-timeout-s",
        "120",
    ]  # env -C: `-m service` imports from cwd
    if tree.name in FLOORS:
        cmd = [sys.executable, str(SELF), "--serve-floor", FLOORS[tree.name]]
    server = ServerProc(cmd=cmd, log_path=log)
    await server.start(120)
    assert server.pid is not None
    try:
        load = Load(n, frame_ms, interim, duration_s)
        window, msgs, svc, side, bench = await load.run(server.target, server.pid, warm_s)
    finally:
        await server.stop()
    return Run(
        str(tree),
        mode,
        n,
        round(window, 3),
        msgs,
        load.responses,
        round(svc, 3),
        round(side, 3),
        round(bench, 3),
        round(load.slip_max * 1000, 1),
        load.errors,
    )


def _line(r: Run) -> str:
    return (
        f"{r.tree:<24} {r.mode:>4} N={r.sessions:<3} {r.us_per_msg:7.1f} us/msg  {r.mc_per_stream:6.2f} "
        f"mc/stream  sidecar {r.sidecar_mc_per_stream:5.2f} mc/stream  bench {r.bench_us_per_msg:5.1f} us/msg  "
        f"msgs {r.messages}  responses "
        f"{r.responses}  slip max {r.slip_max_ms:.0f} ms  errors {r.errors}"
    )


async def main(args: argparse.Namespace, trees: list[Path]) -> dict[str, object]:
    order = trees if len(trees) != 2 else [trees[0], trees[1], trees[1], trees[0]]  # A B B A
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="voxgate-svc-cost-") as tmp:
        for mode in args.modes.split(","):
            for tree in order:
                r = await one_run(tree, mode, args.sessions, args.duration, args.warm, Path(tmp))
                runs.append(r)
                print(_line(r), file=sys.stderr, flush=True)
    summary = []
    for mode in args.modes.split(","):
        for tree in trees:
            rs = [r for r in runs if r.mode == mode and r.tree == str(tree)]
            summary.append(
                {
                    "tree": str(tree),
                    "mode": mode,
                    "us_per_msg": round(statistics.mean(r.us_per_msg for r in rs), 1),
                    "mc_per_stream": round(statistics.mean(r.mc_per_stream for r in rs), 2),
                    "sidecar_mc_per_stream": round(statistics.mean(r.sidecar_mc_per_stream for r in rs), 2),
                    "runs": len(rs),
                }
            )
    return {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        "machine": describe(),
        "sessions": args.sessions,
        "duration_s": args.duration,
        "warm_s": args.warm,
        "summary": summary,
        "runs": [
            asdict(r)
            | {
                "us_per_msg": round(r.us_per_msg, 1),
                "mc_per_stream": round(r.mc_per_stream, 2),
                "sidecar_mc_per_stream": round(r.sidecar_mc_per_stream, 2),
                "bench_us_per_msg": round(r.bench_us_per_msg, 1),
            }
            for r in runs
        ],
    }


# Where the service's main thread goes, from `py-spy record -f raw`: the first rule whose frame is anywhere on a
# sample's stack takes it. Samples parked in the selector (py-spy counts many as busy) and other threads (gRPC's
# poller, the child watcher) are left out.
SPLIT = (
    ("sidecar writes: grpc.aio client write (EngineLink.send_*)", "EngineLink.write"),
    ("sidecar reads: grpc.aio read, output_from_proto (EngineLink._read)", "EngineLink._read"),
    ("responses: StreamingRecognize (log → proto → grpc.aio write)", "SpeechServicer.StreamingRecognize"),
    ("intake: AudioIntake.push (pipeline, VAD)", "AudioIntake.push"),
    ("client reads: grpc.aio request iterator (_inputs, client_input)", "_inputs (service/api.py"),
    ("inbound reader (Inbound._read, _forward)", "Inbound."),
    ("engine chain (writer/receiver bookkeeping, results)", "EngineChain."),
)


def split(profile: Path) -> str:
    counts: dict[str, int] = {}
    busy = parked = 0
    for line in profile.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack.startswith("_run_module_as_main"):
            continue
        if "EpollSelector.select" in stack.split(";")[-1]:
            parked += int(n)
            continue
        busy += int(n)
        name = next((b for b, frame in SPLIT if frame in stack), "event loop, grpc.aio callbacks (Cython), other")
        counts[name] = counts.get(name, 0) + int(n)
    rows = [f"| {k} | {v * 100 / max(busy, 1):.0f} % |" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])]
    return "\n".join(
        [
            f"main thread: {busy} busy samples ({parked} in the selector left out)",
            "| where | share |",
            "|---|---|",
            *rows,
        ]
    )


def table(report: dict[str, object]) -> str:
    rows = report["summary"]
    assert isinstance(rows, list)
    out = [
        "| tree | mode | service µs / message | service mc / stream | sidecar mc / stream | runs |",
        "|---|---|---|---|---|---|",
    ]
    out += [
        f"| {r['tree']} | {r['mode']} | {r['us_per_msg']} | {r['mc_per_stream']} | "
        f"{r['sidecar_mc_per_stream']} | {r['runs']} |"
        for r in rows
    ]
    return "\n".join(out)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", default=str(ROOT), help="source tree to serve from (default: this repository)")
    p.add_argument(
        "--trees",
        default="",
        help=f"two trees, comma-separated: runs A B B A per mode (more: each "
        f"once); {' or '.join(map(repr, FLOORS))} as a tree: a bare grpc.aio or sync gRPC server that "
        f"only reads the requests",
    )
    p.add_argument("--modes", default="20,80i", help="20 (20 ms frames), 80i (80 ms frames, interim results)")
    p.add_argument("-n", "--sessions", type=int, default=20)
    p.add_argument("--duration", type=float, default=15.0, help="seconds of audio per session")
    p.add_argument("--warm", type=float, default=3.0, help="seconds before the measurement window opens")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--serve-floor", choices=sorted(set(FLOORS.values())), help=argparse.SUPPRESS)
    p.add_argument(
        "--split",
        type=Path,
        default=None,
        metavar="PROFILE",
        help="print where the service's main thread went in a `py-spy record -f raw` profile; no run",
    )
    a = p.parse_args()
    if a.split:
        print(split(a.split))
        sys.exit(0)
    if a.serve_floor:
        floor_server(a.serve_floor)
        sys.exit(0)
    names = a.trees.split(",") if a.trees else [a.tree]
    report = asyncio.run(main(a, [Path(t) if t in FLOORS else Path(t).resolve() for t in names]))
    out = a.out or ROOT / "bench" / "results" / f"service-cost-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(table(report))
    print(f"wrote {out}", file=sys.stderr)
