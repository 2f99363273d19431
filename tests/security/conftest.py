"""Fixtures for the security tests: a test PKI and token files (streams held open: tests.helpers.hold_stream)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from service.security import hash_token
from tests.helpers import HeldStream, hold_stream  # noqa: F401  (re-exported for the security tests)
from tests.security.pki import Authority, Issued


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
    return Pki(
        ca,
        ca.issue("server", server=True),
        ca.issue("client", server=False),
        rogue,
        rogue.issue("rogue-client", server=False),
    )


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def write_lines_token_file(path: Path, tenants: dict[str, tuple[str, str]]) -> Path:
    """tenant → (token, options): the lines format."""
    path.write_text(
        "# test token file\n"
        + "".join(f"{hash_token(token)} {name} {options}\n" for name, (token, options) in tenants.items())
    )
    return path
