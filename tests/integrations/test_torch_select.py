"""Kernel selection of the framework integration: cache, the service's Select, and the local
fallback with its single WARNING line. Torch-free (the selector needs no framework)."""

from __future__ import annotations

import logging

import grpc
import pytest

from tiledispatch.client.client import Candidate, Selection
from tiledispatch.client.errors import UnavailableError, UnimplementedError
from tiledispatch.integrations.torch_select import KernelSelector, SelectionError
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.support import is_supported

PROBLEM = ConvProblem(direction="fwd", dtype="bf16", batch=8, groups=32, in_channels=128, out_channels=128,
                      input_size=(28, 28), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1),
                      pad_end=(1, 1))
LOGGER = "tiledispatch.integrations"
#: The local ranking of PROBLEM: the trained model shipped for (sm_90, bf16, fwd).
LOCAL_BF16_FWD = "local:lgbm-sm_90-bf16-fwd"


class FakeClient:
    """Answers Select with canned candidates or raises a canned error; counts calls."""

    target = "fake:1"

    def __init__(self, kernels=(), error=None):
        self.kernels, self.error, self.calls = list(kernels), error, 0

    def select(self, problem, *, top_k, timeout):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return Selection(tuple(Candidate(k, "", 1.0) for k in self.kernels), "model", ("m", "1"),
                         len(self.kernels), "", False)


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == LOGGER]


def test_local_mode_ranks_supported_kernels_and_caches(monkeypatch):
    monkeypatch.delenv("TILEDISPATCH_TARGET", raising=False)
    selector = KernelSelector()
    assert selector.mode == "local"
    choice = selector.select(PROBLEM)
    # bf16 forward on sm_90: the shipped trained model ranks it.
    assert choice.source == f"local:lgbm-sm_90-{PROBLEM.dtype.value}-fwd" and is_supported(PROBLEM, choice.config)
    assert choice.config == selector.rank_local(PROBLEM)[0][0]
    again = selector.select(PROBLEM)
    assert again is choice
    stats = selector.stats.as_dict()
    assert stats["uncached"] == 1 and stats["cached"] == 1
    other = selector.select(PROBLEM.with_direction("bwd_weight"))
    assert other.config.direction.value == "bwd_weight"


def test_remote_choice_is_the_first_runnable_candidate():
    runnable = [c for c in rule_set_configs("default", directions=["fwd"], dtypes=["bf16"], ndims=[2])
                if is_supported(PROBLEM, c)]
    unsupported = next(c for c in rule_set_configs("default", directions=["fwd"], dtypes=["bf16"], ndims=[2])
                       if not is_supported(PROBLEM, c))
    client = FakeClient(["not-a-kernel", unsupported.name, runnable[3].name, runnable[0].name])
    selector = KernelSelector(client=client)
    assert selector.mode == "remote"
    choice = selector.select(PROBLEM)
    assert choice.config == runnable[3] and choice.source == "remote:model"
    selector.select(PROBLEM)
    assert client.calls == 1  # cached


def test_unreachable_service_falls_back_locally_with_one_warning(caplog):
    client = FakeClient(error=UnavailableError(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses"))
    selector = KernelSelector(client=client, retry_after_s=3600)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        first = selector.select(PROBLEM)
        for direction in ("bwd_data", "bwd_weight"):
            selector.select(PROBLEM.with_direction(direction))
    assert first.source == LOCAL_BF16_FWD
    assert client.calls == 1  # not retried before retry_after_s
    lines = _warnings(caplog)
    assert len(lines) == 1 and "unreachable" in lines[0] and "locally" in lines[0], lines


def test_service_comes_back_after_retry_interval(caplog):
    client = FakeClient(error=UnavailableError(grpc.StatusCode.UNAVAILABLE, "down"))
    selector = KernelSelector(client=client, retry_after_s=0.0)
    selector.select(PROBLEM)
    runnable = next(c for c in rule_set_configs("default", directions=["bwd_data"], dtypes=["bf16"], ndims=[2])
                    if is_supported(PROBLEM.with_direction("bwd_data"), c))
    client.error, client.kernels = None, [runnable.name]
    with caplog.at_level(logging.INFO, logger=LOGGER):
        choice = selector.select(PROBLEM.with_direction("bwd_data"))
    assert choice.source == "remote:model"
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_other_service_errors_fall_back_per_problem(caplog):
    client = FakeClient(error=UnimplementedError(grpc.StatusCode.UNIMPLEMENTED, "no kernel"))
    selector = KernelSelector(client=client)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        selector.select(PROBLEM)
        selector.select(PROBLEM.with_direction("bwd_data"))
    assert client.calls == 2  # the service is still asked for each new problem
    assert len(_warnings(caplog)) == 1


def test_candidates_outside_the_local_pool_are_skipped(caplog):
    pool = [c for c in rule_set_configs("default", directions=["fwd"], dtypes=["bf16"], ndims=[2])
            if c.family.value == "igemm"]
    elsewhere = next(c for c in rule_set_configs("default", directions=["fwd"], dtypes=["bf16"], ndims=[2])
                     if c.family.value == "direct" and is_supported(PROBLEM, c))
    selector = KernelSelector(client=FakeClient([elsewhere.name]), pool=pool)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        choice = selector.select(PROBLEM)
    assert choice.config in pool and choice.source == LOCAL_BF16_FWD
    assert len(_warnings(caplog)) == 1


def test_no_runnable_kernel_is_a_clear_error():
    selector = KernelSelector(mode="local", pool=[])
    with pytest.raises(SelectionError, match="no kernel"):
        selector.select(PROBLEM)


def test_unreachable_real_target_fails_fast(caplog):
    """A real gRPC channel to a closed port: UNAVAILABLE within the deadline, then local."""
    from tests.service.harness import free_port

    selector = KernelSelector(f"127.0.0.1:{free_port()}", timeout_s=2.0)
    selector.predictor_for(PROBLEM)  # the shipped models load once per process: not the fallback's time
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        choice = selector.select(PROBLEM)
    assert choice.source == LOCAL_BF16_FWD and choice.seconds < 2.5
    assert len(_warnings(caplog)) == 1


def test_select_through_a_running_service(tmp_path):
    from tests.service.harness import in_process_server, settings_for

    with in_process_server(settings_for(tmp_path)) as (port, _):
        selector = KernelSelector(f"127.0.0.1:{port}", timeout_s=10.0)
        for direction in ("fwd", "bwd_data", "bwd_weight"):
            choice = selector.select(PROBLEM.with_direction(direction))
            assert choice.source.startswith("remote:"), choice.source
            assert is_supported(PROBLEM.with_direction(direction), choice.config)


def test_local_ranking_falls_back_to_the_analytic_model_where_no_trained_model_covers(monkeypatch, tmp_path):
    monkeypatch.delenv("TILEDISPATCH_TARGET", raising=False)
    fp32 = ConvProblem(**{**PROBLEM.to_dict(), "dtype": "fp32"})
    assert KernelSelector().select(fp32).source == "local:analytic"  # no fp32 model ships
    monkeypatch.setenv("TILEDISPATCH_MODELS_DIR", str(tmp_path))  # an empty models folder
    assert KernelSelector().select(PROBLEM).source == "local:analytic"
