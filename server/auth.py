"""Bearer-token authentication and the per-method access policy (no gRPC here: :mod:`.interceptors`
applies it).

Tokens come from a file (``--auth-tokens-file``), one client a line::

    # name   scopes       token, or sha256:<hex digest of the token>
    ci       run          3f6c0a...
    ops      run,admin    sha256:9b74c9897bac770ffc029102a200c5de...

Scopes: ``run`` (Run, Benchmark, Select with policy AUTOTUNE: anything that executes kernels) and
``admin`` (LiftQuarantine). Everything else (Select, ListKernels, ListModels, GetServerInfo, health,
reflection) is open to any client that can connect. Only SHA-256 digests are kept in memory and
compared in constant time; a file may hold digests alone, so it need not hold the secrets.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SCOPES = frozenset({"run", "admin"})
#: Largest token accepted (anything longer is refused without hashing it).
MAX_TOKEN_CHARS = 4096
METADATA_KEY = "authorization"
_SERVICE = "/tiledispatch.v1.TileDispatchService/"

#: Scope each method needs; methods not listed (and other services: health, reflection) are open.
METHOD_SCOPES: Mapping[str, str] = {
    _SERVICE + "Run": "run",
    _SERVICE + "Benchmark": "run",
    _SERVICE + "LiftQuarantine": "admin",
}
#: Select needs this scope when its request asks for policy AUTOTUNE (it measures on the GPU).
AUTOTUNE_SCOPE = "run"
_DIGEST = re.compile(r"^sha256:([0-9a-fA-F]{64})$")


class AuthConfigError(ValueError):
    """The tokens file is malformed; the message names the line."""


@dataclass(frozen=True)
class Principal:
    """An authenticated client."""

    name: str
    scopes: frozenset[str]


@dataclass(frozen=True)
class Decision:
    """The outcome of a check: ``code`` is ``""`` (allowed), ``"UNAUTHENTICATED"`` or ``"PERMISSION_DENIED"``."""

    code: str
    message: str = ""
    principal: Principal | None = None

    @property
    def allowed(self) -> bool:
        return not self.code


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenAuth:
    """Known tokens (as digests) and the scopes each grants."""

    def __init__(self, entries: Iterable[tuple[str, Iterable[str], bytes]]):
        self._entries = [(digest_bytes, Principal(name, frozenset(scopes))) for name, scopes, digest_bytes in entries]

    @classmethod
    def from_file(cls, path: Path | str) -> TokenAuth:
        return cls.parse(Path(path).read_text(), source=str(path))

    @classmethod
    def parse(cls, text: str, source: str = "tokens") -> TokenAuth:
        entries = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 3:
                raise AuthConfigError(f"{source}:{number}: expected 'name scopes token', got {len(parts)} fields")
            name, scopes_text, token = parts
            scopes = {s for s in scopes_text.split(",") if s}
            unknown = scopes - SCOPES
            if unknown or not scopes:
                raise AuthConfigError(f"{source}:{number}: scopes must be among {sorted(SCOPES)}, got {scopes_text!r}")
            match = _DIGEST.match(token)
            if match:
                value = bytes.fromhex(match.group(1))
            elif len(token) < 16:
                raise AuthConfigError(f"{source}:{number}: token of {name!r} is shorter than 16 characters")
            else:
                value = digest(token)
            entries.append((name, scopes, value))
        if not entries:
            raise AuthConfigError(f"{source}: no tokens (an empty file would lock every client out of Run)")
        return cls(entries)

    def authenticate(self, token: str) -> Principal | None:
        if not token or len(token) > MAX_TOKEN_CHARS:
            return None
        presented = digest(token)
        found = None
        for known, principal in self._entries:  # every entry compared: timing says nothing of which
            if hmac.compare_digest(known, presented) and found is None:
                found = principal
        return found

    def check(self, scope: str | None, metadata: Iterable[tuple[str, str | bytes]] | None) -> Decision:
        """Whether a call needing ``scope`` (``None``: open) with this metadata may proceed.

        An open method proceeds with or without a token, but a token that is presented must be
        valid: a wrong token is always UNAUTHENTICATED, never silently ignored."""
        token, malformed = bearer_token(metadata)
        if malformed:
            return Decision("UNAUTHENTICATED", "authorization metadata must be 'Bearer <token>'")
        if token is None:
            if scope is None:
                return Decision("")
            return Decision("UNAUTHENTICATED", f"this method needs a bearer token with the {scope!r} scope")
        principal = self.authenticate(token)
        if principal is None:
            return Decision("UNAUTHENTICATED", "unknown bearer token")
        if scope is not None and scope not in principal.scopes:
            return Decision("PERMISSION_DENIED", f"client {principal.name!r} lacks the {scope!r} scope", principal)
        return Decision("", principal=principal)


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> tuple[str | None, bool]:
    """(token, malformed) from the ``authorization`` metadata entry."""
    for key, value in metadata or ():
        if key.lower() != METADATA_KEY:
            continue
        if isinstance(value, bytes):
            value = value.decode("latin-1")
        scheme, _, token = value.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None, True
        return token.strip(), False
    return None, False


def method_scope(method: str) -> str | None:
    return METHOD_SCOPES.get(method)
