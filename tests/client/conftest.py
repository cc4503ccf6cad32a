"""Fixtures of the client tests: an in-process server without a GPU."""

from __future__ import annotations

import pytest

from tests.service.harness import in_process_server, settings_for


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    settings = settings_for(tmp_path_factory.mktemp("client"))
    with in_process_server(settings) as (port, _):
        yield f"127.0.0.1:{port}"
