"""The example programs of voxgate's Node and Go clients, ready to run: session fixtures that build them.

`npm ci` in clients/node when its node_modules are missing, and the Go example with clients/go/build.sh into a
temporary directory. Without node/npm or go (+ Debian's Go gRPC packages) a test that asks for one skips with
the reason, unless VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1 (CI sets it), where it fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

NODE_DIR = ROOT / "clients" / "node"
GO_DIR = ROOT / "clients" / "go"
REQUIRED = os.environ.get("VOXGATE_REQUIRE_CLIENT_TOOLCHAINS") == "1"
TOOLCHAINS = "scripts/ci_toolchains.sh installs them"
# The first Go test builds the client (up to 600 s) before its own run (120 s): above pytest's 300 s default.
BUILD_TIMEOUT_S = 900


def unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason} (VOXGATE_REQUIRE_CLIENT_TOOLCHAINS=1)")
    pytest.skip(reason)


def tail(proc: subprocess.CompletedProcess[str]) -> str:
    return (proc.stdout + proc.stderr)[-3000:]


@pytest.fixture(scope="session")
def node_example() -> list[str]:
    """The command line of the Node example, with its dependencies installed in place."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        unavailable("node/npm not found on PATH: the Node client needs Node.js >= 18 and npm")
    assert node is not None and npm is not None
    needed = ("@grpc/grpc-js", "@grpc/proto-loader", "protobufjs", "typescript")
    if not all((NODE_DIR / "node_modules" / name).is_dir() for name in needed):
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            unavailable(f"`npm ci` in clients/node failed (no registry access?):\n{tail(proc)}")
    return [node, str(NODE_DIR / "examples" / "transcribe.js")]


@pytest.fixture(scope="session")
def go_example(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The Go example, built by clients/go/build.sh (GOPATH mode, Debian's Go packages)."""
    if shutil.which("go") is None:
        unavailable(f"go not found on PATH: the Go client needs golang-go and Debian's Go gRPC packages ({TOOLCHAINS})")
    binary = tmp_path_factory.mktemp("go") / "transcribe"
    proc = subprocess.run([str(GO_DIR / "build.sh"), str(binary)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        if "cannot find package" in proc.stderr:
            unavailable(f"Go packages missing ({TOOLCHAINS}):\n{tail(proc)}")
        pytest.fail(f"clients/go/build.sh failed:\n{tail(proc)}")
    return [str(binary)]
