"""A TCP relay in front of a voxgate server that a test can cut at will: both ways (a network drop), or on the
client's side only (the server hears nothing: a NAT or a proxy in between lost the connection), and point at
another server (a drained instance replaced behind a balancer), or refuse connections for a while (an
outage). It counts the connections it accepted: a
client that reuses its connection opens one."""

from __future__ import annotations

import socket
import threading
import time


class Relay:
    def __init__(self, target: str) -> None:
        self._target = _address(target)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []  # (client side, server side)
        self._silent: list[socket.socket] = []  # server sides left open and unread by abandon()
        self.accepted = 0
        self._refuse_until = 0.0  # monotonic time before which connections are closed at once
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def retarget(self, target: str) -> None:
        """New connections go to `target`; the open ones stay where they are."""
        with self._lock:
            self._target = _address(target)

    def cut(self) -> None:
        """Drop every live connection, both ways."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, upstream in pairs:
            _shut(client, close=True)
            _shut(upstream, close=True)

    def down_for(self, seconds: float) -> None:
        """An outage: drop every live connection, and close each new one at once for `seconds`."""
        with self._lock:
            self._refuse_until = time.monotonic() + seconds
        self.cut()

    def abandon(self) -> None:
        """Drop every live connection on the client's side only: the server gets no FIN, no RST and no
        answer to its pings; only its keepalive can tell the connection is dead."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
            self._silent += [upstream for _, upstream in pairs]
        for client, _ in pairs:
            _shut(client, close=True)

    def close(self) -> None:
        """Stop listening (connections are refused from now on) and drop every live connection."""
        _shut(self._listener, close=True)  # shutdown wakes the blocked accept(); close() alone does not
        self._thread.join(5)
        self.cut()
        with self._lock:
            silent, self._silent = self._silent, []
        for s in silent:
            _shut(s, close=True)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                target, refused = self._target, time.monotonic() < self._refuse_until
            if refused:
                _shut(client, close=True)
                continue
            try:
                upstream = socket.create_connection(target)
            except OSError:
                _shut(client, close=True)
                continue
            with self._lock:
                self.accepted += 1
                self._pairs.append((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            silent = list(self._silent)
        for s in (src, dst):
            if s not in silent:
                _shut(s)


def _address(target: str) -> tuple[str, int]:
    host, port = target.rsplit(":", 1)
    return host, int(port)


def _shut(s: socket.socket, close: bool = False) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    if close:
        s.close()
