"""The server under test: one `voxgate serve` this bench starts (port 0), or an address given."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
FAKE_WORD_MS = 300  # the fake engine's word duration: a result ends this long after the audio that made it
FAKE_WORD_EVERY_MS = 400  # bench script: one word per 400 ms (a multiple of the 80 ms engine chunk)


def write_fake_script(path: Path, duration_s: float) -> Path:
    """A fake-engine script answering at once: a word every 400 ms of audio, whatever the audio."""
    words = [[f"w{i}", i * FAKE_WORD_EVERY_MS] for i in range(1, int(duration_s * 1000) // FAKE_WORD_EVERY_MS + 2)]
    path.write_text(json.dumps({"words": words, "delay_ms": 0}))
    return path


@dataclass
class ServerProc:
    cmd: list[str]
    log_path: Path
    proc: subprocess.Popen[str] | None = None
    target: str = ""
    ready_s: float = 0.0  # launch -> SERVING
    launched_at: float = 0.0

    @classmethod
    def for_engine(cls, engine: str, model: str, max_sessions: int, log_path: Path, extra: list[str]) -> ServerProc:
        cmd = [
            sys.executable,
            "-m",
            "service",
            "serve",
            "--port",
            "0",
            "--engine",
            engine,
            "--max-sessions",
            str(max_sessions),
            "--idle-timeout-s",
            "120",
            *extra,
        ]
        if model:
            cmd += ["--model", model]
        return cls(cmd=cmd, log_path=log_path)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def launch(self) -> subprocess.Popen[str]:
        self.launched_at = time.monotonic()
        with self.log_path.open("w") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
        return self.proc

    async def start(self, timeout_s: float = 300.0) -> None:
        self.launch()
        await self.wait_ready(timeout_s)

    async def wait_ready(self, timeout_s: float = 300.0) -> None:
        """After `launch`: its address from its first line, then until it is SERVING."""
        t0 = time.monotonic()
        assert self.proc is not None and self.proc.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.proc.stdout.readline), timeout_s)
        if not (m := re.search(r"listening on (\S+)", line)):
            raise RuntimeError(f"voxgate serve did not start: {line!r}; see {self.log_path}")
        self.target = m.group(1)
        await wait_serving(self.target, timeout_s - (time.monotonic() - t0), self.proc)
        self.ready_s = round(time.monotonic() - self.launched_at, 2)

    async def stop(self) -> None:
        await terminate(self.proc)


async def terminate(proc: subprocess.Popen[Any] | None, grace_s: float = 30.0) -> None:
    """SIGTERM, up to `grace_s` to exit, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(proc.wait, grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        await asyncio.to_thread(proc.wait)


async def wait_serving(target: str, timeout_s: float, proc: subprocess.Popen[str] | None = None) -> None:
    """Until readiness (`voxgate.v1.Speech`) is SERVING."""
    deadline = time.monotonic() + timeout_s
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"voxgate serve exited {proc.returncode}")
            try:
                reply = await health.Check(health_pb2.HealthCheckRequest(service="voxgate.v1.Speech"), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.3)
    raise RuntimeError(f"{target} not SERVING after {timeout_s:.0f} s")
