"""Messages of ``tiledispatch.v1`` to and from the core's types.

Incoming messages are validated here, completely, before the core sees them: a missing or wrong
field becomes :class:`~.errors.InvalidArgument` naming it as the request spells it
(``problem.batch``, ``tensors.first.data``).
"""

from __future__ import annotations

import math

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType, ProblemError
from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

from . import shm_inputs
from .catalog import KernelEntry
from .errors import InvalidArgument, invalid_problem
from .predictors import ModelDescription
from .selection import DEFAULT_TOP_K, Policy, Selection, SelectQuery, Source
from .service import (
    BenchmarkQuery,
    BenchmarkSummary,
    ListKernelsQuery,
    Measured,
    RunQuery,
    RunResult,
    ServerInfo,
)

SOURCE_TO_PROTO = {Source.TUNING_DB: pb.SELECTION_SOURCE_TUNING_DB, Source.MODEL: pb.SELECTION_SOURCE_MODEL,
                   Source.ANALYTIC: pb.SELECTION_SOURCE_ANALYTIC, Source.AUTOTUNE: pb.SELECTION_SOURCE_AUTOTUNE}
TARGET_TO_PROTO = {"gpu": pb.EXECUTION_TARGET_GPU, "cpu_reference": pb.EXECUTION_TARGET_CPU_REFERENCE}
KIND_TO_PROTO = {"trained": pb.MODEL_KIND_TRAINED, "analytic": pb.MODEL_KIND_ANALYTIC}


# ---- problems ------------------------------------------------------------------------------------
def problem_from_proto(message: pb.Problem, field: str = "problem") -> ConvProblem:
    """A validated :class:`ConvProblem`; unset fields are named, not defaulted (except stride,
    dilation and pads, which default to 1, 1, 0 when left empty, and the layout)."""
    values = codec.problem_from_proto(message)
    for name, number in (("direction", message.direction), ("dtype", message.dtype)):
        if values[name] is None:
            kind = pb.Direction if name == "direction" else pb.DataType
            rule = ("is required" if number == 0 else
                    f"unknown value {number}; one of {[n for n, _ in kind.items() if not n.endswith('UNSPECIFIED')]}")
            raise InvalidArgument(rule, field=f"{field}.{name}")
    if message.layout not in (pb.LAYOUT_UNSPECIFIED, pb.LAYOUT_NHWGC):
        raise InvalidArgument(f"unknown value {message.layout}; only LAYOUT_NHWGC", field=f"{field}.layout")
    for name in ("batch", "groups", "in_channels", "out_channels"):
        if values[name] == 0:
            raise InvalidArgument("is required (>= 1), got 0 or unset", field=f"{field}.{name}")
    for name in ("input_size", "filter_size"):
        if not values[name]:
            raise InvalidArgument("is required: 2 (H, W) or 3 (D, H, W) entries", field=f"{field}.{name}")
    ndim = len(values["input_size"])
    for name, default in (("stride", 1), ("dilation", 1), ("pad_begin", 0), ("pad_end", 0)):
        if not values[name]:
            values[name] = [default] * ndim
    try:
        return ConvProblem(**values)
    except ProblemError as error:
        raise invalid_problem(error, field) from None


def problem_to_proto(problem: ConvProblem) -> pb.Problem:
    return codec.problem_to_proto(problem.to_dict())


def _families(values, field: str) -> frozenset[Family]:
    out = set()
    for i, value in enumerate(values):
        name = codec.FAMILY_FROM_PROTO.get(value)
        if name is None:
            raise InvalidArgument(f"unknown or unspecified family {value}", field=f"{field}[{i}]")
        out.add(Family(name))
    return frozenset(out)


def _model_pin(message: pb.ModelRef | None, present: bool) -> tuple[str, str] | None:
    if not present:
        return None
    if not message.name:
        if message.version:
            raise InvalidArgument("a version without a name", field="model.name")
        return None
    return message.name, message.version


# ---- Select --------------------------------------------------------------------------------------
def select_query(request: pb.SelectRequest) -> SelectQuery:
    if not request.HasField("problem"):
        raise InvalidArgument("is required", field="problem")
    policy = codec.POLICY_FROM_PROTO.get(request.policy)
    if policy is None:
        raise InvalidArgument(f"unknown value {request.policy}", field="policy")
    return SelectQuery(problem=problem_from_proto(request.problem), policy=Policy(policy),
                       top_k=request.top_k or DEFAULT_TOP_K,
                       families=_families(request.families, "families"),
                       model=_model_pin(request.model, request.HasField("model")))


def candidate_to_proto(candidate) -> pb.Candidate:
    message = pb.Candidate(kernel=candidate.config.name, family=codec.FAMILY_TO_PROTO[candidate.config.family.value],
                           predicted_us=candidate.predicted_us)
    if candidate.measured_us is not None:
        message.measured_us = candidate.measured_us
    return message


