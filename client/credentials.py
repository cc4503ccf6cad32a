"""Transport security and authentication of the client: TLS, mutual TLS, bearer tokens.

``Tls`` says how to check the server (a CA, or the system's roots) and, for mutual TLS, which
certificate the client presents. Each PEM item is given as ``bytes`` (the PEM itself) or a path.
The bearer token travels as ``authorization: Bearer <token>`` metadata on every call; over a
plaintext channel anyone on the path can read it, so use it with TLS beyond loopback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import grpc

PemSource = bytes | str | os.PathLike | None


def _pem(value: PemSource, what: str) -> bytes | None:
    if value is None or value == "":
        return None
    if isinstance(value, bytes):
        return value
    try:
        return Path(value).expanduser().read_bytes()
    except OSError as error:
        raise ValueError(f"{what}: cannot read {value}: {error.strerror or error}") from None


@dataclass(frozen=True)
class Tls:
    """TLS settings of a channel.

    ``ca_cert``: the CA that signed the server's certificate (``None``: the system's roots);
    ``client_cert`` and ``client_key``: the client's certificate and key for mutual TLS;
    ``server_name``: the name to check the server's certificate against, when it differs from the
    target's host (e.g. connecting by IP to a certificate issued for a DNS name).
    """

    ca_cert: PemSource = None
    client_cert: PemSource = None
    client_key: PemSource = None
    server_name: str = ""

    def credentials(self) -> grpc.ChannelCredentials:
        cert, key = _pem(self.client_cert, "client_cert"), _pem(self.client_key, "client_key")
        if (cert is None) != (key is None):
            raise ValueError("tls: client_cert and client_key go together (mutual TLS)")
        return grpc.ssl_channel_credentials(root_certificates=_pem(self.ca_cert, "ca_cert"), private_key=key,
                                            certificate_chain=cert)


def as_tls(tls: bool | Tls | None) -> Tls | None:
    """``True``: TLS with the system's roots; ``False``/``None``: plaintext; a :class:`Tls` as given."""
    if tls is True:
        return Tls()
    if tls is False or tls is None:
        return None
    if isinstance(tls, Tls):
        return tls
    raise TypeError(f"tls: expected bool or Tls, got {type(tls).__name__}")


def bearer_metadata(token: str | None) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying ``token`` (none without one)."""
    if not token:
        return ()
    if any(c in token for c in "\r\n") or token != token.strip():
        raise ValueError("token: must not contain spaces at the ends or line breaks")
    return (("authorization", f"Bearer {token}"),)
