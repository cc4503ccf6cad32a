"""Issue 7.2: fuzzing every RPC with hypothesis (valid, boundary and hostile requests, and raw bytes
that are no message at all). The server never crashes, answers every call well within its deadline,
and with the status the oracle of :mod:`.fuzz_strategies` expects. The number of inputs tried per
RPC is written to ``bench/results/fuzz_report.json`` when ``TILEDISPATCH_WRITE_REPORTS=1`` (else to a
temporary folder).

The CI run tries a few hundred inputs per RPC (hypothesis profile ``ci``); the ``slow``-marked deep
run tries several times more.
"""

from __future__ import annotations

import collections
import json
import os
import platform
import time
from pathlib import Path

import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.harness import FAKE_HANDLER, settings_for
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.v1 import tiledispatch_pb2 as pb

from . import fuzz_strategies as fs
from .servers import report_path, running_server, serving

REPO = Path(__file__).resolve().parents[2]
REPORT = report_path("fuzz_report.json")
DEADLINE_S = 20.0
#: Every answer must come this fast (the deadline is a safety net, not the expectation).
MAX_LATENCY_S = 10.0
SERVICE = "/tiledispatch.v1.TileDispatchService/"
MESSAGES = {"Select": pb.SelectRequest, "Run": pb.RunRequest, "Benchmark": pb.BenchmarkRequest,
            "ListKernels": pb.ListKernelsRequest, "ListModels": pb.ListModelsRequest,
            "GetServerInfo": pb.GetServerInfoRequest, "LiftQuarantine": pb.LiftQuarantineRequest}
KERNELS = [c.name for c in rule_set_configs("default", "sm_90")]

_tally: dict[str, dict] = collections.defaultdict(lambda: {"tried": 0, "codes": collections.Counter(),
                                                           "kinds": collections.Counter(), "max_s": 0.0})


@pytest.fixture(scope="module")
def cpu(tmp_path_factory):
    """No GPU: Run on the CPU reference (capped small), Benchmark refused."""
    settings = settings_for(tmp_path_factory.mktemp("fuzz-cpu"), max_message_mb=4, cpu_reference_max_gflop=0.05)
    with running_server(settings) as port, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield port, channel


@pytest.fixture(scope="module")
def gpu(tmp_path_factory):
    """A fake GPU worker: Benchmark measures (and records) for real."""
    settings = settings_for(tmp_path_factory.mktemp("fuzz-gpu"), gpus="0", worker_handler=FAKE_HANDLER,
                            kernel_timeout_s=10.0, max_message_mb=4)
    with running_server(settings) as port, grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield port, channel


@pytest.fixture(scope="module", autouse=True)
def report():
    yield
    write_report()


def write_report() -> None:
    profile = os.environ.get("TILEDISPATCH_HYPOTHESIS_PROFILE", "ci")
    data = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    runs = data.setdefault("runs", {})
    for rpc, entry in _tally.items():
        runs.setdefault(profile, {})[rpc] = {"inputs_tried": entry["tried"], "codes": dict(entry["codes"]),
                                             "kinds": dict(entry["kinds"]), "max_latency_s": round(entry["max_s"], 3)}
    data["total_inputs_tried"] = {name: sum(r["inputs_tried"] for r in run.values()) for name, run in runs.items()}
    data["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "system": platform.platform(),
                       "grpc": grpc.__version__}
    data["note"] = ("hypothesis inputs per RPC against in-process servers on loopback; every answer's code was in "
                    "the oracle's allowed set, none INTERNAL/UNKNOWN/UNAVAILABLE/DEADLINE_EXCEEDED")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def call(channel: grpc.Channel, rpc: str, request, *, raw: bool = False) -> str:
    """The status code name of one call, timed and tallied."""
    streaming = rpc == "Benchmark"
    serializer = None if raw else type(request).SerializeToString
    method = (channel.unary_stream if streaming else channel.unary_unary)(SERVICE + rpc, request_serializer=serializer,
                                                                           response_deserializer=None)
    start = time.monotonic()
    try:
        answer = method(request, timeout=DEADLINE_S)
        if streaming:
            list(answer)
        code = "OK"
    except grpc.RpcError as error:
        code = error.code().name
    elapsed = time.monotonic() - start
    entry = _tally[rpc + (" (raw bytes)" if raw else "")]
    entry["tried"] += 1
    entry["codes"][code] += 1
    entry["max_s"] = max(entry["max_s"], elapsed)
    assert elapsed < MAX_LATENCY_S, f"{rpc} took {elapsed:.1f}s"
    return code


def check(channel, rpc: str, case: fs.Case) -> None:
    _tally[rpc]["kinds"][case.kind] += 1
    code = call(channel, rpc, case.request)
    assert code in case.allowed, f"{rpc} answered {code}, expected {sorted(case.allowed)} for {case.kind}: " \
                                 f"{str(case.request)[:1500]}"


