"""Shared test helpers: a real `voxgate serve` process on port 0, and request builders."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import grpc
import numpy as np
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.bench.wer import word_error_rate  # noqa: F401  (re-exported for the tests)
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SPEECH_SERVICE = "voxgate.v1.Speech"


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    target: str
    log_path: Path
    credentials: grpc.ChannelCredentials | None = None  # a TLS server: what its clients connect with

    def channel(self) -> grpc.Channel:
        if self.credentials is not None:
            return grpc.secure_channel(self.target, self.credentials)
        return grpc.insecure_channel(self.target)

    def stub(self) -> speech_pb2_grpc.SpeechStub:
        return speech_pb2_grpc.SpeechStub(self.channel())

    def health(self, service: str = SPEECH_SERVICE) -> int:
        stub = health_pb2_grpc.HealthStub(self.channel())
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status

    def wait_health(self, serving: bool, timeout_s: float = 60.0, service: str = SPEECH_SERVICE) -> float:
        want = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if self.health(service) == want:
                    return time.monotonic()
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"health of {service!r} never became {'SERVING' if serving else 'NOT_SERVING'}")

    def sidecar_pid(self) -> int:
        """The (first) engine sidecar: the child naming engine_sidecar, else the only child (--workers adds more)."""
        children = sidecar_children(self.proc.pid) or child_pids(self.proc.pid)
        assert children, "no sidecar child process"
        return children[0]

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (a generator's or checker's functions, called in process)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_check(name: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`python scripts/<name>.py --check`, as a contributor runs it."""
    script = ROOT / "scripts" / f"{name}.py"
    return subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=timeout_s)


def parent_pids() -> dict[int, int]:
    """Every process's parent, from /proc (processes that vanish meanwhile are left out)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return parents


def child_pids(pid: int) -> list[int]:
    return sorted(child for child, parent in parent_pids().items() if parent == pid)


def sidecar_children(pid: int) -> list[int]:
    """The engine sidecars among a process's children."""
    return [child for child in child_pids(pid) if any("engine_sidecar" in arg for arg in command_line(child))]


@dataclass(frozen=True)
class ServiceWorker:
    """One worker process of `voxgate serve --workers N`, with the private Unix socket that reaches it alone."""

    index: int
    pid: int
    socket: str
    peer_dir: str  # the supervisor's private directory: the workers' sockets and the sidecar's engine.sock

    def stub(self) -> speech_pb2_grpc.SpeechStub:
        return speech_pb2_grpc.SpeechStub(grpc.insecure_channel(f"unix:{self.socket}"))

    def serving(self) -> bool:
        """The worker's own readiness (each worker answers health about itself); False if it does not answer."""
        with grpc.insecure_channel(f"unix:{self.socket}") as channel:
            try:
                return (
                    health_pb2_grpc.HealthStub(channel)
                    .Check(health_pb2.HealthCheckRequest(service=SPEECH_SERVICE), timeout=5, wait_for_ready=True)
                    .status
                    == health_pb2.HealthCheckResponse.SERVING
                )
            except grpc.RpcError:
                return False

    def wait_serving(self, serving: bool = True, timeout_s: float = 30) -> float:
        """Until its readiness is `serving`; when that was first seen."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.serving() == serving:
                return time.monotonic()
            time.sleep(0.02)
        raise AssertionError(f"worker {self.index} never became {'ready' if serving else 'not ready'}")


def service_workers(pid: int) -> list[ServiceWorker]:
    """A supervisor's worker processes, by index (their command lines name index and socket directory)."""
    found = []
    for child in child_pids(pid):
        args = command_line(child)
        if "service.worker_main" in args:
            index, peer_dir = int(args[args.index("--index") + 1]), args[args.index("--peer-dir") + 1]
            found.append(ServiceWorker(index, child, f"{peer_dir}/worker-{index}.sock", peer_dir))
    return sorted(found, key=lambda w: w.index)


