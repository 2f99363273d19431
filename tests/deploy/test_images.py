"""The container images, built and run: deploy/docker/Dockerfile.service and Dockerfile.sidecar.

scripts/build_images.py builds them with buildah on a Debian base made locally (no engine, no registry),
cached under $VOXGATE_CACHE_DIR, else $XDG_CACHE_HOME/voxgate or ~/.cache/voxgate, in images/. On two cores:
cold (base and both images) about 2 min on an idle box, more on a busy one; after a change to the sources,
the two images again (about 1 min); unchanged, a hash of the sources. The tests themselves take ~20 s.
The containers run with `buildah run --isolation chroot`, which shares the host's network: a port bound
inside is reachable from the host.

The service image: `voxgate serve` as its ENTRYPOINT and ENV say (embedded engine, 0.0.0.0), the image's
own HEALTHCHECK command run inside it, a transcription by the Python client from the host, and SIGTERM to
the container's main process (what `docker stop` and Kubernetes send) draining a live session to exit 0.
The sidecar image is built on a stand-in for its vllm/vllm-openai base (deploy/README.md, "Images built in
CI"): its Python packages, user, directories and HEALTHCHECK are checked with the fake engine.

Needs root, mmdebstrap, podman and buildah (scripts/ci_toolchains.sh installs them); without them the tests
skip, which fails in CI (VOXGATE_FAIL_ON_SKIP=1).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ROOT,
    audio_requests,
    command_line,
    config_request,
    fixture_clips,
    paced,
    parent_pids,
    read_wav_pcm,
    word_error_rate,
)
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

BUILD = ROOT / "scripts" / "build_images.py"
BIN = Path(sys.executable).parent
MAX_WER = 0.25  # as tests/integration/test_sphinx_speech.py: streaming may lose a word
CLIPS = ("go_forward.wav", "flite_rms_turn_left.wav")
FINAL_LINE = re.compile(r"^\[\d+\.\d\ds → \d+\.\d\ds\] (.*)$")
CONTAINER_PREFIX = "voxgate-test-"  # then the pid of the test run and a number
# A cold build (base + both images) comes before the first test: 2.5 min on two cores, more on a busy box.
pytestmark = pytest.mark.timeout(1200)


@dataclass(frozen=True)
class Built:
    images: dict[str, str]
    buildah: tuple[str, ...]  # global flags: the build's own storage under the cache


@pytest.fixture(scope="module")
def built() -> Built:
    if sys.platform != "linux" or os.geteuid() != 0:
        pytest.skip("building images needs root on Linux (buildah chroot isolation, mmdebstrap)")
    proc = subprocess.run(
        [sys.executable, str(BUILD), "--json", "service", "sidecar"], capture_output=True, text=True, timeout=1100
    )
    if proc.returncode == 3:  # a tool is missing: the reason is on stderr
        pytest.skip(proc.stderr.strip())
    assert proc.returncode == 0, f"scripts/build_images.py failed:\n{proc.stderr[-6000:]}"
    report = json.loads(proc.stdout)
    print(f"images: {report['images']}, built now: {report['built']}, seconds: {report['seconds']}")
    built = Built(report["images"], tuple(report["buildah"]))
    remove_stale_containers(built)
    return built


def remove_stale_containers(built: Built) -> None:
    """Containers of earlier runs that were killed before removing theirs (each is a copy of its image)."""
    listed = subprocess.run(["buildah", *built.buildah, "containers", "--json"], capture_output=True, text=True)
    for box in (json.loads(listed.stdout or "null") or []) if listed.returncode == 0 else []:  # none: null
        match = re.fullmatch(rf"{CONTAINER_PREFIX}(\d+)-\d+", box["containername"])
        if match and not Path(f"/proc/{match.group(1)}").exists():
            subprocess.run(["buildah", *built.buildah, "rm", box["id"]], capture_output=True)


@dataclass(frozen=True)
class Container:
    """A buildah working container of one image; commands run in it with chroot isolation."""

    built: Built
    image: str
    name: str = field(default_factory=lambda: f"{CONTAINER_PREFIX}{os.getpid()}-{time.monotonic_ns()}")

    def buildah(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["buildah", *self.built.buildah, *args], capture_output=True, text=True, timeout=timeout)

    def config(self) -> dict[str, Any]:
        inspected = self.buildah("inspect", "--type", "image", self.image)
        assert inspected.returncode == 0, inspected.stderr
        return dict(json.loads(inspected.stdout)["Docker"]["config"])

    def run(
        self, *cmd: str, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return self.buildah("run", "--isolation", "chroot", *self._env(env), self.name, "--", *cmd, timeout=timeout)

    def start(self, *cmd: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """`cmd` in the background: its first stdout line is read by the caller, its stderr goes to `log`."""
        with log.open("w") as stderr:
            return subprocess.Popen(
                [
                    "buildah",
                    *self.built.buildah,
                    "run",
                    "--isolation",
                    "chroot",
                    *self._env(env),
                    self.name,
                    "--",
                    *cmd,
                ],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    @staticmethod
    def _env(env: dict[str, str] | None) -> list[str]:
        return [arg for key, value in (env or {}).items() for arg in ("--env", f"{key}={value}")]


@pytest.fixture
def container(built: Built) -> Iterator[Any]:
    made: list[Container] = []

    def make(name: str) -> Container:
        box = Container(built, built.images[name])
        created = box.buildah("from", "--pull-never", "--name", box.name, box.image)
        assert created.returncode == 0, created.stderr
        made.append(box)
        return box

    yield make
    for box in made:
        box.buildah("rm", box.name)


def argv0(pid: int) -> str:
    return (command_line(pid) or [""])[0]


def main_pid(runner: subprocess.Popen[str], timeout_s: float = 30) -> int:
    """The container's main process: the command buildah-chroot-exec started, below `buildah run`. It is what
    a SIGTERM goes to (`buildah run` itself answers a signal by killing it, as `docker stop` never does)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        parents = parent_pids()
        below = {runner.pid}
        for _ in range(4):  # buildah → buildah-chroot-runtime → buildah-chroot-exec → the command
            below |= {pid for pid, parent in parents.items() if parent in below}
        for pid in below:
            if argv0(parents.get(pid, 0)) == "buildah-chroot-exec":
                return pid
        time.sleep(0.1)
    raise AssertionError("no process under buildah-chroot-exec")