def select_response(selection: Selection, top_k: int) -> pb.SelectResponse:
    return pb.SelectResponse(
        candidates=[candidate_to_proto(c) for c in selection.top(top_k)], source=SOURCE_TO_PROTO[selection.source],
        model=pb.ModelRef(name=selection.model_name, version=selection.model_version),
        candidates_considered=len(selection.candidates), problem_key=selection.problem_key, cached=selection.cached)


# ---- Run -----------------------------------------------------------------------------------------
_OPERAND_NAMES = {Direction.FORWARD: ("input", "weight"), Direction.BACKWARD_DATA: ("grad_output", "weight"),
                  Direction.BACKWARD_WEIGHT: ("input", "grad_output")}


def run_query(received: pb.RunRequest | codec.ParsedRunRequest, *, allow_shared_memory: bool = False,
              peer: str = "") -> RunQuery:
    """``received``: the message, or what :func:`codec.parse_run_request` made of it (the tensors'
    bytes then stay views into the received request: no copy here). Shared-memory inputs are read
    only where ``allow_shared_memory`` and ``peer`` (the caller's address) permit (:mod:`.shm_inputs`)."""
    request, views = ((received.message, received.data) if isinstance(received, codec.ParsedRunRequest)
                      else (received, {}))
    if not request.HasField("problem"):
        raise InvalidArgument("is required", field="problem")
    problem = problem_from_proto(request.problem)
    which = request.WhichOneof("inputs")
    if which is None:
        raise InvalidArgument("is required: either tensors or generate", field="inputs")
    if which == "generate":
        return RunQuery(problem, request.kernel, seed=request.generate.seed, return_inputs=request.return_inputs)
    if request.return_inputs:
        raise InvalidArgument("only with generate (the caller already has its tensors)", field="return_inputs")
    dtype_code = codec.DTYPE_TO_PROTO[problem.dtype.value]
    first_shape, second_shape, _ = problem.operand_shapes
    names = _OPERAND_NAMES[problem.direction]
    if which == "shared_memory":
        shm_inputs.check_allowed(allow_shared_memory, peer)
        inputs = shm_inputs.read_inputs(request.shared_memory, dtype_code, (first_shape, second_shape), names)
        return RunQuery(problem, request.kernel, inputs=inputs)
    arrays = []
    for slot, shape, role in (("first", first_shape, names[0]), ("second", second_shape, names[1])):
        if not request.tensors.HasField(slot):
            raise InvalidArgument(f"is required (the {role} tensor, shape {list(shape)})", field=f"tensors.{slot}")
        try:
            arrays.append(codec.decode_tensor(getattr(request.tensors, slot), field=f"tensors.{slot}",
                                              expected_dtype=dtype_code, expected_shape=shape, bf16="bits",
                                              data=views.get(slot)))
        except codec.TensorError as error:  # keep the field a path; say which operand it is in words
            raise InvalidArgument(f"{error.rule} (the {role} tensor)", field=error.field) from None
    return RunQuery(problem, request.kernel, inputs=(arrays[0], arrays[1]))


def _wire_tensor(message: pb.Tensor, array, dtype: DType) -> None:
    """Fill ``message`` in place (building a Tensor and copying it in would copy the bytes again)."""
    message.dtype = codec.DTYPE_TO_PROTO[dtype.value]
    message.shape.extend(int(s) for s in array.shape)
    message.data = array.tobytes()


def run_response(result: RunResult, dtype: DType) -> pb.RunResponse:
    response = pb.RunResponse(kernel=result.kernel, elapsed_us=result.elapsed_us,
                              executed_on=TARGET_TO_PROTO[result.executed_on])
    _wire_tensor(response.output, result.output, dtype)
    if result.selection_source is not None:
        response.selection_source = SOURCE_TO_PROTO[result.selection_source]
    if result.inputs is not None:
        _wire_tensor(response.inputs.first, result.inputs[0], dtype)
        _wire_tensor(response.inputs.second, result.inputs[1], dtype)
    return response


# ---- Benchmark -----------------------------------------------------------------------------------
def benchmark_query(request: pb.BenchmarkRequest) -> BenchmarkQuery:
    if not request.HasField("problem"):
        raise InvalidArgument("is required", field="problem")
    for name in ("top_k", "repeats"):
        if getattr(request, name) < 0:
            raise InvalidArgument(f"must be >= 0, got {getattr(request, name)}", field=name)
    for i, kernel in enumerate(request.kernels):
        if not kernel:
            raise InvalidArgument("is empty", field=f"kernels[{i}]")
    return BenchmarkQuery(problem=problem_from_proto(request.problem), kernels=tuple(request.kernels),
                          top_k=request.top_k, families=_families(request.families, "families"),
                          repeats=request.repeats)


def _number(value: float) -> float:
    return value if math.isfinite(value) else 0.0


