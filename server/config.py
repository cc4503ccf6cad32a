"""Server settings: command-line flags over ``TILEDISPATCH_*`` environment variables over defaults.

=================================  ==============================  ================================================
flag                               environment variable            default
=================================  ==============================  ================================================
``--host``                         ``TILEDISPATCH_HOST``           ``127.0.0.1`` (``0.0.0.0`` in a container)
``--port``                         ``TILEDISPATCH_PORT``           ``50051``
``--metrics-port``                 ``TILEDISPATCH_METRICS_PORT``   ``9464`` (``/metrics``; 0 switches it off)
``--models-dir``                   ``TILEDISPATCH_MODELS_DIR``     the package's ``models/artifacts``
``--registry-dir``                 ``TILEDISPATCH_REGISTRY_DIR``   ``$TILEDISPATCH_HOME/registry``
``--db``                           ``TILEDISPATCH_DB``             ``$TILEDISPATCH_HOME/tuning.sqlite``
``--max-message-mb``               ``TILEDISPATCH_MAX_MESSAGE_MB`` ``64`` (request and response messages)
``--max-concurrency``              ``TILEDISPATCH_MAX_CONCURRENCY`` ``64`` RPCs in flight, then RESOURCE_EXHAUSTED
``--max-queue``                    ``TILEDISPATCH_MAX_QUEUE``      ``32`` Run/Benchmark/AUTOTUNE calls admitted (running
                                                                   or queued for a GPU worker), then RESOURCE_EXHAUSTED
``--log-level``                    ``TILEDISPATCH_LOG_LEVEL``      ``INFO``
``--arch``                         ``TILEDISPATCH_ARCH``           ``auto``: the GPU's, else ``sm_90`` (H200 figures)
``--gpus``                         ``TILEDISPATCH_GPUS``           ``auto`` (probe), ``none``, or indices ``0,1``
``--rule-set``                     ``TILEDISPATCH_RULE_SET``       ``default`` (kernels when no registry is built)
``--kernel-timeout-s``             ``TILEDISPATCH_KERNEL_TIMEOUT_S`` ``120``: a GPU call longer than this is a hang
``--cache-size``                   ``TILEDISPATCH_CACHE_SIZE``     ``4096`` selections kept (LRU)
``--cpu-reference-max-gflop``      ``TILEDISPATCH_CPU_REFERENCE_MAX_GFLOP`` ``4``: larger Run problems are refused
                                                                   without a GPU (RESOURCE_EXHAUSTED)
``--threads``                      ``TILEDISPATCH_THREADS``        ``8`` threads for blocking work (each executor)
``--grace-s``                      ``TILEDISPATCH_GRACE_S``        ``10`` seconds for in-flight RPCs at shutdown
``--worker-handler``               ``TILEDISPATCH_WORKER_HANDLER`` the GPU handler (``module:factory``; tests swap it)
``--tls-cert``                     ``TILEDISPATCH_TLS_CERT``       empty: plaintext; a PEM certificate (chain): TLS
``--tls-key``                      ``TILEDISPATCH_TLS_KEY``        the certificate's PEM private key
``--tls-client-ca``                ``TILEDISPATCH_TLS_CLIENT_CA``  empty; a PEM CA bundle: mutual TLS (clients must
                                                                   present a certificate it signed)
``--auth-tokens-file``             ``TILEDISPATCH_AUTH_TOKENS_FILE`` empty: no authentication; a file of
                                                                   ``name scopes token`` lines: bearer tokens
                                                                   (docs/security.md)
``--allow-shared-memory``          ``TILEDISPATCH_ALLOW_SHARED_MEMORY`` off; on (flag, or ``1``/``true``): Run accepts
                                                                   inputs a same-host client left in shared memory
                                                                   (docs/operations.md)
=================================  ==============================  ================================================

``TILEDISPATCH_HOME`` (default ``~/.cache/tiledispatch``) holds the default database and registry.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

ENV_PREFIX = "TILEDISPATCH_"
DEFAULT_WORKER_HANDLER = "tiledispatch.server.gpu_handler:GpuHandler"


def home(environ: Mapping[str, str]) -> Path:
    """Where the server keeps its state by default."""
    return Path(environ.get("TILEDISPATCH_HOME") or Path.home() / ".cache" / "tiledispatch").expanduser()


def packaged_models_dir() -> Path:
    """``models/artifacts`` of the installed package, found without importing it."""
    spec = importlib.util.find_spec("tiledispatch.models")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) / "artifacts" if locations else Path("models/artifacts")


@dataclass(frozen=True)
class Settings:
    """Everything the server is configured with; built once by :func:`parse_settings`."""

    host: str = "127.0.0.1"
    port: int = 50051
    metrics_port: int = 9464
    models_dir: Path = Path("models/artifacts")
    registry_dir: Path = Path("registry")
    db: Path = Path("tuning.sqlite")
    max_message_mb: int = 64
    max_concurrency: int = 64
    max_queue: int = 32
    log_level: str = "INFO"
    arch: str = "auto"
    gpus: str = "auto"
    rule_set: str = "default"
    kernel_timeout_s: float = 120.0
    cache_size: int = 4096
    cpu_reference_max_gflop: float = 4.0
    threads: int = 8
    grace_s: float = 10.0
    worker_handler: str = DEFAULT_WORKER_HANDLER
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    auth_tokens_file: str = ""
    allow_shared_memory: bool = False

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mb * 1024 * 1024

    def gpu_indices(self) -> list[int] | None:
        """``None`` to probe, else the explicit device indices (empty for ``none``)."""
        text = self.gpus.strip().lower()
        if text == "auto":
            return None
        if text in ("none", "", "-1"):
            return []
        return [int(part) for part in text.split(",") if part.strip()]


_HELP = {
    "host": "address to listen on",
    "port": "gRPC port",
    "metrics_port": "Prometheus /metrics port (0: off)",
    "models_dir": "trained models, <name>/<version>/ each",
    "registry_dir": "compiled kernel registry (artifact cache)",
    "db": "tuning database (SQLite file)",
    "max_message_mb": "largest request/response message, MiB",
    "max_concurrency": "RPCs in flight before RESOURCE_EXHAUSTED",
    "max_queue": "Run/Benchmark/AUTOTUNE calls admitted (running or queued) before RESOURCE_EXHAUSTED",
    "log_level": "DEBUG, INFO, WARNING or ERROR",
    "arch": "compute target or device spec (sm_90, h100_sxm, ...); auto: from the GPU, else sm_90",
    "gpus": "auto, none, or device indices like 0,1",
    "rule_set": "rule set used when no registry is built (tiny, default, full)",
    "kernel_timeout_s": "a GPU call running longer is treated as a hang",
    "cache_size": "selections kept in the LRU cache",
    "cpu_reference_max_gflop": "largest Run problem for the CPU reference (hosts without a GPU)",
    "threads": "threads per executor for blocking work",
    "grace_s": "seconds granted to in-flight RPCs at shutdown",
    "worker_handler": "module:factory of the GPU worker's handler",
    "tls_cert": "PEM certificate (chain) of the gRPC port: TLS on (empty: plaintext)",
    "tls_key": "PEM private key of --tls-cert",
    "tls_client_ca": "PEM CA bundle: require client certificates it signed (mutual TLS)",
    "auth_tokens_file": "bearer tokens, 'name scopes token' per line (empty: no authentication)",
    "allow_shared_memory": "let Run read inputs that clients on this host left in shared memory",
}

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _defaults(environ: Mapping[str, str]) -> dict[str, Any]:
    base = home(environ)
    return {"models_dir": packaged_models_dir(), "registry_dir": base / "registry", "db": base / "tuning.sqlite"}


def _convert(kind: type, text: str, source: str) -> Any:
    if kind is bool:  # bool("false") is True: spell it out
        if text.strip().lower() in _TRUE + _FALSE:
            return text.strip().lower() in _TRUE
        raise SystemExit(f"tiledispatch serve: {source}: expected one of {list(_TRUE + _FALSE[:-1])}, got {text!r}")
    try:
        return Path(text).expanduser() if kind is Path else kind(text)
    except ValueError:
        raise SystemExit(f"tiledispatch serve: {source}: expected {kind.__name__}, got {text!r}") from None


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    environ = os.environ if environ is None else environ
    defaults = _defaults(environ)
    parser = argparse.ArgumentParser(
        prog="tiledispatch serve",
        description="Serve kernel selection, runs and benchmarks over gRPC. Every flag also reads "
                    "TILEDISPATCH_<FLAG> from the environment (flags win).")
    for item in fields(Settings):
        kind = type(item.default) if not isinstance(item.default, Path) else Path
        env_name = ENV_PREFIX + item.name.upper()
        default = defaults.get(item.name, item.default)
        if env_name in environ:
            default = _convert(kind, environ[env_name], env_name)
        if kind is bool:  # a switch: present means on
            parser.add_argument("--" + item.name.replace("_", "-"), dest=item.name, action="store_true",
                                default=default, help=f"{_HELP[item.name]} (env {env_name}; default: %(default)s)")
            continue
        parser.add_argument("--" + item.name.replace("_", "-"), dest=item.name, type=kind, default=default,
                            help=f"{_HELP[item.name]} (env {env_name}; default: %(default)s)")
    return parser


def parse_settings(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags (``argv`` without the program/command name) and the environment."""
    args = build_parser(environ).parse_args(list(argv))
    settings = Settings(**vars(args))
    problems = []
    if settings.max_message_mb < 1:
        problems.append("--max-message-mb must be >= 1")
    if settings.max_concurrency < 1:
        problems.append("--max-concurrency must be >= 1")
    if settings.max_queue < 1:
        problems.append("--max-queue must be >= 1")
    if bool(settings.tls_cert) != bool(settings.tls_key):
        problems.append("--tls-cert and --tls-key go together")
    if settings.tls_client_ca and not settings.tls_cert:
        problems.append("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
    for name in ("tls_cert", "tls_key", "tls_client_ca", "auth_tokens_file"):
        value = getattr(settings, name)
        if value and not Path(value).expanduser().is_file():
            problems.append(f"--{name.replace('_', '-')}: no such file {value!r}")
    if settings.threads < 1:
        problems.append("--threads must be >= 1")
    if settings.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        problems.append("--log-level must be DEBUG, INFO, WARNING or ERROR")
    try:
        settings.gpu_indices()
    except ValueError:
        problems.append(f"--gpus must be auto, none or indices like 0,1, got {settings.gpus!r}")
    if problems:
        raise SystemExit("tiledispatch serve: " + "; ".join(problems))
    return settings