def fuzz(strategy, examples: int | None):
    """``fn(case)`` run under hypothesis over ``strategy`` (``examples``: override the profile)."""
    def decorate(fn):
        test = given(strategy)(fn)
        return settings(max_examples=examples)(test) if examples else test

    return decorate


def fuzz_all(cpu, gpu, examples: int | None = None) -> None:
    _, cpu_channel = cpu
    _, gpu_channel = gpu

    @fuzz(fs.select_cases(), examples)
    def select(case):
        check(cpu_channel, "Select", case)

    @fuzz(fs.run_cases(), examples)
    def run(case):
        check(cpu_channel, "Run", case)

    @fuzz(fs.benchmark_cases(KERNELS), examples)
    def benchmark(case):
        check(gpu_channel, "Benchmark", case)

    @fuzz(fs.list_kernels_cases(), examples)
    def list_kernels(case):
        check(cpu_channel, "ListKernels", case)

    @fuzz(fs.lift_quarantine_cases(KERNELS), examples)
    def lift(case):
        check(cpu_channel, "LiftQuarantine", case)

    @fuzz(st.sampled_from(["ListModels", "GetServerInfo"]).flatmap(
        lambda rpc: st.tuples(st.just(rpc), st.binary(max_size=64))), examples)
    def empty_requests(item):
        rpc, extra = item  # unknown fields appended to an empty message are ignored, or refused if malformed
        try:
            MESSAGES[rpc].FromString(extra)
            allowed = {"OK"}
        except Exception:
            allowed = {"INVALID_ARGUMENT"}
        code = call(cpu_channel, rpc, extra, raw=True)
        assert code in allowed, (rpc, extra, code)

    @fuzz(st.tuples(st.sampled_from(sorted(MESSAGES)), fs.raw_bytes()), examples)
    def raw(item):
        rpc, data = item
        try:
            MESSAGES[rpc].FromString(data)
            allowed = fs.CLEAN
        except Exception:
            allowed = {"INVALID_ARGUMENT"}  # not INTERNAL: the server says the request is malformed
        code = call(gpu_channel if rpc == "Benchmark" else cpu_channel, rpc, data, raw=True)
        assert code in allowed, (rpc, data[:100], code)

    for test in (select, run, benchmark, list_kernels, lift, empty_requests, raw):
        test()
    for port, _ in (cpu, gpu):
        assert serving(port), "the server stopped SERVING under fuzzing"


def test_fuzz_every_rpc(cpu, gpu):
    fuzz_all(cpu, gpu)
    tried = {rpc: entry["tried"] for rpc, entry in _tally.items()}
    assert all(n >= 50 for rpc, n in tried.items() if "raw" not in rpc), tried
    assert sum(n for rpc, n in tried.items() if "raw" in rpc) >= 200, tried
    assert set(MESSAGES) <= {rpc.split(" ")[0] for rpc in tried}


def test_missing_problem_and_empty_requests(cpu, gpu):
    for rpc, request, channel in (("Select", pb.SelectRequest(), cpu[1]), ("Run", pb.RunRequest(), cpu[1]),
                                  ("Benchmark", pb.BenchmarkRequest(), gpu[1]),
                                  ("Run", pb.RunRequest(problem=fs.to_proto(
                                      {"direction": 1, "dtype": 1, "batch": 1, "groups": 1, "in_channels": 1,
                                       "out_channels": 1, "input_size": [2, 2], "filter_size": [1, 1]})), cpu[1])):
        assert call(channel, rpc, request) == "INVALID_ARGUMENT", rpc


@pytest.mark.slow
def test_fuzz_every_rpc_deeply(cpu, gpu):
    """The deep run: 1500 inputs per RPC strategy (about 10k in all)."""
    fuzz_all(cpu, gpu, examples=int(os.environ.get("TILEDISPATCH_FUZZ_DEEP_EXAMPLES", "1500")))


def test_huge_error_details_are_clipped(cpu):
    """Found by the deep run: an error quoting a 100k-entry shape made a status message of 300 KB,
    which clients refuse as a header (they saw RESOURCE_EXHAUSTED); the server now clips it."""
    request = pb.RunRequest(problem=fs.to_proto({"direction": 1, "dtype": 1, "batch": 1, "groups": 1,
                                                 "in_channels": 1, "out_channels": 1, "input_size": [1, 1],
                                                 "filter_size": [1, 1]}))
    request.tensors.first.CopyFrom(pb.Tensor(dtype=1, shape=[1] * 100_000, data=b"\0\0"))
    request.tensors.second.CopyFrom(pb.Tensor(dtype=1, shape=[1] * 5, data=b"\0\0"))
    assert call(cpu[1], "Run", request) == "INVALID_ARGUMENT"
