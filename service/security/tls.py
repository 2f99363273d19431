"""TLS and mutual TLS server credentials from PEM files, reloadable without a restart.

gRPC asks `fetch` for a new certificate configuration at each new TLS handshake
(grpc.dynamic_ssl_server_credentials); `reload()` reads the files again and
hands the result to the next handshake. Connections already open keep the
certificate they were made with.
"""

from __future__ import annotations

import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc


class TlsFileError(ValueError):
    pass


@dataclass(frozen=True)
class TlsFiles:
    cert: str
    key: str
    client_ca: str = ""  # set: clients must present a certificate issued by this CA (mTLS)

    def load(self) -> grpc.ServerCertificateConfiguration:
        """Read and check the files: the key must match the certificate (a bad file never replaces a good one)."""
        try:
            cert, key = Path(self.cert).read_bytes(), Path(self.key).read_bytes()
            client_ca = Path(self.client_ca).read_bytes() if self.client_ca else None
        except OSError as exc:
            raise TlsFileError(f"cannot read {exc.filename}: {exc.strerror}") from None
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, ValueError) as exc:
            raise TlsFileError(f"{self.cert} / {self.key}: not a matching PEM certificate and key ({exc})") from None
        if client_ca is not None:
            try:
                ssl.create_default_context(cadata=client_ca.decode("ascii", "replace"))
            except (ssl.SSLError, ValueError) as exc:
                raise TlsFileError(f"{self.client_ca}: not a PEM CA certificate ({exc})") from None
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)


class ReloadingCredentials:
    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self._lock = threading.Lock()
        self._pending: grpc.ServerCertificateConfiguration | None = None
        initial = files.load()
        self.credentials = grpc.dynamic_ssl_server_credentials(
            initial, self._fetch, require_client_authentication=bool(files.client_ca)
        )

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC (on its own thread) before each handshake; None keeps the current configuration.
        with self._lock:
            pending, self._pending = self._pending, None
        return pending

    def reload(self) -> None:
        """Read the files again for the next handshakes; raises TlsFileError and keeps the old ones if bad."""
        config = self.files.load()
        with self._lock:
            self._pending = config
