"""Cached launch plans (``native/launch.py``) against the uncached path, on CPU.

For every family × direction × ndim case of the kernel tests and for real model problems (including
gmerge weight packing and split-K reductions, whose workspaces hold views in another dtype):

* the plan's launches bound to a call's tensors are what the template's ``plan()`` returns for them
  (programs in order, grids, arguments, zero fills), for two different sets of tensors;
* a compiled binary gets the same calls from ``run()`` as from ``run(cache=False)``: stand-in
  binaries record (program, grid, arguments) and run nothing; pointers are compared as (operand,
  byte offset), workspace pointers relative to the workspace;
* the per-call checks raise the uncached path's errors, word for word; a plan keeps no tensor; a
  ``plan()`` the placeholders cannot record falls back to running per call; one plan runs different
  tensors correctly (Triton interpreter, numerics against the float64 reference).
"""

from __future__ import annotations

import gc
import weakref

import pytest

from tests.kernels.cases import MODEL_CASES, case_id, cases, model_case, problem, small_config
from tiledispatch.native.configs import Family
from tiledispatch.native.problem import Direction, DType

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

CASES = cases()


class StandIn:
    """A compiled binary that records each call as (program, grid, arguments, whether it was handed
    tensors) and runs nothing. Tensors are recorded as their data pointers (all a binary sees), so
    the log keeps none alive."""

    def __init__(self, program: str, log: list):
        self.program, self.log = program, log

    def __getitem__(self, grid):
        def record(*args):
            self.log.append((self.program, tuple(grid),
                             tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args),
                             any(isinstance(a, torch.Tensor) for a in args)))
        return record


def stand_in_loader(log: list, make=None):
    """``loader(config) -> {program: binary}``, one table per kernel (as a registry loads them); each
    binary ``make(name, program, log)``, by default a :class:`StandIn`."""
    from tiledispatch.native import launch

    tables: dict[str, dict] = {}

    def loader(config):
        if config.name not in tables:
            tables[config.name] = {name: make(name, program, log) if make else StandIn(name, log)
                                   for name, program in launch.template_for(config).programs(config).items()}
        return tables[config.name]

    return loader


@pytest.fixture
def compiled_on_cpu(monkeypatch):
    """The compiled backend accepts CPU tensors (its binaries are stand-ins)."""
    from tiledispatch.native import launch

    monkeypatch.setitem(launch._DEVICE_TYPE, launch.Backend.COMPILED, "cpu")


def _all_cases():
    small = [pytest.param(("small", case, DType.FP16), id=case_id(case)) for case in CASES]
    small += [pytest.param(("small", case, DType.FP32), id=case_id(case) + "-fp32") for case in CASES
              if case[2] is Family.GMERGE]  # a packed fp32 operand is a same-size view of the workspace
    return small + [pytest.param(("model", label, None), id=label) for label, _, _ in MODEL_CASES]


def _problem_config(spec):
    kind, case, dtype = spec
    if kind == "model":
        return model_case(case)
    ndim, label, family, direction, variant = case
    return problem(direction, dtype, ndim, label), small_config(direction, dtype, ndim, family, **variant)


def _operands(prob, workspace_elements):
    """Fresh grouped-shape tensors (uninitialised: nothing runs) and the workspace."""
    from tiledispatch.native import launch

    dtype = launch.torch_dtype(prob.dtype)
    tensors = [torch.empty(shape, dtype=dtype) for shape in prob.operand_shapes]
    tensors.append(torch.empty(workspace_elements, dtype=torch.float32) if workspace_elements else None)
    return tensors


