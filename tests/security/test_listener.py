"""What listens where: loopback by default, a warning when exposed without TLS, a private engine socket."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import structlog

from engine_sidecar.process.serving import prepare_socket
from service.cli import build_parser
from service.config import Config, config_from_args
from service.security import Security, is_loopback
from service.sidecar_process import SidecarStartError, check_private_socket
from tests.helpers import ROOT, ServerProcess, start_server
from tests.security.conftest import Pki


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket LISTENing on `port` (/proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.split(":")
            if state == "0A" and int(port_hex, 16) == port:
                found.add(address)
    return found


def socket_path(server: ServerProcess) -> Path:
    args = Path(f"/proc/{server.sidecar_pid()}/cmdline").read_bytes().split(b"\0")
    return Path(args[args.index(b"--socket") + 1].decode())


def test_default_listener_is_loopback_only_and_the_engine_socket_is_private(tmp_path: Path) -> None:
    assert Config().host == "127.0.0.1"
    assert config_from_args(build_parser().parse_args(["serve"])).host == "127.0.0.1"
    server = start_server(tmp_path, engine="fake")  # no --host
    try:
        host, port = server.target.rsplit(":", 1)
        assert host == "127.0.0.1"
        # 127.0.0.1 only (as an IPv4 socket, or IPv4-mapped ::ffff:127.0.0.1 on an IPv6 one): nothing else.
        addresses = listening_addresses(int(port))
        assert addresses and addresses <= {"0100007F", "0000000000000000FFFF00000100007F"}, addresses
        assert '"insecure_listener"' not in server.log()
        sock = socket_path(server)
        st, dir_st = sock.stat(), sock.parent.stat()
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
        assert stat.S_IMODE(dir_st.st_mode) == 0o700 and dir_st.st_uid == os.getuid()
    finally:
        assert server.stop() == 0
    assert not sock.parent.exists()  # the private directory goes with the server


def test_all_interfaces_without_tls_logs_a_clear_warning(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--host", "0.0.0.0", engine="fake")
    try:
        warning = next(json.loads(line) for line in server.log().splitlines() if '"insecure_listener"' in line)
        assert warning["level"] == "warning" and "WITHOUT TLS" in warning["message"]
        assert '"unauthenticated_listener"' in server.log()
    finally:
        server.stop()


def test_exposed_listener_with_tls_and_tokens_has_no_warning(tmp_path: Path, pki: Pki) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("")
    log = tmp_path / "server.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service",
            "serve",
            "--port",
            "0",
            "--engine",
            "fake",
            "--host",
            "0.0.0.0",
            "--tls-cert",
            str(pki.server.cert),
            "--tls-key",
            str(pki.server.key),
            "--auth-tokens-file",
            str(tokens),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )
    try:
        assert proc.stdout is not None and "listening on 0.0.0.0:" in proc.stdout.readline()
        deadline = time.monotonic() + 10
        while '"listening"' not in log.read_text():  # logged right after the line on stdout
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert "_listener" not in log.read_text() and '"tls": true' in log.read_text()
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_configured_socket_directory_is_created_private(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "voxgate" / "engine.sock"
    server = start_server(tmp_path, "--sidecar-socket", str(sock), engine="fake")
    try:
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tls_cert": "x.pem"}, "--tls-cert and --tls-key go together"),
        ({"tls_client_ca": "ca.pem"}, "needs --tls-cert"),
        ({"tls_cert": "missing.pem", "tls_key": "missing.key"}, "cannot read"),
        ({"auth_tokens_file": "PLAINTEXT"}, "tokens are stored hashed"),
        ({"tenant_max_sessions": -1}, ">= 0"),
    ],
)
def test_bad_security_settings_are_refused(tmp_path: Path, settings: dict[str, object], message: str) -> None:
    bad = tmp_path / "tokens.txt"
    bad.write_text("plaintext-token acme\n")
    settings = {k: str(bad) if v == "PLAINTEXT" else v for k, v in settings.items()}
    with pytest.raises(ValueError, match=message):
        Security(Config(**settings))  # type: ignore[arg-type]


def test_mismatched_key_fails_the_start(tmp_path: Path, pki: Pki) -> None:
    """End to end: `voxgate serve` with a bad security setting exits 1 with the reason, before listening."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "serve",
            "--port",
            "0",
            "--engine",
            "fake",
            "--tls-cert",
            str(pki.server.cert),
            "--tls-key",
            str(pki.client.key),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "not a matching PEM certificate and key" in done.stderr, done.stderr
    assert "listening" not in done.stdout


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("[::]", False),
        ("", False),
        ("10.0.0.5", False),
        ("speech.example", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_shared_socket_directory_gets_a_warning(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with structlog.testing.capture_logs() as logs:
        prepare_socket(shared / "engine.sock")
    assert [entry["event"] for entry in logs] == ["sidecar_socket_dir_not_private"]
    shared.chmod(0o1777)  # sticky, like /tmp: others cannot remove our socket
    with structlog.testing.capture_logs() as logs:
        prepare_socket(shared / "engine.sock")
    assert logs == []


def test_front_ends_preparing_one_socket_directory_at_once_all_succeed(tmp_path: Path) -> None:
    """K front ends of one sidecar serve on <socket>, <socket>.1, ... in one directory, each preparing it
    as it starts (CI caught a front end failing with FileExistsError when another created it first)."""
    from concurrent.futures import ThreadPoolExecutor

    from engine_sidecar.engines.voxtral.frontend_client import frontend_socket

    for attempt in range(20):
        directory = tmp_path / f"engine-{attempt}" / "sub"
        start = threading.Barrier(4)

        def prepare(i: int, directory: Path = directory, start: threading.Barrier = start) -> None:
            start.wait()
            prepare_socket(Path(frontend_socket(str(directory / "engine.sock"), i)))

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(prepare, range(4)))  # raises what any of them raised
        assert directory.stat().st_mode & 0o777 == 0o700


def test_service_refuses_an_engine_socket_others_can_reach(tmp_path: Path) -> None:
    import socket

    path = tmp_path / "engine.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        path.chmod(0o600)
        check_private_socket(path)
        path.chmod(0o666)
        with pytest.raises(SidecarStartError, match="not a private socket"):
            check_private_socket(path)
