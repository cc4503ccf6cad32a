"""Fixtures of the hardening tests: a test PKI, token files, and hypothesis profiles."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from .certs import Pki, make_pki

# ci: a few hundred inputs per RPC (the default); deep: the slow-marked run's budget.
_COMMON = dict(deadline=None, database=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
settings.register_profile("ci", max_examples=200, **_COMMON)
settings.register_profile("deep", max_examples=1500, **_COMMON)
settings.load_profile(os.environ.get("TILEDISPATCH_HYPOTHESIS_PROFILE", "ci"))

RUN_TOKEN = "run-token-0123456789abcdef"
ADMIN_TOKEN = "admin-token-0123456789abcdef"
OPS_TOKEN = "ops-token-0123456789abcdef"


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def tokens_file(tmp_path_factory):
    """runner: run; admin: admin only (a digest, not the token); ops: both."""
    from tiledispatch.server.auth import digest

    path = tmp_path_factory.mktemp("auth") / "tokens"
    path.write_text("# name scopes token\n"
                    f"runner run {RUN_TOKEN}\n"
                    f"admin  admin sha256:{digest(ADMIN_TOKEN).hex()}\n"
                    f"ops    run,admin {OPS_TOKEN}   # operators\n")
    path.chmod(0o600)
    return path
