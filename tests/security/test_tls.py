"""TLS and mutual TLS with real certificates made here; SIGHUP rotates certificates and tokens in place."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
import riva.client

from tests.helpers import (
    FIXTURES,
    ROOT,
    ServerProcess,
    audio_requests,
    config_request,
    error_reason,
    fake_script,
    silence,
    start_server,
    voiced,
)
from tests.security.conftest import Pki, bearer, hold_stream, write_lines_token_file
from tests.security.pki import served_serial
from voxgate_client.v1 import speech_pb2 as pb
from voxgate_client.v1 import speech_pb2_grpc

TOKEN = "tls-tenant-token"
CLIP = str(FIXTURES / "audio" / "go_forward.wav")


def credentials(pki: Pki, *, client: bool = False) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        pki.ca.pem,
        private_key=pki.client.key.read_bytes() if client else None,
        certificate_chain=pki.client.cert.read_bytes() if client else None,
    )


def capabilities(channel: grpc.Channel, token: str | None = TOKEN) -> pb.GetCapabilitiesResponse:
    return speech_pb2_grpc.SpeechStub(channel).GetCapabilities(
        pb.GetCapabilitiesRequest(), metadata=bearer(token) if token else (), timeout=10
    )


def fails_to_connect(call: Callable[[], object]) -> None:
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value


@pytest.fixture(scope="module")
def tls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("tls")
    tokens = write_lines_token_file(tmp / "tokens.txt", {"acme": (TOKEN, "max_sessions=2")})
    srv = start_server(
        tmp,
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        "--auth-tokens-file",
        str(tokens),
        engine="fake",
        model=fake_script(tmp, words=[["go", 300], ["forward", 700]]),
        credentials=credentials(pki),
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def mtls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("mtls")
    srv = start_server(
        tmp,
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        "--tls-client-ca",
        str(pki.ca.path),
        engine="fake",
        model=fake_script(tmp, words=[["go", 300], ["forward", 700]]),
        credentials=credentials(pki, client=True),
    )
    yield srv
    srv.stop()


def test_tls_client_verifies_the_server_and_plaintext_fails(tls_server: ServerProcess, pki: Pki) -> None:
    assert capabilities(tls_server.channel()).engine.name == "fake"
    assert served_serial(tls_server.target, pki.ca.path) == pki.server.serial
    fails_to_connect(lambda: capabilities(grpc.insecure_channel(tls_server.target)))  # plaintext
    untrusting = grpc.ssl_channel_credentials(pki.rogue_ca.pem)  # a client that trusts another CA
    fails_to_connect(lambda: capabilities(grpc.secure_channel(tls_server.target, untrusting)))
    # TLS alone does not authenticate: the token is still required.
    with pytest.raises(grpc.RpcError) as err:
        capabilities(tls_server.channel(), token=None)
    assert error_reason(err.value)[:2] == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_MISSING")


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "service", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_transcribe_and_status_cli_over_tls_with_a_token(tls_server: ServerProcess, pki: Pki) -> None:
    tls = ["--server", tls_server.target, "--tls-ca", str(pki.ca.path)]
    done = run_cli("transcribe", "--json", "--no-pace", *tls, "--token", TOKEN, CLIP)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[-1]["type"] == "ended" and "go forward" in " ".join(
        x["text"] for x in lines if x["type"] == "result" and x["is_final"]
    )
    from_env = run_cli("transcribe", "--no-pace", *tls, CLIP, env={"VOXGATE_TOKEN": TOKEN})
    assert from_env.returncode == 0, from_env.stderr
    no_token = run_cli("transcribe", "--no-pace", *tls, CLIP, env={"VOXGATE_TOKEN": ""})
    assert no_token.returncode == 1 and "UNAUTHENTICATED" in no_token.stderr, no_token.stderr
    plaintext = run_cli("transcribe", "--no-pace", "--server", tls_server.target, "--token", TOKEN, CLIP)
    assert plaintext.returncode == 1 and "UNAVAILABLE" in plaintext.stderr
    status = run_cli("status", "--json", *tls, "--token", TOKEN)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["ready"] == "SERVING"


def test_mtls_requires_a_client_certificate_from_the_client_ca(mtls_server: ServerProcess, pki: Pki) -> None:
    no_cert = grpc.ssl_channel_credentials(pki.ca.pem)
    fails_to_connect(lambda: capabilities(grpc.secure_channel(mtls_server.target, no_cert), token=None))
    rogue = grpc.ssl_channel_credentials(
        pki.ca.pem, private_key=pki.rogue_client.key.read_bytes(), certificate_chain=pki.rogue_client.cert.read_bytes()
    )
    fails_to_connect(lambda: capabilities(grpc.secure_channel(mtls_server.target, rogue), token=None))

    responses = list(
        speech_pb2_grpc.SpeechStub(mtls_server.channel()).StreamingRecognize(
            iter([config_request(), *audio_requests(voiced(1.0) + silence(1.0))]), timeout=30
        )
    )
    assert responses[-1].WhichOneof("response") == "ended"
    assert "go forward" in " ".join(r.result.text for r in responses if r.result.is_final)
    # The unmodified Riva client with its own mTLS options.
    auth = riva.client.Auth(
        uri=mtls_server.target,
        use_ssl=True,
        ssl_root_cert=str(pki.ca.path),
        ssl_client_cert=str(pki.client.cert),
        ssl_client_key=str(pki.client.key),
    )
    config = riva.client.StreamingRecognitionConfig(
        config=riva.client.RecognitionConfig(
            encoding=riva.client.AudioEncoding.LINEAR_PCM,
            sample_rate_hertz=16000,
            language_code="en-US",
            audio_channel_count=1,
        ),
        interim_results=False,
    )
    audio = voiced(1.0) + silence(1.0)
    replies = riva.client.ASRService(auth).streaming_response_generator(
        audio_chunks=[audio[i : i + 3200] for i in range(0, len(audio), 3200)], streaming_config=config
    )
    assert "go forward" in " ".join(r.alternatives[0].transcript for resp in replies for r in resp.results)


def wait_log(server: ServerProcess, event: str, count: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while server.log().count(f'"{event}"') < count:
        assert time.monotonic() < deadline, f"no {event} in the log"
        time.sleep(0.05)


def test_sighup_rotates_the_certificate_and_tokens_without_dropping_anything(pki: Pki, tmp_path: Path) -> None:
    cert, key, tokens = tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "tokens.txt"
    first = pki.ca.issue("server", server=True, cert=cert, key=key)
    write_lines_token_file(tokens, {"acme": ("old-token", "")})
    srv = start_server(
        tmp_path,
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--auth-tokens-file",
        str(tokens),
        engine="fake",
        credentials=credentials(pki),
    )
    try:
        assert served_serial(srv.target, pki.ca.path) == first.serial
        open_channel = srv.channel()
        held = hold_stream(open_channel, bearer("old-token"))  # a live session across the rotation

        second = pki.ca.issue("server", server=True, cert=cert, key=key)
        write_lines_token_file(tokens, {"acme": ("new-token", "")})
        srv.proc.send_signal(signal.SIGHUP)
        wait_log(srv, "tls_reloaded", 1)
        wait_log(srv, "tokens_reloaded", 1)

        assert served_serial(srv.target, pki.ca.path) == second.serial  # new connections: the new certificate
        fresh = srv.channel()
        assert capabilities(fresh, "new-token").engine.name == "fake"
        with pytest.raises(grpc.RpcError) as err:
            capabilities(fresh, "old-token")
        assert error_reason(err.value)[:2] == (grpc.StatusCode.UNAUTHENTICATED, "TOKEN_INVALID")
        assert held.release()[-1].WhichOneof("response") == "ended"  # the session was not dropped

        # A broken file is refused: the previous certificate and tokens stay in force.
        cert.write_text("not a certificate\n")
        tokens.write_text("garbage\n")
        srv.proc.send_signal(signal.SIGHUP)
        wait_log(srv, "tls_reload_failed", 1)
        wait_log(srv, "tokens_reload_failed", 1)
        assert served_serial(srv.target, pki.ca.path) == second.serial
        assert capabilities(srv.channel(), "new-token").engine.name == "fake"
        assert srv.proc.poll() is None
    finally:
        assert srv.stop() == 0
