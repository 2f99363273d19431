"""Fixtures for the security tests: a test PKI, token files, and streams held open."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from service.security import hash_token
from tests.helpers import config_request
from tests.security.pki import Authority, Issued
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc


@dataclass(frozen=True)
class Pki:
    ca: Authority
    server: Issued
    client: Issued
    rogue_ca: Authority  # an unrelated CA: its certificates must be refused
    rogue_client: Issued


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca, rogue = Authority(d, "ca"), Authority(d, "rogue-ca")
    return Pki(ca, ca.issue("server", server=True), ca.issue("client", server=False), rogue,
               rogue.issue("rogue-client", server=False))


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def write_lines_token_file(path: Path, tenants: dict[str, tuple[str, str]]) -> Path:
    """tenant → (token, options): the lines format."""
    path.write_text("# test token file\n" + "".join(
        f"{hash_token(token)} {name} {options}\n" for name, (token, options) in tenants.items()))
    return path


@dataclass
class HeldStream:
    """A StreamingRecognize call that has started its session and stays open until release()."""

    call: grpc.Future
    started: pb.StreamingRecognizeResponse
    _release: threading.Event

    def release(self) -> list[pb.StreamingRecognizeResponse]:
        """Half-close; the rest of the responses, to the end of the session."""
        self._release.set()
        return list(self.call)

    def stop_sending(self) -> None:
        self._release.set()


def hold_stream(channel: grpc.Channel, metadata: Sequence[tuple[str, str]] = (), audio: bytes = b"") -> HeldStream:
    """`audio`: sent after the config, and held until the server acknowledged it (such a session is
    resumable; one without audio ends as soon as its client vanishes)."""
    release = threading.Event()

    def requests() -> Iterator[pb.StreamingRecognizeRequest]:
        yield config_request(flow_status=pb.FlowStatusConfig(enabled=True, interval_ms=100)) if audio \
            else config_request()
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
    if audio:
        for response in call:
            if response.HasField("flow_status") and response.flow_status.acked_audio_bytes >= len(audio):
                break
    return HeldStream(call, first, release)
