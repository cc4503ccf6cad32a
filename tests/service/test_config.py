"""Settings: defaults, environment variables, flags winning over them, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiledispatch.server.config import parse_settings


def test_defaults(tmp_path):
    settings = parse_settings([], {"TILEDISPATCH_HOME": str(tmp_path)})
    assert (settings.host, settings.port, settings.metrics_port) == ("127.0.0.1", 50051, 9464)
    assert settings.db == tmp_path / "tuning.sqlite" and settings.registry_dir == tmp_path / "registry"
    assert settings.models_dir.name == "artifacts" and settings.gpu_indices() is None
    assert settings.max_message_bytes == 64 * 1024 * 1024


def test_environment_then_flags(tmp_path):
    env = {"TILEDISPATCH_PORT": "6000", "TILEDISPATCH_DB": str(tmp_path / "x.sqlite"), "TILEDISPATCH_GPUS": "0,2",
           "TILEDISPATCH_MAX_MESSAGE_MB": "8", "TILEDISPATCH_LOG_LEVEL": "DEBUG"}
    settings = parse_settings([], env)
    assert settings.port == 6000 and settings.db == Path(tmp_path / "x.sqlite") and settings.gpu_indices() == [0, 2]
    assert settings.max_message_bytes == 8 * 1024 * 1024 and settings.log_level == "DEBUG"
    settings = parse_settings(["--port", "7000", "--gpus", "none"], env)
    assert settings.port == 7000 and settings.gpu_indices() == []


@pytest.mark.parametrize("argv, env, words", [
    (["--max-message-mb", "0"], {}, "--max-message-mb"),
    (["--gpus", "all"], {}, "--gpus"),
    ([], {"TILEDISPATCH_PORT": "http"}, "TILEDISPATCH_PORT"),
    (["--log-level", "LOUD"], {}, "--log-level"),
])
def test_refusals(argv, env, words):
    with pytest.raises(SystemExit, match=words):
        parse_settings(argv, env)
