"""Bearer tokens → tenants, from a token file that holds only SHA-256 digests of the tokens.

Two formats (see docs/security.md):

JSON (the file starts with `{`)::

    {"tenants": {"acme": {"tokens": ["sha256:<64 hex>"], "max_sessions": 4, "apis": ["voxgate", "riva"]}}}

Lines (`#` starts a comment; options may sit on any line of a tenant, but only once)::

    sha256:<64 hex> acme max_sessions=4 apis=voxgate,riva

`max_sessions` (optional, 0 = the server's --tenant-max-sessions) caps the tenant's concurrent
sessions; `apis` (optional, default all) lists the APIs it may call: voxgate, riva, google.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "sha256:"
APIS = ("voxgate", "riva", "google")
_TENANT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class TokenFileError(ValueError):
    pass


@dataclass(frozen=True)
class Tenant:
    name: str
    max_sessions: int = 0  # 0: the server's default per-tenant limit
    apis: frozenset[str] = frozenset(APIS)


def hash_token(token: str) -> str:
    """The token file entry for `token`: "sha256:<hex>"."""
    return PREFIX + hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe) with a recognisable prefix."""
    return "vxg_" + secrets.token_urlsafe(32)


class TokenBook:
    """Digest → tenant. Lookups compare against every digest in constant time (no early exit)."""

    def __init__(self, entries: dict[bytes, Tenant]) -> None:
        self._entries = list(entries.items())
        self.tenants = {t.name: t for t in entries.values()}

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, token: str) -> Tenant | None:
        digest = hashlib.sha256(token.encode()).digest()
        found: Tenant | None = None
        for known, tenant in self._entries:
            if hmac.compare_digest(known, digest):
                found = tenant
        return found

    @classmethod
    def load(cls, path: str | Path) -> TokenBook:
        text = Path(path).read_text()
        try:
            raw = _parse_json(text) if text.lstrip().startswith("{") else _parse_lines(text)
            return cls(_build(raw))
        except TokenFileError as exc:
            raise TokenFileError(f"{path}: {exc}") from None


def _parse_json(text: str) -> dict[str, dict[str, Any]]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenFileError(f"not valid JSON: {exc}") from None
    tenants = doc.get("tenants") if isinstance(doc, dict) else None
    if not isinstance(tenants, dict):
        raise TokenFileError('expected {"tenants": {NAME: {"tokens": [...], ...}}}')
    out: dict[str, dict[str, Any]] = {}
    for name, spec in tenants.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("tokens"), list):
            raise TokenFileError(f"tenant {name!r}: expected an object with a list of tokens")
        unknown = set(spec) - {"tokens", "max_sessions", "apis"}
        if unknown:
            raise TokenFileError(f"tenant {name!r}: unknown keys {sorted(unknown)}")
        out[name] = spec
    return out


def _parse_lines(text: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 2:
            raise TokenFileError(f"line {n}: expected 'sha256:<hex> TENANT [max_sessions=N] [apis=a,b]'")
        digest, name, *options = words
        spec = out.setdefault(name, {"tokens": []})
        spec["tokens"].append(digest)
        for option in options:
            key, sep, value = option.partition("=")
            if not sep or key not in ("max_sessions", "apis"):
                raise TokenFileError(f"line {n}: unknown option {option!r}")
            if key in spec:
                raise TokenFileError(f"line {n}: {key} of tenant {name!r} given twice")
            spec[key] = value.split(",") if key == "apis" else value
    return out


def _build(raw: dict[str, dict[str, Any]]) -> dict[bytes, Tenant]:
    entries: dict[bytes, Tenant] = {}
    for name, spec in raw.items():
        if not _TENANT_NAME.match(name):
            raise TokenFileError(f"tenant name {name!r}: use letters, digits, '.', '_', '-' (at most 64)")
        try:
            max_sessions = int(spec.get("max_sessions", 0))
        except (TypeError, ValueError):
            raise TokenFileError(f"tenant {name!r}: max_sessions must be an integer") from None
        if max_sessions < 0:
            raise TokenFileError(f"tenant {name!r}: max_sessions must be >= 0")
        apis = spec.get("apis", list(APIS))
        if not isinstance(apis, list) or not set(apis) <= set(APIS):
            raise TokenFileError(f"tenant {name!r}: apis must be a list drawn from {', '.join(APIS)}")
        tenant = Tenant(name, max_sessions, frozenset(apis))
        for digest in spec["tokens"]:
            if not isinstance(digest, str) or not _DIGEST.match(digest):
                raise TokenFileError(
                    f"tenant {name!r}: tokens are stored hashed, as 'sha256:<64 lowercase hex>' "
                    "(make one with `voxgate token hash`)"
                )
            key = bytes.fromhex(digest.removeprefix(PREFIX))
            if key in entries:
                raise TokenFileError(f"a token digest appears twice (tenants {entries[key].name!r} and {name!r})")
            entries[key] = tenant
    return entries
