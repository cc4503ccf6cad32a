"""The service in-process, on a host without a GPU: every RPC, its errors, and that bad requests
change nothing."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from tiledispatch.client import Client, Problem
from tiledispatch.client.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    TileDispatchError,
)
from tiledispatch.native.problem import ConvProblem
from tiledispatch.native.reference import run_reference
from tiledispatch.server.metrics import Metrics
from tiledispatch.server.servicer import Servicer
from tiledispatch.server.tuning_db import TuningDB
from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb
from tiledispatch.v1 import tiledispatch_pb2_grpc as pb_grpc

from .conftest import TINY


@pytest.fixture(scope="module")
def client(cpu_server):
    port, _ = cpu_server
    with Client(f"127.0.0.1:{port}", timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def stub(cpu_server):
    port, _ = cpu_server
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield pb_grpc.TileDispatchServiceStub(channel)


def db_rows(settings) -> int:
    db = TuningDB(settings.db)
    try:
        return db.count()
    finally:
        db.close()


def test_info_without_gpu(client):
    info = client.info()
    assert info["has_gpu"] is False and info["gpu_count"] == 0 and info["gpu_name"] == ""
    assert info["arch"] == "sm_90" and info["device_spec"] == "h200"
    assert info["registry_source"] == "rule_set:default" and info["registry_size"] > 300
    assert info["tiledispatch_version"] and info["grpc_version"] and info["python_version"]
    assert [m["name"] for m in info["models"]] == ["analytic"]


def test_select(client):
    selection = client.select(Problem(**TINY), top_k=3)
    assert len(selection.candidates) == 3 and selection.source == "analytic"
    assert selection.model == ("analytic", "1") and selection.candidates_considered >= 3
    assert selection.problem_key == ConvProblem(**TINY).key
    times = [c.predicted_us for c in selection.candidates]
    assert times == sorted(times)
    assert client.select(dict(TINY), top_k=3).cached


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_run_on_cpu_reference_matches_the_reference(client, direction, dtype):
    fields = {**TINY, "direction": direction, "dtype": dtype}
    result = client.run(fields, generate_inputs=True, seed=7, return_inputs=True)
    assert result.executed_on == "cpu_reference" and result.selection_source == "analytic"
    problem = ConvProblem(**fields)
    first, second = result.inputs
    assert first.shape == problem.operand_shapes[0] and second.shape == problem.operand_shapes[1]
    assert np.std(first) > 0.5  # generated inputs are never zeros
    expected = run_reference(problem, first.astype(np.float64), second.astype(np.float64))
    assert result.output.shape == problem.operand_shapes[2]
    tolerance = {"bf16": 2**-8, "fp16": 2**-11, "fp32": 1e-6}[dtype]
    assert np.allclose(result.output, expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())
    again = client.run(fields, generate_inputs=True, seed=7)
    assert np.array_equal(again.output, result.output)  # same seed, same inputs, same answer


def test_run_with_tensors_and_a_named_kernel(client):
    problem = ConvProblem(**{**TINY, "dtype": "fp16"})
    rng = np.random.default_rng(3)
    first, second = (rng.standard_normal(shape).astype(np.float16) for shape in problem.operand_shapes[:2])
    kernel = client.select(problem.to_dict(), top_k=2).candidates[1].kernel
    result = client.run(problem.to_dict(), (first, second), kernel=kernel)
    assert result.kernel == kernel and result.selection_source == ""
    expected = run_reference(problem, first.astype(np.float64), second.astype(np.float64))
    assert np.allclose(result.output, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())


def test_run_bf16_bits_in_and_out(client):
    problem = ConvProblem(**TINY)
    rng = np.random.default_rng(4)
    first, second = (codec.float_to_bf16_bits(rng.standard_normal(s).astype(np.float32))
                     for s in problem.operand_shapes[:2])
    bits = client.run(problem.to_dict(), (first, second), bf16="bits").output
    values = client.run(problem.to_dict(), (codec.bf16_bits_to_float(first), codec.bf16_bits_to_float(second)))
    assert bits.dtype == np.uint16 and np.array_equal(codec.bf16_bits_to_float(bits), values.output)


def test_list_kernels(client):
    everything = client.list_kernels()
    assert len(everything) == client.info()["registry_size"]
    fwd_2d = client.list_kernels(direction="fwd", dtype="bf16", ndim=2, families=["direct"])
    assert fwd_2d and all(k["direction"] == "fwd" and k["ndim"] == 2 and k["family"] == "direct" for k in fwd_2d)
    supported = client.list_kernels(problem=TINY)
    assert supported and all(k["supported"] for k in supported)
    with_reasons = client.list_kernels(problem=TINY, include_unsupported=True)
    unsupported = [k for k in with_reasons if not k["supported"]]
    assert len(with_reasons) == len(supported) + len(unsupported) and unsupported
    assert all(k["reason"] for k in unsupported)
    assert any("v8 alignment" in k["reason"] for k in unsupported)


def test_list_models(client):
    (model,) = client.list_models()
    assert model["name"] == "analytic" and model["kind"] == "analytic"
    assert set(model["dtypes"]) == {"bf16", "fp16", "fp32"} and len(model["directions"]) == 3


def test_gpu_only_calls_fail_precondition(client, cpu_server):
    _, settings = cpu_server
    rows = db_rows(settings)
    with pytest.raises(FailedPreconditionError, match="GPU"):
        list(client.benchmark(TINY))
    with pytest.raises(FailedPreconditionError, match="GPU") as caught:
        client.select(TINY, policy="autotune")
    assert caught.value.field == "policy"
    assert db_rows(settings) == rows


# ---- bad requests: every RPC, the right code, the field named, nothing changed --------------------
def _problem(**changes) -> pb.Problem:
    return codec.problem_to_proto({**TINY, **changes})


def _without(field: str) -> pb.Problem:
    return codec.problem_to_proto({k: v for k, v in TINY.items() if k != field})


BAD = [
    ("Select", pb.SelectRequest(), grpc.StatusCode.INVALID_ARGUMENT, "problem"),
    ("Select", pb.SelectRequest(problem=_without("batch")), grpc.StatusCode.INVALID_ARGUMENT, "problem.batch"),
    ("Select", pb.SelectRequest(problem=_without("direction")), grpc.StatusCode.INVALID_ARGUMENT,
     "problem.direction"),
    ("Select", pb.SelectRequest(problem=_without("input_size")), grpc.StatusCode.INVALID_ARGUMENT,
     "problem.input_size"),
    ("Select", pb.SelectRequest(problem=_problem(batch=-4)), grpc.StatusCode.INVALID_ARGUMENT, "problem.batch"),
    ("Select", pb.SelectRequest(problem=_problem(in_channels=7)), grpc.StatusCode.INVALID_ARGUMENT,
     "problem.in_channels"),
    ("Select", pb.SelectRequest(problem=_problem(filter_size=(9, 2))), grpc.StatusCode.INVALID_ARGUMENT,
     "problem.filter_size[0]"),
    ("Select", pb.SelectRequest(problem=_problem(), top_k=-1), grpc.StatusCode.INVALID_ARGUMENT, "top_k"),
    ("Select", pb.SelectRequest(problem=_problem(), model=pb.ModelRef(name="nope")), grpc.StatusCode.NOT_FOUND,
     "model"),
    ("Select", pb.SelectRequest(problem=_problem(), policy=pb.SELECTION_POLICY_MODEL_ONLY),
     grpc.StatusCode.NOT_FOUND, "model"),
    ("Select", pb.SelectRequest(problem=_problem(), families=[pb.FAMILY_GEMM1X1]), grpc.StatusCode.UNIMPLEMENTED,
     "problem"),
    ("Run", pb.RunRequest(problem=_problem()), grpc.StatusCode.INVALID_ARGUMENT, "inputs"),
    ("Run", pb.RunRequest(problem=_problem(groups=0), generate=pb.GenerateInputs()),
     grpc.StatusCode.INVALID_ARGUMENT, "problem.groups"),
    ("Run", pb.RunRequest(problem=_problem(), kernel="gconv_nope", generate=pb.GenerateInputs()),
     grpc.StatusCode.NOT_FOUND, "kernel"),
    ("Run", pb.RunRequest(problem=_problem(), kernel="gconv_fwd_bf16_2d_igemm_64x64x32_w4_s4_gm8_sk1_mg1_v8_i32",
                          generate=pb.GenerateInputs()), grpc.StatusCode.INVALID_ARGUMENT, "kernel"),
    ("Run", pb.RunRequest(problem=_problem(batch=64, groups=1, in_channels=256, out_channels=256,
                                           input_size=(112, 112), filter_size=(3, 3)),
                          generate=pb.GenerateInputs()), grpc.StatusCode.RESOURCE_EXHAUSTED, "problem"),
    ("Run", pb.RunRequest(problem=_problem(batch=1, groups=1, in_channels=2048, out_channels=2048,
                                           input_size=(32, 32), filter_size=(3, 3)),
                          generate=pb.GenerateInputs()), grpc.StatusCode.RESOURCE_EXHAUSTED, "problem"),
    ("Run", pb.RunRequest(problem=_problem(), tensors=pb.RunInputs(
        first=pb.Tensor(dtype=pb.DATA_TYPE_BF16, shape=[2, 5, 6, 3, 2], data=bytes(10)),
        second=pb.Tensor(dtype=pb.DATA_TYPE_BF16, shape=[3, 3, 3, 2, 2], data=bytes(216)))),
     grpc.StatusCode.INVALID_ARGUMENT, "tensors.first.data"),
    ("Run", pb.RunRequest(problem=_problem(), tensors=pb.RunInputs(
        first=pb.Tensor(dtype=pb.DATA_TYPE_BF16, shape=[2, 5, 6, 3, 2], data=bytes(720)))),
     grpc.StatusCode.INVALID_ARGUMENT, "tensors.second"),
    ("Benchmark", pb.BenchmarkRequest(), grpc.StatusCode.INVALID_ARGUMENT, "problem"),
    ("Benchmark", pb.BenchmarkRequest(problem=_problem(stride=(0, 1))), grpc.StatusCode.INVALID_ARGUMENT,
     "problem.stride[0]"),
    ("Benchmark", pb.BenchmarkRequest(problem=_problem(), repeats=-1), grpc.StatusCode.INVALID_ARGUMENT, "repeats"),
    ("ListKernels", pb.ListKernelsRequest(ndim=4), grpc.StatusCode.INVALID_ARGUMENT, "ndim"),
    ("ListKernels", pb.ListKernelsRequest(include_unsupported=True), grpc.StatusCode.INVALID_ARGUMENT,
     "include_unsupported"),
    ("ListKernels", pb.ListKernelsRequest(problem=_problem(out_channels=0)), grpc.StatusCode.INVALID_ARGUMENT,
     "problem.out_channels"),
]


@pytest.mark.parametrize("method, request_, code, field", BAD, ids=[f"{m}-{f}-{c.name}" for m, _, c, f in BAD])
def test_bad_request(stub, cpu_server, method, request_, code, field):
    _, settings = cpu_server
    rows = db_rows(settings)
    call = getattr(stub, method)
    with pytest.raises(grpc.RpcError) as caught:
        response = call(request_, timeout=30)
        if method == "Benchmark":
            list(response)
    error = caught.value
    assert error.code() == code, error.details()
    assert error.details().startswith(field + ":"), error.details()
    trailing = dict(error.trailing_metadata() or ())
    assert trailing.get(codec.FIELD_METADATA_KEY) == field
    assert db_rows(settings) == rows


def test_typed_client_errors(client):
    with pytest.raises(InvalidArgumentError) as caught:
        client.select({**TINY, "in_channels": 7})
    assert caught.value.field == "problem.in_channels" and caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(NotFoundError):
        client.run(TINY, kernel="gconv_fwd_bf16_2d_igemm_64x64x32_w4_s4_gm8_sk1_mg1_v1_i64x", generate_inputs=True)
    with pytest.raises(ResourceExhaustedError):
        client.run({**TINY, "batch": 4096, "input_size": (64, 64)}, generate_inputs=True)
    with pytest.raises(TileDispatchError) as caught:
        client.run(TINY, (np.zeros((1, 2)), np.zeros((1, 2))))
    assert caught.value.field == "tensors.first.shape"


# ---- admission (the servicer alone) --------------------------------------------------------------
class _Context:
    def __init__(self):
        self.aborted = None

    async def abort(self, code, details, trailing_metadata=()):
        self.aborted = (code, details)
        raise grpc.aio.AbortError()


def _admission(servicer: Servicer) -> tuple:
    async def call():
        context = _Context()
        with pytest.raises(grpc.aio.AbortError):
            await servicer.ListModels(pb.ListModelsRequest(), context)
        return context.aborted

    return asyncio.run(call())


def test_unavailable_until_loaded_and_busy_when_full():
    metrics = Metrics()
    with ThreadPoolExecutor(1) as executor:
        servicer = Servicer(metrics, executor, executor, max_concurrency=2)
        code, details = _admission(servicer)
        assert code == grpc.StatusCode.UNAVAILABLE and "starting" in details
        servicer.dispatcher = object()
        servicer._inflight = 2
        code, details = _admission(servicer)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-concurrency" in details
        servicer.closing = True
        assert _admission(servicer)[0] == grpc.StatusCode.UNAVAILABLE
    samples = {(s.labels["method"], s.labels["code"]): s.value
               for s in metrics.rpc_requests.collect()[0].samples if s.name.endswith("_total")}
    assert samples[("ListModels", "UNAVAILABLE")] == 2 and samples[("ListModels", "RESOURCE_EXHAUSTED")] == 1