def command_line(pid: int) -> list[str]:
    """A process's arguments; [] once it has exited (a child listed a moment ago may be gone by now, e.g. the
    worker a test just killed)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def imported_modules(path: Path) -> set[str]:
    """The absolute modules a Python file imports (relative imports are the package's own business)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


# A Voxtral server on the tiny checkpoint at the re-anchoring tests' geometry (a re-anchor every ~20 s of audio), with
# a freeze watchdog that a busy 2-core box does not trip: the voxtral chaos test and the wire fuzz.
TINY_VOXTRAL_SERVE_ARGS = (
    "--max-model-len",
    "320",
    "--block-size",
    "32",
    "--dtype",
    "float32",
    "--reanchor-margin-tokens",
    "32",
    "--max-num-seqs",
    "4",
    "--freeze-timeout-s",
    "60",
)


def start_server(
    tmp: Path,
    *args: str,
    engine: str = "sphinx",
    model: str = "",
    python: str = sys.executable,
    ready_timeout_s: float | None = 60.0,
    credentials: grpc.ChannelCredentials | None = None,
) -> ServerProcess:
    """A `voxgate serve` once it listens and (unless ready_timeout_s is None) serves."""
    log_path = tmp / f"server-{engine}-{time.monotonic_ns()}.log"
    cmd = [python, "-m", "service", "serve", "--port", "0", "--engine", engine, "--model", model, *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=log_path.open("w"), text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (\S+)", line)
    if not match:
        proc.kill()
        raise AssertionError(f"server did not start: {line!r}\n{log_path.read_text()}")
    server = ServerProcess(proc, match.group(1), log_path, credentials)
    if ready_timeout_s is not None:
        try:
            server.wait_health(serving=True, timeout_s=ready_timeout_s)
        except BaseException:  # no test holds it yet to stop it: it would outlive the test, engine and all
            server.stop()
            raise
    return server


def voiced(seconds: float, rate: int = 16000) -> bytes:
    """A buzzy, amplitude-modulated harmonic signal that webrtcvad takes for speech (a pure tone it does not)."""
    t = np.arange(int(seconds * rate)) / rate
    partials = sum(np.sin(2 * np.pi * f * t) / (k + 1) for k, f in enumerate((150, 300, 450, 600, 750, 900, 1200)))
    return (partials * 4000 * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype("<i2").tobytes()


def silence(seconds: float, rate: int = 16000) -> bytes:
    return b"\0\0" * int(seconds * rate)


def config_request(**kwargs: object) -> pb.StreamingRecognizeRequest:
    defaults: dict[str, object] = {
        "encoding": pb.AUDIO_ENCODING_LINEAR16,
        "sample_rate_hz": 16000,
        "interim_results": True,
        "enable_word_time_offsets": True,
    }
    defaults.update(kwargs)
    return pb.StreamingRecognizeRequest(config=pb.StreamingConfig(**defaults))  # type: ignore[arg-type]


def audio_requests(data: bytes, chunk_bytes: int = 3200) -> Iterator[pb.StreamingRecognizeRequest]:
    for i in range(0, len(data), chunk_bytes):
        yield pb.StreamingRecognizeRequest(audio=data[i : i + chunk_bytes])


def requests_until(
    stop: threading.Event, first: pb.StreamingRecognizeRequest, audio: bytes, chunk_bytes: int, pace_s: float = 0.02
) -> Iterator[pb.StreamingRecognizeRequest]:
    """A client that vanishes: `first`, then the audio paced, until `stop` is set; then the stream stays open
    (not half-closed) until the caller drops the call."""
    yield first
    for i in range(0, len(audio), chunk_bytes):
        if stop.is_set():
            break
        time.sleep(pace_s)
        yield pb.StreamingRecognizeRequest(audio=audio[i : i + chunk_bytes])
    stop.wait(30)


def recognize(
    stub: speech_pb2_grpc.SpeechStub,
    requests: Iterable[pb.StreamingRecognizeRequest],
    timeout: float = 120,
    metadata: Sequence[tuple[str, str]] = (),
) -> list[pb.StreamingRecognizeResponse]:
    return list(stub.StreamingRecognize(iter(requests), timeout=timeout, metadata=metadata))


def resume_stream(
    stub: speech_pb2_grpc.SpeechStub,
    requests: Iterable[pb.StreamingRecognizeRequest],
    metadata: tuple[tuple[str, str], ...] = (),
    wait_s: float = 10,
) -> list[pb.StreamingRecognizeResponse]:
    """Run a resuming stream to its end. The server may not have seen the old stream go yet (a cancel
    reaches it a moment later): SESSION_ATTACHED is retried, as the Python client does, until wait_s."""
    requests = list(requests)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return list(stub.StreamingRecognize(iter(requests), metadata=metadata, timeout=120))
        except grpc.RpcError as exc:
            if error_reason(exc)[1] != "SESSION_ATTACHED" or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def error_reason(err: grpc.RpcError) -> tuple[grpc.StatusCode, str, dict[str, str]]:
    """Status code, ErrorInfo.reason and metadata from a failed call's rich status."""
    reason, meta = "", {}
    for key, value in err.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    reason, meta = info.reason, dict(info.metadata)
    return err.code(), reason, meta  # type: ignore[attr-defined]


def finals(responses: list[pb.StreamingRecognizeResponse]) -> list[pb.RecognitionResult]:
    return [r.result for r in responses if r.WhichOneof("response") == "result" and r.result.is_final]


def final_text(responses: list[pb.StreamingRecognizeResponse]) -> str:
    return " ".join(r.text for r in finals(responses)).strip()


def seconds(d: object) -> float:
    return d.seconds + d.nanos / 1e9  # type: ignore[attr-defined]


def fixture_clips() -> list[dict[str, object]]:
    import json

    return json.loads((FIXTURES / "audio" / "manifest.json").read_text())


def read_wav_pcm(name: str) -> tuple[bytes, int]:
    import wave

    with wave.open(str(FIXTURES / "audio" / name)) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2
        return w.readframes(w.getnframes()), w.getframerate()


def live(
    config: pb.StreamingRecognizeRequest, requests: Iterable[pb.StreamingRecognizeRequest], seconds_per_request: float
) -> Iterator[pb.StreamingRecognizeRequest]:
    """The config at once, then the requests paced as a live source sends them. (`[config, *paced(...)]`
    would do the waiting while the list is built, before anything is sent.)"""
    yield config
    yield from paced(requests, seconds_per_request)


def paced(
    requests: Iterable[pb.StreamingRecognizeRequest], seconds_per_request: float
) -> Iterator[pb.StreamingRecognizeRequest]:
    """Send like a live source: one request per `seconds_per_request` after the config."""
    start = time.monotonic()
    for i, req in enumerate(requests):
        delay = start + i * seconds_per_request - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield req


@dataclass
class BackgroundStream:
    """A paced session streaming in a thread; `in_session` is set once it has a result."""

    thread: threading.Thread
    got: list[pb.StreamingRecognizeResponse]
    in_session: threading.Event


def stream_in_background(
    server: ServerProcess, seconds: float, seconds_per_request: float, timeout: float = 60
) -> BackgroundStream:
    got: list[pb.StreamingRecognizeResponse] = []
    in_session = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request()
        yield from paced(audio_requests(voiced(seconds), 3200), seconds_per_request)

    def run() -> None:
        for r in server.stub().StreamingRecognize(requests(), timeout=timeout):
            got.append(r)
            if r.HasField("result"):
                in_session.set()

    thread = threading.Thread(target=run)
    thread.start()
    return BackgroundStream(thread, got, in_session)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def fake_script(tmp: Path, **script: object) -> str:
    import json

    path = tmp / f"script-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(script))
    return str(path)


@dataclass
class HeldStream:
    """A StreamingRecognize call that has started its session and stays open until release()."""

    call: grpc.Future
    started: pb.StreamingRecognizeResponse
    _release: threading.Event
    acked: pb.StreamingRecognizeResponse | None = None  # with audio: the FlowStatus that acknowledged all of it

    def release(self) -> list[pb.StreamingRecognizeResponse]:
        """Half-close; the rest of the responses, to the end of the session."""
        self._release.set()
        return list(self.call)

    def stop_sending(self) -> None:
        self._release.set()


def hold_stream(channel: grpc.Channel, metadata: Sequence[tuple[str, str]] = (), audio: bytes = b"") -> HeldStream:
    """A session started and held open. `audio`: sent after the config, and held until the server acknowledged
    it (such a session is resumable; one without audio ends as soon as its client vanishes)."""
    release = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield (
            config_request(flow_status=pb.FlowStatusConfig(enabled=True, interval_ms=100))
            if audio
            else config_request()
        )
        if audio:
            yield pb.StreamingRecognizeRequest(audio=audio)
        release.wait(60)

    call = speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(requests(), metadata=metadata, timeout=60)
    try:
        first = next(call)
    except BaseException:
        release.set()
        raise
    assert first.WhichOneof("response") == "started", first
    acked = None
    if audio:
        for response in call:
            if response.HasField("flow_status") and response.flow_status.acked_audio_bytes >= len(audio):
                acked = response
                break
    return HeldStream(call, first, release, acked)


def write_hold_and_keys_wav(path: Path) -> Path:
    """A mono 16 kHz WAV of a call's non-speech: a sentence, 6 s of hold music (from 3 s), keys 5, 1 and #
    (at 10.5 s), then the sentence again. What every client prints with --non-speech."""
    import wave

    from bench.nonspeech_audio import at_level, dtmf_tone, synthesize, to_pcm16

    voice = np.frombuffer(read_wav_pcm("go_forward.wav")[0], dtype="<i2") / 32768
    audio = np.zeros(16000 * 15)
    audio[8000 : 8000 + len(voice)] = voice
    audio[16000 * 3 : 16000 * 9] = synthesize("arpeggio", 6.0, seed=35, dbfs=-20)
    for k, key in enumerate("51#"):
        at = 16000 * 21 // 2 + 3200 * k
        audio[at : at + 1600] = at_level(dtmf_tone(key, 0.1), -20)
    audio[16000 * 12 : 16000 * 12 + len(voice)] = voice
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(to_pcm16(audio))
    return path


NON_SPEECH_LINE = re.compile(r"^(\[ch\d+\] )?\[\d+\.\d\ds\] \((music started|music ended|DTMF .)\)$")


def non_speech_lines(stdout: str) -> list[str]:
    """The lines a client prints for music and DTMF (--non-speech)."""
    return [line for line in stdout.splitlines() if NON_SPEECH_LINE.match(line)]