def benchmark_event(event: Measured | BenchmarkSummary) -> pb.BenchmarkResponse:
    if isinstance(event, Measured):
        return pb.BenchmarkResponse(measurement=pb.KernelMeasurement(
            kernel=event.kernel, median_us=_number(event.median_us), min_us=_number(event.min_us),
            status=codec.STATUS_TO_PROTO.get(event.status, pb.MEASUREMENT_STATUS_ERROR),
            relative_error=_number(event.relative_error), message=event.message, index=event.index,
            total=event.total, predicted_us=event.predicted_us, graph_us=_number(event.graph_us)))
    return pb.BenchmarkResponse(summary=pb.BenchmarkSummary(
        oracle_kernel=event.oracle_kernel, oracle_us=event.oracle_us, selected_kernel=event.selected_kernel,
        selected_us=event.selected_us, selection_efficiency=event.selection_efficiency,
        selection_source=SOURCE_TO_PROTO[event.selection_source],
        model=pb.ModelRef(name=event.model_name, version=event.model_version), measured=event.measured,
        failed=event.failed, gpu_name=event.gpu_name))


# ---- listings ------------------------------------------------------------------------------------
def list_kernels_query(request: pb.ListKernelsRequest) -> ListKernelsQuery:
    direction = dtype = None
    if request.direction:
        if request.direction not in codec.DIRECTION_FROM_PROTO:
            raise InvalidArgument(f"unknown value {request.direction}", field="direction")
        direction = Direction(codec.DIRECTION_FROM_PROTO[request.direction])
    if request.dtype:
        if request.dtype not in codec.DTYPE_FROM_PROTO:
            raise InvalidArgument(f"unknown value {request.dtype}", field="dtype")
        dtype = DType(codec.DTYPE_FROM_PROTO[request.dtype])
    if request.ndim not in (0, 2, 3):
        raise InvalidArgument(f"must be 2, 3 or 0 (any), got {request.ndim}", field="ndim")
    problem = problem_from_proto(request.problem) if request.HasField("problem") else None
    if request.include_unsupported and problem is None:
        raise InvalidArgument("needs a problem to say what is unsupported", field="include_unsupported")
    return ListKernelsQuery(direction=direction, dtype=dtype, ndim=request.ndim,
                            families=_families(request.families, "families"), problem=problem,
                            include_unsupported=request.include_unsupported)


def kernel_info(config: KernelConfig, *, supported: bool = True, reason: str = "",
                quarantined: bool = False) -> pb.KernelInfo:
    c = config
    return pb.KernelInfo(
        name=c.name, direction=codec.DIRECTION_TO_PROTO[c.direction.value], dtype=codec.DTYPE_TO_PROTO[c.dtype.value],
        ndim=c.ndim, family=codec.FAMILY_TO_PROTO[c.family.value], block_m=c.block_m, block_n=c.block_n,
        block_k=c.block_k, num_warps=c.num_warps, num_stages=c.num_stages, group_m=c.group_m, split_k=c.split_k,
        merge=c.merge, vec=c.vec, index64=c.index64, supported=supported, reason=reason, quarantined=quarantined)


def list_kernels_response(entries: list[KernelEntry], source: str) -> pb.ListKernelsResponse:
    return pb.ListKernelsResponse(source=source, kernels=[
        kernel_info(e.config, supported=e.support is None or e.support.ok,
                    reason=e.support.reason if e.support is not None else "", quarantined=e.quarantined)
        for e in entries])


def model_info(model: ModelDescription) -> pb.ModelInfo:
    return pb.ModelInfo(
        name=model.name, version=model.version, kind=KIND_TO_PROTO.get(model.kind, pb.MODEL_KIND_UNSPECIFIED),
        arch=model.arch, dtypes=[codec.DTYPE_TO_PROTO[d] for d in model.dtypes if d in codec.DTYPE_TO_PROTO],
        directions=[codec.DIRECTION_TO_PROTO[d] for d in model.directions if d in codec.DIRECTION_TO_PROTO],
        feature_count=model.feature_count, description=model.description)


def list_models_response(models: list[ModelDescription]) -> pb.ListModelsResponse:
    return pb.ListModelsResponse(models=[model_info(m) for m in models])


def server_info_response(info: ServerInfo) -> pb.GetServerInfoResponse:
    v = info.versions
    return pb.GetServerInfoResponse(
        has_gpu=info.has_gpu, gpu_count=info.gpu_count, gpu_name=info.gpu_name, arch=info.arch,
        device_spec=info.device_spec, tiledispatch_version=v.get("tiledispatch", ""), torch_version=v.get("torch", ""),
        triton_version=v.get("triton", ""), cuda_version=v.get("cuda", ""), driver_version=v.get("driver", ""),
        python_version=v.get("python", ""), grpc_version=v.get("grpc", ""), registry_size=info.registry_size,
        registry_source=info.registry_source, models=[model_info(m) for m in info.models],
        quarantined_kernels=info.quarantined_kernels, tuning_db_rows=info.tuning_db_rows,
        max_message_bytes=info.max_message_bytes)
