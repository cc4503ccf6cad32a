"""The deploy checks' tools (scripts/check_deploy.sh install): helm, promtool, kubernetes-validate,
hadolint, check-jsonschema. In CI (``CI`` set) a tool that cannot be installed fails the tests;
elsewhere they are skipped with the reason."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check_deploy.sh"


def check_deploy(*steps: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *steps], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="session")
def deploy_tools() -> None:
    done = check_deploy("install")
    if done.returncode != 0:
        message = f"scripts/check_deploy.sh install failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