def listening_port(runner: subprocess.Popen[str], log: Path) -> int:
    assert runner.stdout is not None
    line = runner.stdout.readline()  # `voxgate serve` prints one line once it listens
    match = re.search(r"listening on \S+:(\d+)$", line.strip())
    if not match:
        runner.kill()
        runner.wait(30)
        raise AssertionError(f"voxgate serve did not start in the image: {line!r}\n{log.read_text()[-4000:]}")
    return int(match.group(1))


def transcribe(target: str, clip: str) -> str:
    """`voxgate transcribe` on the host: the Python client, as a user runs it."""
    proc = subprocess.run(
        [
            str(BIN / "voxgate"),
            "transcribe",
            "--no-pace",
            "--server",
            target,
            str(ROOT / "tests" / "fixtures" / "audio" / clip),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    texts = []
    for line in proc.stdout.splitlines():
        match = FINAL_LINE.match(line)
        assert match, f"not a final-result line: {line!r}"
        texts.append(match.group(1))
    return " ".join(texts)


def stream_until_drained(
    target: str, clip: str, got: list[pb.StreamingRecognizeResponse], first_result: threading.Event
) -> None:
    """One live session: `clip` over and over at real time, until the server ends it."""
    import grpc

    pcm, _ = read_wav_pcm(clip)
    requests = itertools.chain([config_request()], paced(audio_requests(pcm * 20, 3200), 0.1))
    with grpc.insecure_channel(target) as channel:
        for response in speech_pb2_grpc.SpeechStub(channel).StreamingRecognize(requests, timeout=120):
            got.append(response)
            if response.HasField("result"):
                first_result.set()


def test_the_service_image_serves_passes_its_health_check_and_drains(
    built: Built, container: Any, tmp_path: Path
) -> None:
    box = container("service")
    config = box.config()
    assert config["Entrypoint"] == ["voxgate", "serve"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["VOXGATE_HOST"] == "0.0.0.0" and config["User"] == "10001:10001"
    check = config["Healthcheck"]["Test"]
    image_target = f"127.0.0.1:{env['VOXGATE_PORT']}"
    assert check[0] == "CMD" and image_target in check, check

    # The image's entrypoint and environment; only the port is the host's choice (the network is shared).
    log = tmp_path / "serve.log"
    runner = box.start(*config["Entrypoint"], log=log, env={"VOXGATE_PORT": "0"})
    try:
        port = listening_port(runner, log)
        target = f"127.0.0.1:{port}"
        health = [target if arg == image_target else arg for arg in check[1:]]
        # Liveness ("") passes as soon as the port listens; readiness (the Speech service) only once the
        # embedded engine is up: each is polled, as an orchestrator's probes would.
        deadline = time.monotonic() + 60
        for probe_args in (health, [*health, "--service", "voxgate.v1.Speech"]):
            while (probe := box.run(*probe_args)).returncode != 0:
                assert time.monotonic() < deadline, f"{probe_args} never passed: {probe.stderr}"
                time.sleep(0.5)

        for clip in (c for c in fixture_clips() if c["file"] in CLIPS):
            text = transcribe(target, str(clip["file"]))
            assert word_error_rate(str(clip["text"]), text) <= MAX_WER, (clip["file"], text)

        got: list[pb.StreamingRecognizeResponse] = []
        first_result = threading.Event()
        live = threading.Thread(target=stream_until_drained, args=(target, CLIPS[0], got, first_result))
        live.start()
        assert first_result.wait(30), "the live session got no result"
        os.kill(main_pid(runner), signal.SIGTERM)
        live.join(60)
        assert not live.is_alive()
        assert runner.wait(60) == 0, log.read_text()[-4000:]
        assert got[-1].ended.reason == pb.SESSION_END_REASON_DRAINING
        assert any(r.HasField("result") and r.result.is_final for r in got)
        gone = box.run(*health)
        assert gone.returncode == 1 and "unhealthy" in gone.stderr, "the health check fails once it has stopped"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(30)


def test_the_sidecar_image_is_built_up_to_its_engine(built: Built, container: Any, tmp_path: Path) -> None:
    box = container("sidecar")
    config = box.config()
    entry = config["Entrypoint"]
    assert entry[:5] == ["python3", "-m", "engine_sidecar", "--engine", "voxtral"]
    socket = entry[entry.index("--socket") + 1]
    check = config["Healthcheck"]["Test"]
    assert check == ["CMD", "voxgate-healthcheck", "--socket", socket]
    assert config["User"] == "10001:10001"

    # What the image holds besides the engine: voxgate in the system Python beside vLLM, the socket
    # directory owned by the sidecar's user only, the cache directory its own.
    versions = box.run(
        "python3",
        "-c",
        "import vllm, engine_sidecar, importlib.metadata as m; "
        "print(vllm.__version__, m.version('voxgate'), m.version('voxgate-client'))",
    )
    assert versions.returncode == 0, versions.stderr
    assert versions.stdout.split() == ["0.32.0", "0.1.0", "0.1.0"]
    modes = box.run("stat", "-c", "%n %U %a", str(Path(socket).parent), "/cache")
    assert modes.stdout.splitlines() == [f"{Path(socket).parent} voxgate 700", "/cache voxgate 755"], modes

    # The entrypoint with the fake engine (the real one needs the real base): the image's health check
    # passes on its socket, and SIGTERM stops it cleanly.
    log = tmp_path / "sidecar.log"
    runner = box.start(*[("fake" if arg == "voxtral" else arg) for arg in entry], log=log)
    try:
        assert runner.stdout is not None
        line = runner.stdout.readline()
        assert line.startswith("READY"), f"the sidecar did not start: {line!r}\n{log.read_text()[-4000:]}"
        probe = box.run(*check[1:])
        assert probe.returncode == 0, probe.stderr
        os.kill(main_pid(runner), signal.SIGTERM)
        assert runner.wait(60) == 0, log.read_text()[-4000:]
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(30)
