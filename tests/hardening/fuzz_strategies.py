"""Hypothesis strategies over every request message of ``tiledispatch.v1``: valid, boundary and
hostile inputs, each with the status codes a correct server may answer.

The expectation comes from an oracle that is not the server's request conversion: the native
:class:`ConvProblem` decides whether a problem is valid, and each deliberately broken field says
which code it must cause. Random mixtures that no single rule predicts may get any *clean* code
(:data:`CLEAN`): never INTERNAL, UNKNOWN, UNAVAILABLE or DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from tiledispatch.native.problem import ConvProblem, ProblemError
from tiledispatch.v1 import codec
from tiledispatch.v1 import tiledispatch_pb2 as pb

OK, INVALID, NOT_FOUND, PRECONDITION, EXHAUSTED, UNIMPLEMENTED = (
    "OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED")
CLEAN = frozenset({OK, INVALID, NOT_FOUND, PRECONDITION, EXHAUSTED, UNIMPLEMENTED})
INT64 = st.integers(-(2 ** 63), 2 ** 63 - 1)
INT32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
BOUNDARY = st.sampled_from([0, 1, -1, 2, 2 ** 31 - 1, 2 ** 31, 2 ** 32 + 1, 2 ** 48, 2 ** 62, 2 ** 63 - 1, -(2 ** 63)])
SPATIAL = ("input_size", "filter_size", "stride", "dilation", "pad_begin", "pad_end")
SCALARS = ("batch", "groups", "in_channels", "out_channels")


@dataclass(frozen=True)
class Case:
    request: object
    allowed: frozenset[str]
    kind: str


def oracle(fields: dict) -> ConvProblem | None:
    """The problem the fields describe if it is valid, else ``None`` (decided by the native model)."""
    direction = codec.DIRECTION_FROM_PROTO.get(fields["direction"])
    dtype = codec.DTYPE_FROM_PROTO.get(fields["dtype"])
    if direction is None or dtype is None or fields.get("layout", 0) not in (0, 1):
        return None
    if any(fields[name] == 0 for name in SCALARS) or not fields["input_size"] or not fields["filter_size"]:
        return None
    values = {name: fields[name] for name in SCALARS}
    ndim = len(fields["input_size"])
    for name, default in zip(SPATIAL, (None, None, 1, 1, 0, 0)):
        values[name] = list(fields[name]) or [default] * ndim
    try:
        return ConvProblem(direction=direction, dtype=dtype, **values)
    except (ProblemError, ValueError, OverflowError):
        return None


@st.composite
def valid_fields(draw) -> dict:
    ndim = draw(st.sampled_from([2, 2, 2, 3]))
    groups = draw(st.integers(1, 4))
    fields = {"direction": draw(st.sampled_from([1, 2, 3])), "dtype": draw(st.sampled_from([1, 2, 3])),
              "batch": draw(st.integers(1, 2)), "groups": groups,
              "in_channels": groups * draw(st.integers(1, 4)), "out_channels": groups * draw(st.integers(1, 4)),
              "layout": draw(st.sampled_from([0, 1]))}
    top = 6 if ndim == 2 else 3
    fields["input_size"] = draw(st.lists(st.integers(1, top), min_size=ndim, max_size=ndim))
    fields["filter_size"] = draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim))
    for name, low, high in (("stride", 1, 2), ("dilation", 1, 2), ("pad_begin", 0, 2), ("pad_end", 0, 2)):
        fields[name] = draw(st.one_of(st.just([]), st.lists(st.integers(low, high), min_size=ndim, max_size=ndim)))
    return fields


@st.composite
def boundary_fields(draw) -> dict:
    """A valid problem with one or two fields pushed to a boundary (0, -1, 2^31, 2^63-1, ...)."""
    fields = draw(valid_fields())
    for _ in range(draw(st.integers(1, 2))):
        name = draw(st.sampled_from([*SCALARS, *SPATIAL, "direction", "dtype", "layout"]))
        if name in SPATIAL:
            length = draw(st.sampled_from([0, 1, 2, 3, 4]))
            fields[name] = draw(st.lists(BOUNDARY, min_size=length, max_size=length))
        elif name in SCALARS:
            fields[name] = draw(BOUNDARY)
        else:
            fields[name] = draw(st.one_of(st.integers(0, 5), INT32))
    return fields


@st.composite
def hostile_fields(draw) -> dict:
    """Anything the wire can carry: huge values whose products overflow 64 bits, negative sizes,
    unknown enum values, long repeated fields."""
    value = st.one_of(INT64, BOUNDARY)
    length = st.one_of(st.integers(0, 6), st.sampled_from([64, 4096]))
    fields = {name: draw(value) for name in SCALARS}
    for name in SPATIAL:
        count = draw(length)
        fields[name] = [draw(value)] * count if count > 6 else draw(st.lists(value, min_size=count, max_size=count))
    fields.update(direction=draw(st.one_of(st.integers(0, 4), INT32)), dtype=draw(st.one_of(st.integers(0, 4), INT32)),
                  layout=draw(st.one_of(st.integers(0, 2), INT32)))
    return fields


def overflow_fields() -> st.SearchStrategy[dict]:
    """Each dimension representable, their product far past 2^64."""
    return st.fixed_dictionaries({
        "direction": st.just(1), "dtype": st.just(1), "batch": st.sampled_from([2 ** 40, 2 ** 62, 2 ** 63 - 1]),
        "groups": st.just(1), "in_channels": st.sampled_from([2 ** 31, 2 ** 62]),
        "out_channels": st.sampled_from([2 ** 31, 2 ** 62]), "layout": st.just(0),
        "input_size": st.just([2 ** 31, 2 ** 31]), "filter_size": st.just([1, 1]), "stride": st.just([]),
        "dilation": st.just([]), "pad_begin": st.just([]), "pad_end": st.just([])})


def any_fields() -> st.SearchStrategy[dict]:
    return st.one_of(valid_fields(), valid_fields(), boundary_fields(), hostile_fields(), overflow_fields())


def to_proto(fields: dict) -> pb.Problem:
    return pb.Problem(**fields)


def _expect_problem(fields: dict, valid: frozenset[str]) -> frozenset[str]:
    return valid if oracle(fields) is not None else frozenset({INVALID})


# ---- Select --------------------------------------------------------------------------------------
#: Family enum values a request may name (every one the proto defines but UNSPECIFIED).
FAMILIES = tuple(sorted(v for v in pb.Family.values() if v != pb.FAMILY_UNSPECIFIED))


@st.composite
def select_cases(draw) -> Case:
    fields = draw(any_fields())
    policy = draw(st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5]), INT32))
    families = draw(st.one_of(st.just([]), st.lists(st.sampled_from(FAMILIES), max_size=4),
                              st.lists(st.one_of(st.integers(0, max(FAMILIES) + 2), INT32), max_size=3),
                              st.sampled_from(FAMILIES).map(lambda f: [f] * 10_000)))  # deeply repeated
    top_k = draw(st.one_of(st.integers(0, 10), INT32))
    model = draw(st.one_of(st.none(), st.sampled_from([("analytic", ""), ("analytic", "1"), ("nope", ""),
                                                       ("", "1")])))
    request = pb.SelectRequest(problem=to_proto(fields), policy=policy, top_k=top_k, families=families)
    if model is not None:
        request.model.CopyFrom(pb.ModelRef(name=model[0], version=model[1]))
    base = {OK, UNIMPLEMENTED} if families else {OK}
    if (oracle(fields) is None or policy not in range(6) or top_k < 0 or any(f not in FAMILIES for f in families)
            or (model and not model[0] and model[1])):
        allowed = {INVALID}
    elif policy == 4:  # ANALYTIC_ONLY: a pin other than the analytic predictor contradicts it
        allowed = {INVALID} if model and model[0] != "analytic" else base
    elif model and model[0] == "nope":
        allowed = {NOT_FOUND}
    elif policy == 5:  # AUTOTUNE on a server without a GPU
        allowed = {PRECONDITION}
    elif policy == 2:  # never measured here
        allowed = {NOT_FOUND} | (base - {OK})
    elif policy == 3 and not model:  # no trained model on this server
        allowed = {NOT_FOUND}
    else:
        allowed = base | ({PRECONDITION} if model else set())
    return Case(request, frozenset(allowed), "select")


# ---- Run -----------------------------------------------------------------------------------------
_SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, 65504.0, 3.0e38], dtype=np.float64)


def _tensor(shape, dtype_code: int, seed: int, specials: bool) -> pb.Tensor:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape)
    if specials and values.size:
        index = rng.integers(0, values.size, size=max(1, values.size // 4))
        values.reshape(-1)[index] = rng.choice(_SPECIALS, size=index.size)
    with np.errstate(over="ignore", invalid="ignore"):
        return codec.encode_tensor(values.astype(np.float32), dtype_code)


@st.composite
def run_cases(draw) -> Case:
    mode = draw(st.sampled_from(["generate", "tensors", "tensors", "broken", "random"]))
    fields = draw(valid_fields()) if mode != "random" else draw(any_fields())
    problem = oracle(fields)
    request = pb.RunRequest(problem=to_proto(fields))
    too_big = problem is not None and sum(math.prod(s) for s in problem.operand_shapes[:2]) > 200_000
    if mode == "generate" or problem is None or too_big:  # too big: the server refuses it, no need to build it
        request.generate.seed = draw(st.integers(0, 2 ** 64 - 1))
        request.return_inputs = draw(st.booleans())
        allowed = {OK, EXHAUSTED} if problem is not None else {INVALID}
        return Case(request, frozenset(allowed), "run-" + mode)
    first_shape, second_shape, _ = problem.operand_shapes
    code = fields["dtype"]
    seed = draw(st.integers(0, 2 ** 32 - 1))
    first = _tensor(first_shape, code, seed, draw(st.booleans()))
    second = _tensor(second_shape, code, seed + 1, draw(st.booleans()))
    allowed = {OK}
    if mode == "broken":
        flaw = draw(st.sampled_from(["short", "long", "shape", "dtype", "missing", "overflow", "negative",
                                     "return_inputs", "deep_shape"]))
        if flaw == "short":
            first.data = first.data[:-1]
        elif flaw == "long":
            second.data = second.data + b"\0\0"
        elif flaw == "shape":
            first.shape[:] = list(first.shape)[::-1] + [1] if len(first.shape) else [2]
        elif flaw == "dtype":
            second.dtype = draw(st.sampled_from([c for c in (0, 1, 2, 3, 7, -5) if c != code]))
        elif flaw == "overflow":
            first.shape[:] = [2 ** 62, 2 ** 62, 4]
        elif flaw == "negative":
            first.shape[:] = [-1] * len(first.shape)
        elif flaw == "deep_shape":
            first.shape[:] = [1] * 100_000
        allowed = {INVALID}
        if flaw == "missing":
            request.tensors.first.CopyFrom(first)
            return Case(request, frozenset(allowed), "run-broken")
        if flaw == "return_inputs":
            request.return_inputs = True
    request.tensors.first.CopyFrom(first)
    request.tensors.second.CopyFrom(second)
    return Case(request, frozenset(allowed), "run-" + mode)


# ---- Benchmark -----------------------------------------------------------------------------------
@st.composite
def benchmark_cases(draw, kernel_names: list[str]) -> Case:
    fields = draw(st.one_of(valid_fields(), valid_fields(), valid_fields(), boundary_fields(), hostile_fields()))
    broken = draw(st.integers(0, 3)) == 0  # a quarter of the requests carry a negative count
    top_k = draw(st.one_of(st.integers(-3, -1), st.sampled_from([-(2 ** 31)]))) if broken else draw(st.integers(1, 3))
    repeats = draw(st.integers(-2, -1)) if broken and draw(st.booleans()) else draw(st.integers(0, 3))
    families = draw(st.one_of(st.just([]), st.lists(st.sampled_from(FAMILIES), max_size=2),
                              st.lists(INT32, max_size=2)))
    kernel_mode = draw(st.sampled_from(["none", "none", "known", "unknown", "empty", "repeated"]))
    kernels: list[str] = []
    if kernel_mode == "known":
        kernels = draw(st.lists(st.sampled_from(kernel_names), min_size=1, max_size=2))
    elif kernel_mode == "unknown":
        kernels = [draw(st.text(min_size=1, max_size=80))]
    elif kernel_mode == "empty":
        kernels = [""]
    elif kernel_mode == "repeated":
        kernels = [draw(st.sampled_from(kernel_names))] * 5000
    request = pb.BenchmarkRequest(problem=to_proto(fields), kernels=kernels, top_k=top_k, repeats=repeats,
                                  families=families)
    problem = oracle(fields)
    if problem is None or top_k < 0 or repeats < 0 or kernel_mode == "empty" \
            or any(f not in FAMILIES for f in families):
        allowed = {INVALID}
    elif kernel_mode == "unknown":  # the baseline selection (with families) comes first
        allowed = {NOT_FOUND, UNIMPLEMENTED} if families else {NOT_FOUND}
    elif kernel_mode in ("known", "repeated"):
        allowed = {OK, INVALID}  # INVALID: a named kernel that does not support this problem
        if families:
            allowed.add(UNIMPLEMENTED)
    else:
        allowed = {OK, UNIMPLEMENTED} if families else {OK}
    return Case(request, frozenset(allowed), "benchmark-" + kernel_mode)


# ---- listings and admin --------------------------------------------------------------------------
@st.composite
def list_kernels_cases(draw) -> Case:
    direction = draw(st.one_of(st.integers(0, 3), INT32))
    dtype = draw(st.one_of(st.integers(0, 3), INT32))
    ndim = draw(st.one_of(st.sampled_from([0, 2, 3]), INT32))
    families = draw(st.one_of(st.just([]), st.lists(st.sampled_from(FAMILIES), max_size=3),
                              st.lists(INT32, max_size=2)))
    fields = draw(st.one_of(st.none(), any_fields()))
    include = draw(st.booleans())
    request = pb.ListKernelsRequest(direction=direction, dtype=dtype, ndim=ndim, families=families,
                                    include_unsupported=include)
    if fields is not None:
        request.problem.CopyFrom(to_proto(fields))
    bad = (direction not in range(4) or dtype not in range(4) or ndim not in (0, 2, 3)
           or any(f not in FAMILIES for f in families) or (fields is not None and oracle(fields) is None)
           or (include and fields is None))
    return Case(request, frozenset({INVALID} if bad else {OK}), "list_kernels")


def lift_quarantine_cases(kernel_names: list[str]) -> st.SearchStrategy[Case]:
    return st.one_of(
        st.just(Case(pb.LiftQuarantineRequest(kernel=""), frozenset({INVALID}), "lift-empty")),
        st.sampled_from(kernel_names).map(lambda k: Case(pb.LiftQuarantineRequest(kernel=k), frozenset({OK}),
                                                         "lift-known")),
        st.text(min_size=1, max_size=300).map(lambda k: Case(pb.LiftQuarantineRequest(kernel=k),
                                                             frozenset({NOT_FOUND}), "lift-unknown")))


def raw_bytes() -> st.SearchStrategy[bytes]:
    """Bytes off the wire: random, truncated varints, wrong wire types, nested garbage."""
    return st.one_of(st.binary(max_size=512), st.sampled_from([b"\x08", b"\x0a\xff\xff\xff\xff\x0f", b"\xff" * 11,
                                                               b"\x0a\x05\x08\x01", b"\x12\x80\x80\x80\x80\x10"]),
                     st.binary(min_size=1, max_size=8).map(lambda b: b * 1000))


def finite(value: float) -> bool:
    return math.isfinite(value)
