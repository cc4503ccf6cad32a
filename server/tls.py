"""Transport security of the gRPC port: TLS, and mutual TLS when a client CA is configured.

``--tls-cert``/``--tls-key`` (PEM) switch the port to TLS; ``--tls-client-ca`` (PEM bundle)
additionally requires every client to present a certificate signed by that CA (mTLS), checked
during the handshake, before any RPC is read. Without them the port is plaintext (the default,
meant for loopback and for clusters that terminate TLS in a mesh).
"""

from __future__ import annotations

from pathlib import Path

import grpc


class TlsConfigError(ValueError):
    """A TLS setting is incomplete or a file cannot be read."""


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as error:
        raise TlsConfigError(f"{what} {path}: {error.strerror or error}") from None
    if b"-----BEGIN" not in data:
        raise TlsConfigError(f"{what} {path}: not a PEM file")
    return data


def server_credentials(cert: str, key: str, client_ca: str = "") -> grpc.ServerCredentials | None:
    """Credentials for ``add_secure_port``; ``None`` when TLS is off (no certificate given)."""
    if not cert and not key:
        if client_ca:
            raise TlsConfigError("--tls-client-ca needs --tls-cert and --tls-key (mTLS is TLS plus client certs)")
        return None
    if not (cert and key):
        raise TlsConfigError("--tls-cert and --tls-key go together")
    pair = (_read(key, "--tls-key"), _read(cert, "--tls-cert"))
    if client_ca:
        return grpc.ssl_server_credentials([pair], root_certificates=_read(client_ca, "--tls-client-ca"),
                                           require_client_auth=True)
    return grpc.ssl_server_credentials([pair])
