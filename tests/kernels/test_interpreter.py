"""Every family × direction × ndim under the Triton interpreter (fp16 and fp32, tiny problems)."""

from __future__ import annotations

import math

import pytest

from tests.kernels.cases import case_id, cases, problem, small_config
from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.configs import Family
from tiledispatch.native.problem import Direction, DType
from tiledispatch.native.support import is_supported

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.interpreter

CASES = cases()


# tma and gwalk kernels exist in bf16/fp16 only (fp32 runs on the exact igemm dots).
DTYPE_CASES = [pytest.param(case, dtype, id=f"{case_id(case)}-{dtype.value}")
               for case in CASES for dtype in (DType.FP16, DType.FP32)
               if not (case[2] in (Family.TMA, Family.GWALK) and dtype is DType.FP32)]


def _check_against_reference(prob, config) -> None:
    """Run ``config`` on ``prob`` under the interpreter (fresh random inputs, NaN-poisoned output) and
    assert its relative error against the float64 reference is within DESIGN §4's limit."""
    from tiledispatch.native import launch, reference

    assert is_supported(prob, config), is_supported(prob, config).reason
    dtype = launch.torch_dtype(prob.dtype)
    generator = torch.Generator().manual_seed(torch.seed() % (2**31))  # fresh inputs every run
    first = torch.randn(prob.operand_shapes[0], generator=generator).to(dtype)
    second = torch.randn(prob.operand_shapes[1], generator=generator).to(dtype)
    out = torch.full(prob.operand_shapes[2], float("nan"), dtype=dtype)  # poisoned

    launch.run(prob, config, first, second, out, backend="interpret")

    expected = reference.run_reference(prob, first.double().numpy(), second.double().numpy())
    error = reference.relative_error(out.double().numpy(), expected)
    assert error <= RELATIVE_ERROR_LIMIT[prob.dtype], f"{config.name}: relative error {error:.3g}"


@pytest.mark.parametrize("case, dtype", DTYPE_CASES)
def test_kernel_matches_float64_reference(case, dtype):
    ndim, label, family, direction, variant = case
    _check_against_reference(problem(direction, dtype, ndim, label),
                             small_config(direction, dtype, ndim, family, **variant))


@pytest.mark.parametrize("family", ["igemm", "gmerge", "gemm1x1"])
def test_backward_weight_sums_long_reductions_in_promoted_chunks(monkeypatch, family):
    """Chunks of one block (instead of 16384 positions) so each split of the tiny problem crosses chunk
    boundaries, with and without split-K. fp16: its tensor-core sums are the ones promoted (exact fp32 dots
    are summed in one chunk, so an fp32 run of this test would not reach the chunk loop), and its splits are
    longer than the patched limit, so the launch runs the chunked ``main``, not ``flat``."""
    from tiledispatch.native.configs import Family
    from tiledispatch.native.kernels import igemm_bwd_weight
    from tiledispatch.native.problem import Direction

    monkeypatch.setattr(igemm_bwd_weight, "PROMOTE_POSITIONS", 16)  # BLOCK_K 16: one block a chunk
    label = "aligned_1x1" if family == "gemm1x1" else "grouped_odd"
    dtype = DType.FP16
    prob = problem(Direction.BACKWARD_WEIGHT, dtype, 2, label)
    assert prob.batch * math.prod(prob.output_size) >= 2 * 2 * 16  # two splits of two chunks or more
    for split_k in (1, 2):
        config = small_config(Direction.BACKWARD_WEIGHT, dtype, 2, Family(family), split_k=split_k,
                              vec=8 if family == "gemm1x1" else 1)
        main = igemm_bwd_weight.IgemmBackwardWeight().programs(config)["main"]
        assert main.constexprs["PROMOTE_BLOCKS"] == 1 and main.constexprs["PROMOTE"]
        assert not igemm_bwd_weight.uses_flat_program(prob, config)  # the launch runs the chunked main
        _check_against_reference(prob, config)


@pytest.mark.parametrize("split_k", [1, 2])
@pytest.mark.parametrize("family, label, merge, vec", [
    ("igemm", "grouped_odd", 1, 1), ("gemm1x1", "aligned_1x1", 1, 8), ("gmerge", "grouped_odd", 2, 1)])
