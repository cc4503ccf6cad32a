"""deploy/ validated without a cluster: each step of scripts/check_deploy.sh (promtool on the
rules and config with unit tests of the alerts; helm lint and the rendered templates against the
Kubernetes schemas; the dashboard; hadolint on the Dockerfile; the compose file's schema)."""

from __future__ import annotations

import pytest

from .conftest import check_deploy


@pytest.mark.parametrize("step", ["prometheus", "helm", "dashboard", "dockerfile", "compose"])
def test_check_deploy_step(deploy_tools, step):
    done = check_deploy(step)
    assert done.returncode == 0, f"check_deploy.sh {step}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
