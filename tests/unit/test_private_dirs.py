"""A killed service's private socket directories are removed by the next one; nothing else is."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from service.private_dirs import make_private_dir, sweep_stale


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def with_socket(path: Path) -> Path:
    path.mkdir(mode=0o700)
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path / "engine.sock"))
    s.close()  # the socket file stays, as after a SIGKILL
    return path


def test_only_dead_owners_socket_only_dirs_of_the_kind_are_swept(tmp_path: Path) -> None:
    dead = dead_pid()
    stale = with_socket(tmp_path / f"voxgate-{dead}-abc")
    live = with_socket(tmp_path / f"voxgate-{os.getpid()}-abc")
    other_kind = with_socket(tmp_path / f"voxgate-workers-{dead}-abc")
    legacy = with_socket(tmp_path / "voxgate-abc123")  # before names carried a pid: not judged
    not_only_sockets = with_socket(tmp_path / f"voxgate-{dead}-def")
    (not_only_sockets / "notes.txt").write_text("someone's")
    a_file = tmp_path / f"voxgate-{dead}-ghi"
    a_file.write_text("not a directory")

    assert sweep_stale("", tmp_path) == [stale]
    assert not stale.exists()
    assert live.exists() and other_kind.exists() and legacy.exists() and a_file.exists()
    assert (not_only_sockets / "notes.txt").exists() and not (not_only_sockets / "engine.sock").exists()

    assert sweep_stale("workers-", tmp_path) == [other_kind]
    assert sweep_stale("", tmp_path) == []  # idempotent


def test_a_new_dir_is_private_and_named_after_its_owner() -> None:
    path = make_private_dir("test-")
    try:
        assert path.name.startswith(f"voxgate-test-{os.getpid()}-")
        assert path.stat().st_mode & 0o777 == 0o700
    finally:
        path.rmdir()