def _describe(launches):
    """Launches as comparable values: tensors by data pointer, dtype, shape and strides."""
    def value(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", v.data_ptr(), v.dtype, tuple(v.shape), v.stride())
        return v

    return [(launch.program, tuple(launch.grid), tuple(value(v) for v in launch.args),
             tuple(value(t) for t in launch.zero_fill)) for launch in launches]


def _pytorch_face(tensor, weight):
    """The same values as a PyTorch-shaped channels-last tensor (a fresh one)."""
    from tiledispatch.native import launch

    shape = launch.pytorch_shape(tuple(tensor.shape), weight=weight)
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    return torch.empty(shape, dtype=tensor.dtype).contiguous(memory_format=fmt)


def _normalized(calls, programs, known):
    """One ``run``'s recorded calls with every pointer as (operand, byte offset): ``known`` maps a
    label to its tensor; other pointers (the workspace, allocated per call) are taken relative to
    the smallest of them, so two calls with their own workspaces compare equal."""
    ranges = {label: (t.data_ptr(), t.untyped_storage().nbytes()) for label, t in known.items()}

    def owner(pointer):
        return next(((label, pointer - start) for label, (start, size) in ranges.items()
                     if start <= pointer < start + max(size, 1)), None)

    pointer_positions = {}
    for name, program in programs.items():
        pointer_positions[name] = [i for i, arg in enumerate(program.fn.arg_names)
                                   if program.param_types.get(arg, "").startswith("*")]
    unknown = [args[i] for name, _, args, _ in calls for i in pointer_positions[name] if owner(args[i]) is None]
    workspace = min(unknown) if unknown else 0
    out = []
    for name, grid, args, _ in calls:
        values = list(args)
        for i in pointer_positions[name]:
            values[i] = owner(args[i]) or ("workspace", args[i] - workspace)
        out.append((name, grid, tuple(values)))
    return out


# ---- the launches ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", _all_cases())
def test_plan_binds_what_plan_returns(spec):
    """The recorded plan, bound to a call's tensors, equals ``plan()`` on them, for two calls."""
    from tiledispatch.native import launch

    prob, config = _problem_config(spec)
    plan = launch.build_plan(prob, config, "interpret")
    assert not plan.untraced, plan.untraced  # the placeholders recorded plan(): the cache is in use
    template = launch.template_for(config)
    seen = []
    for _ in range(2):
        tensors = _operands(prob, plan.workspace_elements)
        expected = _describe(template.plan(prob, config, *tensors))
        assert _describe(plan.bind(*tensors)) == expected
        seen.append(expected)
    assert seen[0] != seen[1]  # different tensors, different pointers: nothing of the first call is kept


@pytest.mark.parametrize("face", ["grouped", "pytorch", "out"])
@pytest.mark.parametrize("spec", _all_cases())
def test_compiled_calls_match_the_uncached_path(spec, face, compiled_on_cpu):
    """What a compiled binary receives from ``run()`` (cached plan) and ``run(cache=False)``:
    operands in grouped shape, in PyTorch's channels-last shape, or with a caller-provided output."""
    from tiledispatch.native import launch

    prob, config = _problem_config(spec)
    log: list = []
    loader = stand_in_loader(log)
    programs = launch.template_for(config).programs(config)
    names = [name for name, _ in launch._OPERANDS[prob.direction]]
    weights = [weight for _, weight in launch._OPERANDS[prob.direction]]
    for _ in range(2):  # the same plan with a second set of tensors
        first, second, out, _ = _operands(prob, 0)
        if face == "pytorch":
            first, second = _pytorch_face(first, weights[0]), _pytorch_face(second, weights[1])
        runs = []
        for cache in (False, True):
            log.clear()
            result = launch.run(prob, config, first, second, out if face == "out" else None, loader=loader,
                                cache=cache)
            known = {names[0]: first, names[1]: second, names[2]: result}
            runs.append((_normalized(log, programs, known), [passed for *_, passed in log],
                         (tuple(result.shape), result.stride(), result.dtype)))
        (uncached, _, uncached_result), (cached, handed_tensors, cached_result) = runs
        assert cached == uncached and cached
        assert not any(handed_tensors)  # compiled launches get pointers: the plan binds no tensor
        assert cached_result == uncached_result  # the returned tensor's shape, strides and dtype


# ---- the checks ------------------------------------------------------------------------------------
def _bad_calls():
    """(label, how to break a good fwd call's arguments); each must fail with the same message."""
    def replace(index, make):
        def build(args):
            args = list(args)
            args[index] = make(args[index])
            return args
        return build

    return [
        ("not_a_tensor", replace(0, lambda t: t.numpy())),
        ("second_not_a_tensor", replace(1, lambda t: [1, 2])),
        ("wrong_dtype", replace(0, lambda t: t.float())),
        ("wrong_shape", replace(1, lambda t: t.reshape(-1))),
        ("grouped_not_contiguous", replace(0, lambda t: t.transpose(1, 2).contiguous().transpose(1, 2))),
        ("pytorch_not_channels_last", replace(0, lambda t: _pytorch_face(t, False).contiguous())),
        ("misaligned", replace(1, lambda t: torch.empty(t.numel() + 1, dtype=t.dtype)[1:].view(t.shape))),
        ("other_device", replace(1, lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"))),
        ("out_wrong_shape", replace(2, lambda t: torch.empty(3, dtype=t.dtype))),
        ("out_other_device", replace(2, lambda t: torch.empty(t.shape, dtype=t.dtype, device="meta"))),
        ("out_misaligned", replace(2, lambda t: torch.empty(t.numel() + 1, dtype=t.dtype)[1:].view(t.shape))),
    ]


@pytest.mark.parametrize("label, breaker", _bad_calls(), ids=[b[0] for b in _bad_calls()])
def test_errors_match_the_uncached_path(label, breaker):
    from tiledispatch.native import launch

    prob = problem(Direction.FORWARD, DType.FP16, 2, "small_groups")
    config = small_config(Direction.FORWARD, DType.FP16, 2, Family.GMERGE, merge=2, vec=8)
    first, second, out, _ = _operands(prob, 0)
    args = breaker((first, second, out))
    messages = []
    for cache in (False, True):
        with pytest.raises(launch.LaunchError) as error:
            launch.run(prob, config, *args, backend="interpret", cache=cache)
        messages.append(str(error.value))
    assert messages[0] == messages[1], messages


def test_support_backend_and_loader_errors(compiled_on_cpu, monkeypatch):
    from tiledispatch.native import launch

    prob = problem(Direction.FORWARD, DType.FP16, 2, "small_groups")
    wrong = small_config(Direction.BACKWARD_DATA, DType.FP16, 2, Family.IGEMM)
    first, second, _, _ = _operands(prob, 0)
    messages = []
    for cache in (False, True):
        with pytest.raises(launch.LaunchError, match="does not support this problem: direction") as error:
            launch.run(prob, wrong, first, second, backend="interpret", cache=cache)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    config = small_config(Direction.FORWARD, DType.FP16, 2, Family.IGEMM)
    monkeypatch.setitem(launch._DEVICE_TYPE, launch.Backend.COMPILED, "cuda")  # the real requirement
    messages = []
    for cache in (False, True):
        with pytest.raises(launch.LaunchError, match="compiled backend needs CUDA tensors") as error:
            launch.run(prob, config, first, second, loader=stand_in_loader([]), cache=cache)
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    with pytest.raises(launch.LaunchError, match="loader"):
        launch.run(prob, config, first, second)


@pytest.mark.parametrize("ndim", [2, 3])
def test_channels_last_check_is_as_grouped_s(ndim):
    """The plan checks PyTorch-shaped operands with ``is_contiguous(memory_format=...)`` instead of
    building the channels-last permutation: it must accept exactly what ``as_grouped`` accepts, size-1
    dimensions (any stride) and padded strides included."""
    import random

    from tiledispatch.native import launch

    label = "small_groups"
    prob = problem(Direction.FORWARD, DType.FP32, ndim, label)
    plan = launch.build_plan(prob, small_config(Direction.FORWARD, DType.FP32, ndim, Family.IGEMM), "interpret")
    spec = plan.operands[0]
    rng = random.Random(0)
    shapes = [spec.pytorch, (1, *spec.pytorch[1:]), (spec.pytorch[0], spec.pytorch[1], *(1,) * ndim)]
    checked = 0
    for shape in shapes:
        grouped_spec = launch.OperandSpec(spec.name, _grouped_of(shape), shape, False, _grouped_of(shape))
        for _ in range(300):
            order = list(range(len(shape)))
            rng.shuffle(order)
            base = torch.empty([shape[i] * rng.choice((1, 1, 2)) for i in order])
            padded = base[tuple(slice(0, shape[i]) for i in order)]
            tensor = padded.permute(*[order.index(i) for i in range(len(shape))])
            try:
                launch.as_grouped("input", tensor, grouped_spec.grouped, DType.FP32)
                expected = True
            except launch.LaunchError:
                expected = False
            try:
                accepted = plan._accept(grouped_spec, tensor)
            except launch.LaunchError:
                accepted = None
            assert (accepted is True) == expected, (shape, tensor.stride())
            checked += 1
    assert checked == 900


def _grouped_of(pytorch_shape):
    n, c, *spatial = pytorch_shape
    return (n, *spatial, 1, c)


# ---- no tensor kept ----------------------------------------------------------------------------------
def _tensors_in(value, seen=None) -> list:
    """Every tensor reachable from a plan's fields (dataclasses, tuples, lists, dicts)."""
    import dataclasses

    seen = set() if seen is None else seen
    if id(value) in seen:
        return []
    seen.add(id(value))
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        children = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, (tuple, list)):
        children = list(value)
    elif isinstance(value, dict):
        children = list(value.values())
    else:
        return []
    return [t for child in children for t in _tensors_in(child, seen)]


@pytest.mark.parametrize("label", ["fwd_2d_gmerge_pack", "bwd_weight_2d_gmerge_splitk", "fwd_2d_depthwise_taprows"])
def test_plans_keep_no_tensor(label, compiled_on_cpu):
    from tiledispatch.native import launch

    prob, config = model_case(label)
    log: list = []
    loader = stand_in_loader(log)
    first, second, _, _ = _operands(prob, 0)
    result = launch.run(prob, config, first, second, loader=loader)
    plan = launch.launch_plan(prob, config, "compiled", loader)
    assert log and not _tensors_in(plan)  # neither the call's tensors nor the meta placeholders
    refs = [weakref.ref(t) for t in (first, second, result)]
    del first, second, result
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_plan_cache():
    from tiledispatch.native import launch

    prob, config = model_case("fwd_2d_igemm")
    one, two = stand_in_loader([]), stand_in_loader([])
    plan = launch.launch_plan(prob, config, "compiled", one)
    assert launch.launch_plan(prob, config, launch.Backend.COMPILED, one) is plan
    assert launch.launch_plan(prob, config, "compiled", two) is not plan  # another registry, other binaries
    assert launch.launch_plan(prob, config, "interpret", one) is launch.launch_plan(prob, config, "interpret")
    launch.clear_plans()
    assert launch.launch_plan(prob, config, "compiled", one) is not plan


# ---- plan() that placeholders cannot record -------------------------------------------------------
class _WrappedTemplate:
    """Another template's programs and workspace; subclasses change its plan()."""

    def __init__(self, inner):
        self.inner, self.direction, self.families = inner, inner.direction, inner.families

    def programs(self, config):
        return self.inner.programs(config)

    def workspace_elements(self, problem, config):
        return self.inner.workspace_elements(problem, config)


class _AllocatingTemplate(_WrappedTemplate):
    """A template whose plan() zeroes a scratch tensor it allocates itself: not an operand, not the
    workspace, so the plan cannot be recorded and runs per call."""

    def plan(self, problem, config, first, second, out, workspace):
        from dataclasses import replace

        launches = self.inner.plan(problem, config, first, second, out, workspace)
        scratch = torch.empty(4, device=first.device)
        return [replace(launches[0], zero_fill=(scratch,)), *launches[1:]]


def test_untraced_plan_runs_plan_per_call(compiled_on_cpu, monkeypatch):
    from tiledispatch.native import launch

    prob, config = model_case("fwd_2d_gmerge_pack")
    key = (config.direction, config.family)
    monkeypatch.setitem(launch.templates(), key, _AllocatingTemplate(launch.templates()[key]))
    log: list = []
    loader = stand_in_loader(log)
    plan = launch.build_plan(prob, config, "compiled", loader)
    assert "none of the operands" in plan.untraced and not plan.runners
    programs = launch.template_for(config).programs(config)
    first, second, _, _ = _operands(prob, 0)
    runs = []
    for run in (lambda: launch.run(prob, config, first, second, loader=loader, cache=False),
                lambda: plan.run(first, second)):
        log.clear()
        result = run()
        runs.append(_normalized(log, programs, {"input": first, "weight": second, "output": result}))
    assert runs[0] == runs[1] and [name for name, *_ in runs[0]] == ["pack", "main"]


class _OffsetViewsTemplate(_WrappedTemplate):
    """A split-K template whose reduction also gets views at byte offsets: the workspace from its
    17th element, the same bytes as fp16 from the 7th, and the output's second half (nothing runs:
    the views only have to reach the binaries as the same pointers)."""

    def plan(self, problem, config, first, second, out, workspace):
        from dataclasses import replace

        main, reduce = self.inner.plan(problem, config, first, second, out, workspace)
        half = out.reshape(-1)[out.numel() // 2:]
        return [replace(main, zero_fill=(workspace.view(torch.float16)[7:],)),
                replace(reduce, args=(workspace[17:], half, reduce.args[2]), zero_fill=(half,))]


def test_views_at_offsets_are_bound_at_their_offsets(compiled_on_cpu, monkeypatch):
    from tiledispatch.native import launch

    prob, config = model_case("bwd_weight_2d_gmerge_splitk")
    key = (config.direction, config.family)
    monkeypatch.setitem(launch.templates(), key, _OffsetViewsTemplate(launch.templates()[key]))
    log: list = []
    loader = stand_in_loader(log)
    plan = launch.build_plan(prob, config, "compiled", loader)
    assert not plan.untraced
    half_bytes = prob.weight_elements // 2 * 2  # bf16
    assert [(ref.slot, ref.offset) for planned in plan.launches for ref in planned.zero_fill] == \
        [(launch.WORKSPACE, 7 * 2), (launch.RESULT, half_bytes)]
    assert (plan.launches[1].args[0].slot, plan.launches[1].args[0].offset) == (launch.WORKSPACE, 17 * 4)
    tensors = _operands(prob, plan.workspace_elements)
    template = launch.template_for(config)
    assert _describe(plan.bind(*tensors)) == _describe(template.plan(prob, config, *tensors))
    programs = template.programs(config)
    first, second, out, _ = tensors
    runs = []
    for run in (lambda: launch.run(prob, config, first, second, out, loader=loader, cache=False),
                lambda: plan.run(first, second, out)):
        log.clear()
        out.fill_(float("nan"))
        result = run()
        runs.append(_normalized(log, programs, {"input": first, "grad_output": second, "grad_weight": result}))
        flat = out.reshape(-1)  # the reduce launch zeroes the output's second half first (stand-ins do nothing)
        assert flat[: flat.numel() // 2].isnan().all() and (flat[flat.numel() // 2:] == 0).all()
    assert runs[0] == runs[1]
    assert runs[1][1][2][1] == ("grad_weight", result.numel() // 2 * result.element_size())


class _PreparingTemplate(_WrappedTemplate):
    """A template with per-call preparation (``before_launch``), recording the thread of each call."""

    def __init__(self, inner, threads: list):
        super().__init__(inner)
        self.threads = threads

    def plan(self, problem, config, first, second, out, workspace):
        return self.inner.plan(problem, config, first, second, out, workspace)

    def before_launch(self, config):
        import threading

        self.threads.append(threading.get_ident())


def test_before_launch_runs_on_every_call_in_the_calling_thread(compiled_on_cpu, monkeypatch):
    """plan() runs once per plan, in the thread that built it; per-call (per-thread) work such as
    installing Triton's scratch allocator belongs in before_launch, which every call runs."""
    import threading

    from tiledispatch.native import launch

    prob, config = model_case("fwd_2d_gmerge_pack")
    key = (config.direction, config.family)
    threads: list = []
    monkeypatch.setitem(launch.templates(), key, _PreparingTemplate(launch.templates()[key], threads))
    loader = stand_in_loader([])
    first, second, _, _ = _operands(prob, 0)
    for cache in (True, True, False):
        launch.run(prob, config, first, second, loader=loader, cache=cache)
    other = threading.Thread(target=lambda: launch.run(prob, config, first, second, loader=loader))
    other.start()
    other.join()
    main = threading.get_ident()
    assert threads[:3] == [main] * 3 and len(threads) == 4 and threads[3] != main


# ---- numerics: one plan, different tensors -----------------------------------------------------------
@pytest.mark.interpreter
@pytest.mark.parametrize("direction, family, label, variant", [
    (Direction.FORWARD, Family.GMERGE, "small_groups", dict(merge=2, vec=8)),  # packed weight: a workspace view
    (Direction.BACKWARD_DATA, Family.GMERGE, "small_groups", dict(merge=4, vec=8)),
    (Direction.BACKWARD_WEIGHT, Family.IGEMM, "grouped_odd", dict(split_k=4)),  # split-K partials, reduction
    (Direction.FORWARD, Family.DIRECT, "depthwise_odd", dict(taps_w=8)),  # tap-major weights in the workspace
], ids=["fwd-gmerge-pack", "bwd_data-gmerge-pack", "bwd_weight-splitk", "fwd-direct-taprows"])
def test_one_plan_runs_different_tensors_correctly(direction, family, label, variant):
    from tiledispatch.native import launch, reference
    from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT

    prob = problem(direction, DType.FP32, 2, label)
    config = small_config(direction, DType.FP32, 2, family, **variant)
    plan = launch.launch_plan(prob, config, "interpret")
    assert not plan.untraced
    generator = torch.Generator().manual_seed(7)
    for _ in range(2):
        first = torch.randn(prob.operand_shapes[0], generator=generator)
        second = torch.randn(prob.operand_shapes[1], generator=generator)
        out = torch.full(prob.operand_shapes[2], float("nan"))
        assert launch.run(prob, config, first, second, out, backend="interpret") is out
        assert launch.launch_plan(prob, config, "interpret") is plan
        expected = reference.run_reference(prob, first.double().numpy(), second.double().numpy())
        error = reference.relative_error(out.double().numpy(), expected)
        assert error <= RELATIVE_ERROR_LIMIT[DType.FP32], f"{config.name}: relative error {error:.3g}"
