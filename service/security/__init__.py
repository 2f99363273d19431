"""Transport security and tenants: TLS/mTLS credentials, bearer tokens, the listener check.

`Security(config)` reads and checks the files at start-up (a bad file is a start-up
error); `reload()` (SIGHUP) reads them again, and a file that no longer loads is
logged and ignored: the previous certificates and tokens stay in force.
See docs/security.md.
"""

from __future__ import annotations

import ipaddress

import grpc
import structlog

from ..config import Config
from .auth import AuthInterceptor, current_tenant
from .tls import ReloadingCredentials, TlsFileError, TlsFiles
from .tokens import Tenant, TokenBook, TokenFileError, hash_token, new_token

__all__ = ["Security", "Tenant", "current_tenant", "hash_token", "is_loopback", "new_token"]

log = structlog.get_logger("security")


def is_loopback(host: str) -> bool:
    """Whether listening on `host` keeps the port on this machine ("localhost" or a loopback address)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name or "": it may resolve to anything


class Security:
    def __init__(self, config: Config) -> None:
        c = config
        if bool(c.tls_cert) != bool(c.tls_key):
            raise ValueError("--tls-cert and --tls-key go together")
        if c.tls_client_ca and not c.tls_cert:
            raise ValueError("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
        if c.tenant_max_sessions < 0:
            raise ValueError("--tenant-max-sessions must be >= 0")
        self._config = c
        self.tls = ReloadingCredentials(TlsFiles(c.tls_cert, c.tls_key, c.tls_client_ca)) if c.tls_cert else None
        self.tokens = TokenBook.load(c.auth_tokens_file) if c.auth_tokens_file else None

    @property
    def credentials(self) -> grpc.ServerCredentials | None:
        return self.tls.credentials if self.tls else None

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [AuthInterceptor(self._book)] if self.tokens is not None else []

    def _book(self) -> TokenBook:
        assert self.tokens is not None
        return self.tokens

    def describe(self) -> dict[str, object]:
        """For the `listening` log line."""
        return {
            "tls": "mutual" if self._config.tls_client_ca else bool(self.tls),
            "auth": "tokens" if self.tokens is not None else "off",
            "tenants": len(self.tokens.tenants) if self.tokens is not None else 0,
        }

    def warn_if_exposed(self, host: str) -> None:
        if self.tls is None and not is_loopback(host):
            log.warning(
                "insecure_listener",
                host=host,
                message=f"listening on {host or 'all interfaces'} WITHOUT TLS: audio, transcripts"
                + (" and bearer tokens" if self.tokens is not None else "")
                + " travel in clear text on the network; set --tls-cert/--tls-key, "
                "or listen on 127.0.0.1 behind a TLS-terminating proxy",
            )
        if self.tokens is None and not is_loopback(host):
            log.warning(
                "unauthenticated_listener",
                host=host,
                message="no --auth-tokens-file: any client that reaches this port may open sessions",
            )

    def reload(self) -> None:
        """SIGHUP: read the certificate and token files again; keep the old ones if a file is bad."""
        if self.tls is not None:
            try:
                self.tls.reload()
                log.info("tls_reloaded", cert=self.tls.files.cert, client_ca=self.tls.files.client_ca)
            except TlsFileError as exc:
                log.error("tls_reload_failed", error=str(exc), kept="previous certificate")
        if self.tokens is not None:
            try:
                self.tokens = TokenBook.load(self._config.auth_tokens_file)
                log.info("tokens_reloaded", tokens=len(self.tokens), tenants=len(self.tokens.tenants))
            except (OSError, TokenFileError) as exc:
                log.error("tokens_reload_failed", error=str(exc), kept="previous tokens")