def test_backward_weight_flat_program_matches_float64_reference(family, label, merge, vec, split_k):
    """``flat`` (one accumulator per split) on a tile that carries it (64×128: 64 accumulator registers a
    thread on 4 warps), fp16, unsplit and split: the launch must run it, and its result must match."""
    from tiledispatch.native.configs import KernelConfig
    from tiledispatch.native.kernels import igemm_bwd_weight
    from tiledispatch.native.problem import Direction

    dtype = DType.FP16
    prob = problem(Direction.BACKWARD_WEIGHT, dtype, 2, label)
    config = KernelConfig(Direction.BACKWARD_WEIGHT, dtype, 2, Family(family), 64, 128, 16, 4, 2, 8, split_k, merge,
                          vec)
    assert igemm_bwd_weight.uses_flat_program(prob, config)
    _check_against_reference(prob, config)


#: 3D problems that are 2D ones (ConvProblem.planar: cases.SHAPES_3D "planar_*") and the 2D families run on them.
PLANAR_CASES = [
    *[("planar_spatial_depthwise", d, Family.DWRUN, dict(taps_w=3)) for d in Direction],
    ("planar_spatial_depthwise", Direction.BACKWARD_WEIGHT, Family.DWRUN, dict(taps_w=3, split_k=4)),
    ("planar_spatial_depthwise", Direction.FORWARD, Family.DWRUN, dict(taps_w=3, stages=2, vec=2)),
    *[("planar_spatial_depthwise", d, Family.DWROLL, dict(taps_w=3)) for d in Direction],
    *[("planar_spatial_odd", d, Family.DIRECT, {}) for d in Direction],
    *[("planar_spatial_odd", d, Family.DWRUN, dict(taps_w=3)) for d in Direction],
    *[("planar_temporal_grouped", d, f, {}) for d in Direction for f in (Family.IGEMM, Family.GMERGE, Family.DIRECT)],
]


@pytest.mark.parametrize("label, direction, family, variant", PLANAR_CASES,
                         ids=[f"{c[0]}-{c[1].value}-{c[2].value}-{'-'.join(f'{k}{v}' for k, v in c[3].items())}"
                              for c in PLANAR_CASES])
def test_2d_kernel_runs_a_planar_3d_problem(label, direction, family, variant):
    """A 2D kernel on a 3D problem that is a 2D one, given the 3D problem's tensors (fp32; fresh inputs,
    poisoned output): the 3D float64 reference's result."""
    prob = problem(direction, DType.FP32, 3, label)
    assert prob.planar is not None
    _check_against_reference(prob, small_config(direction, DType.FP32, 2, family, **variant))


@pytest.mark.parametrize("cache", [True, False])
def test_planar_launch_takes_pytorch_channels_last_3d_tensors(cache):
    """PyTorch-shaped NCDHW tensors in channels_last_3d memory, through the plan and the uncached path: the
    answer is PyTorch-shaped too, the bytes the 2D kernel wrote."""
    from tiledispatch.native import launch, reference
    prob = problem(Direction.FORWARD, DType.FP32, 3, "planar_spatial_depthwise")
    config = small_config(Direction.FORWARD, DType.FP32, 2, Family.DWRUN, taps_w=3)
    x = torch.randn(2, 16, 3, 7, 9).to(memory_format=torch.channels_last_3d)
    w = torch.randn(16, 1, 1, 3, 3).to(memory_format=torch.channels_last_3d)
    y = launch.run(prob, config, x, w, backend="interpret", cache=cache)
    assert tuple(y.shape) == (2, 16, 3, 7, 9) and y.is_contiguous(memory_format=torch.channels_last_3d)
    grouped_x = x.permute(0, 2, 3, 4, 1).reshape(prob.input_shape).double().numpy()
    grouped_w = w.permute(0, 2, 3, 4, 1).reshape(prob.weight_shape).double().numpy()
    expected = reference.run_reference(prob, grouped_x, grouped_w)
    got = y.permute(0, 2, 3, 4, 1).reshape(prob.output_shape).double().numpy()
    assert reference.relative_error(got, expected) <= RELATIVE_ERROR_LIMIT[prob.dtype]


def test_3d_kernel_still_runs_a_planar_problem():
    """Planar problems keep their 3D kernels (the benchmark measures both; selection ranks the 2D ones)."""
    prob = problem(Direction.FORWARD, DType.FP32, 3, "planar_spatial_odd")
    _check_against_reference(prob, small_config(Direction.FORWARD, DType.FP32, 3, Family.DIRECT))
