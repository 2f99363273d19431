"""Bearer tokens → tenants: UNAUTHENTICATED, PERMISSION_DENIED, per-tenant session quotas, tenant in the logs."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import riva.client
from google.cloud import speech
from google.cloud.speech_v1.services.speech.transports import SpeechGrpcTransport
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from service.security import hash_token
from service.security.auth import API_OF_SERVICE, OPEN_SERVICES
from tests.helpers import (
    ROOT,
    ServerProcess,
    audio_requests,
    config_request,
    error_reason,
    fake_script,
    recognize,
    resume_stream,
    silence,
    start_server,
    voiced,
)
from tests.security.conftest import bearer, hold_stream
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

ACME, GLOBEX, VOXONLY = "acme-token-1", "globex-token-1", "voxonly-token-1"
SIDECAR_EVENTS = {"session_opened", "session_closed"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("tokens")
    tokens = tmp / "tokens.json"
    tokens.write_text(
        json.dumps(
            {
                "tenants": {
                    "acme": {"tokens": [hash_token(ACME)], "max_sessions": 1},
                    "globex": {"tokens": [hash_token(GLOBEX)]},
                    "voxonly": {"tokens": [hash_token(VOXONLY)], "apis": ["voxgate"]},
                }
            }
        )
    )
    script = fake_script(tmp, words=[["hello", 300], ["world", 700]])
    srv = start_server(
        tmp, "--auth-tokens-file", str(tokens), "--tenant-max-sessions", "3", engine="fake", model=script
    )
    yield srv
    srv.stop()


def speech_requests() -> list[pb.StreamingRecognizeRequest]:
    return [config_request(), *audio_requests(voiced(1.0) + silence(1.0))]


def test_missing_token_is_unauthenticated(server: ServerProcess) -> None:
    with pytest.raises(grpc.RpcError) as err:
        recognize(server.stub(), speech_requests())
    code, reason, _ = error_reason(err.value)
    assert (code, reason) == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_MISSING")
    with pytest.raises(grpc.RpcError) as err:
        server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), timeout=10)
    assert error_reason(err.value)[:2] == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_MISSING")


@pytest.mark.parametrize(
    "metadata",
    [bearer("not-a-token"), bearer(ACME + "x"), (("authorization", f"Basic {ACME}"),), (("authorization", ACME),)],
)
def test_wrong_token_is_unauthenticated(server: ServerProcess, metadata: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(grpc.RpcError) as err:
        list(server.stub().StreamingRecognize(iter(speech_requests()), metadata=metadata, timeout=30))
    code, reason, _ = error_reason(err.value)
    assert code == grpc.StatusCode.UNAUTHENTICATED and reason in ("TOKEN_INVALID", "TOKEN_MISSING")


def test_valid_token_session_works_and_every_session_log_line_names_the_tenant(server: ServerProcess) -> None:
    responses = list(server.stub().StreamingRecognize(iter(speech_requests()), metadata=bearer(GLOBEX), timeout=30))
    assert responses[0].WhichOneof("response") == "started"
    assert responses[-1].WhichOneof("response") == "ended"
    assert "hello world" in " ".join(r.result.text for r in responses if r.result.is_final)
    session_id = responses[0].started.session_id
    lines = [json.loads(line) for line in server.log().splitlines() if session_id in line]
    assert any(line["event"] == "session_started" for line in lines)
    # The engine sidecar (another process, which knows no tenants) logs its own open/close by session id.
    service_lines = [line for line in lines if line["event"] not in SIDECAR_EVENTS]
    assert len(service_lines) >= 4 and all(line.get("tenant") == "globex" for line in service_lines), lines
    # Capabilities too; health and reflection stay open (load balancers probe them without credentials).
    caps = server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), metadata=bearer(GLOBEX), timeout=10)
    assert caps.engine.name == "fake"


def test_health_and_reflection_need_no_token(server: ServerProcess) -> None:
    health = health_pb2_grpc.HealthStub(server.channel())
    assert (
        health.Check(health_pb2.HealthCheckRequest(service="voxgate.v1.Speech"), timeout=5).status
        == health_pb2.HealthCheckResponse.SERVING
    )
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(server.channel())
    replies = list(
        stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
    )
    names = {s.name for s in replies[0].list_services_response.service}
    assert set(API_OF_SERVICE) <= names  # every served API is one the auth layer knows
    assert names - set(API_OF_SERVICE) <= OPEN_SERVICES  # and the rest are the open ones


def test_session_quota_per_tenant(server: ServerProcess) -> None:
    channel = server.channel()
    held = hold_stream(channel, bearer(ACME))  # acme may hold 1 session
    try:
        with pytest.raises(grpc.RpcError) as err:
            list(server.stub().StreamingRecognize(iter(speech_requests()), metadata=bearer(ACME), timeout=30))
        code, reason, meta = error_reason(err.value)
        assert (code, reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "SESSION_QUOTA")
        assert meta == {"tenant": "acme", "limit": "1"}
        status = next(
            status_pb2.Status.FromString(v) for k, v in err.value.trailing_metadata() if k == "grpc-status-details-bin"
        )
        quota = error_details_pb2.QuotaFailure()
        assert any(d.Unpack(quota) for d in status.details)
        assert quota.violations[0].subject == "tenant:acme"
        # Other tenants are unaffected, up to their own (default) quota of 3.
        others = [hold_stream(channel, bearer(GLOBEX)) for _ in range(3)]
        with pytest.raises(grpc.RpcError) as err:
            hold_stream(channel, bearer(GLOBEX))
        assert error_reason(err.value)[:3] == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "SESSION_QUOTA",
            {"tenant": "globex", "limit": "3"},
        )
        for other in others:
            assert other.release()[-1].WhichOneof("response") == "ended"
    finally:
        ended = held.release()
    assert ended[-1].WhichOneof("response") == "ended"
    hold_stream(channel, bearer(ACME)).release()  # the quota is free again once the session ended


def test_compat_endpoints_require_the_token_too(server: ServerProcess) -> None:
    audio = voiced(1.0) + silence(1.0)
    config = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM,
            sample_rate_hertz=16000,
            language_code="en-US",
            audio_channel_count=1,
        ),
        interim_results=False,
    )

    def riva_text(metadata: list[list[str]] | None) -> str:
        asr = riva.client.ASRService(riva.client.Auth(uri=server.target, metadata_args=metadata))
        chunks = [audio[i : i + 3200] for i in range(0, len(audio), 3200)]
        responses = asr.streaming_response_generator(audio_chunks=chunks, streaming_config=config)
        return " ".join(r.alternatives[0].transcript for resp in responses for r in resp.results if r.is_final)

    with pytest.raises(grpc.RpcError) as err:
        riva_text(None)
    assert error_reason(err.value)[:2] == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_MISSING")
    assert "hello world" in riva_text([["authorization", f"Bearer {GLOBEX}"]])
    with pytest.raises(grpc.RpcError) as err:  # a tenant allowed only the voxgate API
        riva_text([["authorization", f"Bearer {VOXONLY}"]])
    code, reason, meta = error_reason(err.value)
    assert (code, reason, meta) == (grpc.StatusCode.PERMISSION_DENIED, "API_NOT_ALLOWED", {"api": "riva"})

    google = speech.SpeechClient(transport=SpeechGrpcTransport(channel=grpc.insecure_channel(server.target)))
    gconfig = speech.RecognitionConfig(
        encoding=speech.RecognitionConfig.AudioEncoding.LINEAR16, sample_rate_hertz=16000, language_code="en-US"
    )
    with pytest.raises(Exception) as gerr:  # google-api-core wraps the RpcError
        google.recognize(config=gconfig, audio=speech.RecognitionAudio(content=audio), retry=None, timeout=30)
    assert "TOKEN_MISSING" in str(gerr.value) or "Unauthenticated" in type(gerr.value).__name__
    reply = google.recognize(
        config=gconfig,
        audio=speech.RecognitionAudio(content=audio),
        retry=None,
        timeout=30,
        metadata=[("x-goog-api-key", GLOBEX)],
    )  # what Google clients send for an API key
    assert "hello world" in " ".join(r.alternatives[0].transcript for r in reply.results)
    # The voxgate API itself stays open to that tenant.
    caps = server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), metadata=bearer(VOXONLY), timeout=10)
    assert caps.engine.name == "fake"


def test_token_cli_hashes_and_makes_tokens(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "service", "token", "hash", ACME], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == hash_token(ACME)
    piped = subprocess.run(
        [sys.executable, "-m", "service", "token", "hash"],
        cwd=ROOT,
        input=ACME + "\n",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert piped == out
    token, line = subprocess.run(
        [sys.executable, "-m", "service", "token", "new", "acme"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert line == f"{hash_token(token)} acme" and len(token) > 40
    from service.security.tokens import TokenBook

    (tmp_path / "t").write_text(line + "\n")
    tenant = TokenBook.load(tmp_path / "t").lookup(token)
    assert tenant is not None and tenant.name == "acme"


def test_unauthenticated_rpcs_are_rejected_before_any_session(server: ServerProcess) -> None:
    caps = server.stub().GetCapabilities(pb.GetCapabilitiesRequest(), metadata=bearer(GLOBEX), timeout=10)
    before = caps.active_sessions
    stub = speech_pb2_grpc.SpeechStub(server.channel())
    for _ in range(5):
        with pytest.raises(grpc.RpcError):
            list(stub.StreamingRecognize(iter([config_request()]), timeout=10))
    assert (
        stub.GetCapabilities(pb.GetCapabilitiesRequest(), metadata=bearer(GLOBEX), timeout=10).active_sessions == before
    )
    assert '"auth_rejected"' in server.log()


def test_a_session_resumes_only_for_its_own_tenant(server: ServerProcess) -> None:
    held = hold_stream(server.channel(), bearer(GLOBEX), audio=b"\0\0" * 3200)
    resume_token = held.started.started.resume_token
    held.call.cancel()  # the client vanishes: the session (it has audio) waits for a resume
    held.stop_sending()
    resume = pb.StreamingRecognizeRequest(config=pb.StreamingConfig(resume_token=resume_token))
    with pytest.raises(grpc.RpcError) as err:  # another tenant cannot take it over, nor learn that it exists
        list(server.stub().StreamingRecognize(iter([resume]), metadata=bearer(VOXONLY), timeout=30))
    assert error_reason(err.value)[:2] == (grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND")
    responses = resume_stream(server.stub(), [resume], metadata=bearer(GLOBEX))
    assert responses[-1].WhichOneof("response") == "ended"


def test_each_channel_counts_against_the_tenants_quota_all_or_none(server: ServerProcess) -> None:
    """A two-channel session is two sessions of the tenant's quota: admitted whole, or refused whole."""
    release = threading.Event()

    def two_channels(token: str) -> Iterator[pb.StreamingRecognizeResponse]:  # held until `release`
        def requests() -> Iterator[pb.StreamingRecognizeRequest]:
            yield config_request(audio_channel_count=2)
            release.wait(30)

        call = server.stub().StreamingRecognize(requests(), metadata=bearer(token), timeout=30)
        assert next(call).WhichOneof("response") == "started"
        return call

    with pytest.raises(grpc.RpcError) as err:  # acme may hold one session: not two channels' worth
        two_channels(ACME)
    assert error_reason(err.value)[:2] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "SESSION_QUOTA")
    channel = server.channel()
    stereo = two_channels(GLOBEX)  # globex may hold three: two channels and one mono session
    try:
        mono = hold_stream(channel, bearer(GLOBEX))
        with pytest.raises(grpc.RpcError) as err:
            hold_stream(channel, bearer(GLOBEX))
        assert error_reason(err.value)[:2] == (grpc.StatusCode.RESOURCE_EXHAUSTED, "SESSION_QUOTA")
        mono.release()
    finally:
        release.set()
        list(stereo)
