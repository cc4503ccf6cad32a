"""Every family × direction × ndim × dtype × warps on the GPU, against a float64 reference.

Kernels come from a registry built for the test (ahead of time, in worker processes) and run
through the compiled path the server and benchmark use. Each check draws fresh random inputs and
poisons the output with NaN first. Problems: the dev suite (../shared/bench/dev_suite.json) and
random small problems with odd channel counts.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from pathlib import Path

import pytest

from tests.kernels.cases import gpu_configs
from tiledispatch.native.accuracy import RELATIVE_ERROR_LIMIT
from tiledispatch.native.configs import Family, parse_kernel_name
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported

pytestmark = pytest.mark.gpu

# CI and developers have ../shared beside the checkout; the GPU machine gets a copy named by the env.
SHARED = Path(os.environ.get("TILEDISPATCH_SHARED_DIR", Path(__file__).resolve().parents[2].parent / "shared"))
SUITE = SHARED / "bench" / "dev_suite.json"
DTYPES = (DType.BF16, DType.FP16)


def _all_configs():
    return [c for d in Direction for t in DTYPES for n in (2, 3) for c in gpu_configs(d, t, n)]


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    from tiledispatch.native.registry import Registry, build

    cache = Path(os.environ.get("TILEDISPATCH_TEST_REGISTRY", tmp_path_factory.mktemp("registry")))
    results = build(_all_configs(), arch="sm_90", cache_dir=cache, workers=os.cpu_count() or 4)
    failed = [r for r in results if r.status in ("error", "over_smem")]
    assert not failed, [(r.kernel, r.status, r.error[:200]) for r in failed]
    # Spilling kernels are left out of the registry (slow), but every family must keep a kernel
    # for each direction, dtype, ndim and warp count, or this test would check nothing there.
    usable = {parse_kernel_name(r.kernel) for r in results if r.usable}
    for config in _all_configs():
        assert any(u.family is config.family and u.direction is config.direction and u.dtype is config.dtype
                   and u.ndim == config.ndim and u.num_warps == config.num_warps for u in usable), config.name
    return Registry.load(cache, "sm_90")


def _check(problem: ConvProblem, registry, configs) -> list[str]:
    import torch

    from tiledispatch.native import launch
    from tiledispatch.native.bench import torch_reference

    dtype = launch.torch_dtype(problem.dtype)
    first = torch.randn(problem.operand_shapes[0], device="cuda", dtype=dtype)
    second = torch.randn(problem.operand_shapes[1], device="cuda", dtype=dtype)
    reference = torch_reference(problem, first, second)
    norm = float(torch.linalg.vector_norm(reference))
    failures = []
    checked = 0
    for config in configs:
        if not is_supported(problem, config):
            continue
        out = torch.full(problem.operand_shapes[2], float("nan"), device="cuda", dtype=dtype)
        launch.run(problem, config, first, second, out, loader=registry.loader())
        torch.cuda.synchronize()
        error = float(torch.linalg.vector_norm(out.double() - reference)) / norm
        checked += 1
        if not error <= RELATIVE_ERROR_LIMIT[problem.dtype]:
            failures.append(f"{config.name}: {error:.3g}")
    assert checked, f"no kernel supported {problem.key}"
    return failures


def _suite():
    if not SUITE.exists():
        return []
    return json.loads(SUITE.read_text())["problems"]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
@pytest.mark.parametrize("entry", _suite(), ids=lambda e: e["name"])
def test_dev_suite(registry, entry, direction, dtype):
    problem = ConvProblem.from_suite_entry(entry, direction, dtype)
    configs = [c for c in registry.configs if c.direction is direction and c.dtype is dtype]
    assert not _check(problem, registry, configs)


def _random_problem(rng: random.Random, ndim: int, direction: Direction, dtype: DType) -> ConvProblem:
    cg, kg = rng.choice([(1, 1), (1, 3), (3, 5), (7, 2), (12, 20), (24, 24), (40, 33)])
    groups = rng.choice([1, 2, 3, 5, 8]) if (cg, kg) != (1, 1) else rng.choice([8, 13, 32])
    filt = tuple(rng.choice([1, 2, 3, 5]) for _ in range(ndim))
    stride = tuple(rng.choice([1, 1, 2, 3]) for _ in range(ndim))
    dilation = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
    size = tuple(rng.randint(5, 19) if ndim == 2 else rng.randint(3, 9) for _ in range(ndim))
    pad_begin = tuple(rng.randint(0, f) for f in filt)
    pad_end = tuple(rng.randint(0, f) for f in filt)
    size = tuple(max(s, d * (f - 1) + 1) for s, d, f in zip(size, dilation, filt))
    return ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 5), groups=groups,
                       in_channels=groups * cg, out_channels=groups * kg, input_size=size, filter_size=filt,
                       stride=stride, dilation=dilation, pad_begin=pad_begin, pad_end=pad_end)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_random_odd_shapes(registry, direction, dtype, ndim, seed):
    rng = random.Random(f"{direction}-{dtype}-{ndim}-{seed}-{random.random()}")
    problem = _random_problem(rng, ndim, direction, dtype)
    configs = [c for c in registry.configs if c.direction is direction and c.dtype is dtype and c.ndim == ndim]
    assert not _check(problem, registry, configs), problem.key


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_random_unaligned_channels_on_padded_tiles(registry, direction, dtype, ndim, seed):
    """C/G and K/G of 17-200 channels (padding at most doubles the work), C/G odd (several channel blocks,
    partial ones), 1-3 groups, 1x1 and wider filters, strides, dilations, asymmetric pads: every kernel that supports
    it, and at least one channel-padded kernel among them."""
    rng = random.Random(f"padded-{direction}-{dtype}-{ndim}-{seed}-{random.random()}")
    cg, kg = rng.randrange(17, 200, 2), rng.randint(17, 200)
    groups = rng.choice([1, 1, 2, 3])
    filt = tuple(rng.choice([1, 3]) for _ in range(ndim)) if rng.random() < 0.7 else (1,) * ndim
    stride = tuple(rng.choice([1, 1, 2]) for _ in range(ndim)) if max(filt) > 1 else (1,) * ndim
    dilation = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
    size = tuple(rng.randint(6, 24) if ndim == 2 else rng.randint(3, 8) for _ in range(ndim))
    size = tuple(max(s, d * (f - 1) + 1) for s, d, f in zip(size, dilation, filt))
    pad_begin = tuple(rng.randint(0, f // 2) for f in filt)
    pad_end = tuple(rng.randint(0, f // 2) for f in filt)
    problem = ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 6), groups=groups,
                          in_channels=groups * cg, out_channels=groups * kg, input_size=size, filter_size=filt,
                          stride=stride, dilation=dilation, pad_begin=pad_begin, pad_end=pad_end)
    configs = [c for c in registry.configs if c.direction is direction and c.dtype is dtype and c.ndim == ndim]
    assert any(c.pad_channels and is_supported(problem, c) for c in configs), problem.key
    assert not _check(problem, registry, configs), problem.key


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_random_unaligned_depthwise_on_padded_groups(registry, direction, dtype, ndim, seed):
    """Depthwise with a channel count that is not a multiple of 8 (9-299: padding adds at most 1.78x), filters up to
    7 wide, strides, dilations, asymmetric pads: every kernel that supports it, and at least one group-padded direct
    or dwrow kernel among them."""
    rng = random.Random(f"padded-groups-{direction}-{dtype}-{ndim}-{seed}-{random.random()}")
    groups = rng.choice([g for g in range(9, 300) if g % 8])
    filt = tuple(rng.choice([1, 3, 3, 5, 7]) for _ in range(ndim))
    stride = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
    dilation = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
    size = tuple(rng.randint(5, 30) if ndim == 2 else rng.randint(3, 10) for _ in range(ndim))
    size = tuple(max(s, d * (f - 1) + 1) for s, d, f in zip(size, dilation, filt))
    problem = ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 4), groups=groups,
                          in_channels=groups, out_channels=groups, input_size=size, filter_size=filt, stride=stride,
                          dilation=dilation, pad_begin=tuple(rng.randint(0, f // 2) for f in filt),
                          pad_end=tuple(rng.randint(0, f // 2) for f in filt))
    configs = [c for c in registry.configs if c.direction is direction and c.dtype is dtype and c.ndim == ndim]
    assert any(c.pad_channels and c.family in (Family.DIRECT, Family.DWROW) and is_supported(problem, c)
               for c in configs), problem.key
    assert not _check(problem, registry, configs), problem.key


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_random_depthwise_multiplier_problems(registry, direction, dtype, ndim, seed):
    """C/G = 1, K/G = 2..9 (the direct kernels' multiplier binary: one and several j chunks), odd or 8-aligned
    group counts (its v1 and v8 configs), strides, dilations, asymmetric pads; every kernel that supports it."""
    rng = random.Random(f"multiplier-{direction}-{dtype}-{ndim}-{seed}-{random.random()}")
    groups = rng.choice([8 * rng.randint(1, 9), rng.randrange(3, 80, 2)])
    filt = tuple(rng.choice([1, 3, 3, 5]) for _ in range(ndim))
    stride = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
    dilation = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
    size = tuple(rng.randint(5, 30) if ndim == 2 else rng.randint(3, 10) for _ in range(ndim))
    size = tuple(max(s, d * (f - 1) + 1) for s, d, f in zip(size, dilation, filt))
    problem = ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 4), groups=groups,
                          in_channels=groups, out_channels=groups * rng.randint(2, 9), input_size=size,
                          filter_size=filt, stride=stride, dilation=dilation,
                          pad_begin=tuple(rng.randint(0, f) for f in filt),
                          pad_end=tuple(rng.randint(0, f) for f in filt))
    configs = [c for c in registry.configs if c.direction is direction and c.dtype is dtype and c.ndim == ndim]
    assert any(c.family is Family.DIRECT and is_supported(problem, c) for c in configs), problem.key
    assert not _check(problem, registry, configs), problem.key


def _random_depthwise_rows_problem(rng: random.Random, ndim: int, direction: Direction, dtype: DType) -> ConvProblem:
    """A depthwise problem the dwroll kernels run: rows with stride and dilation 1, filter height 3/5/7
    (3 in 3D), columns (and depth) strided and dilated except in backward-data, channels a multiple of 8
    that often leaves a partial channel block, sizes that span several strips and row chunks."""
    channels = 8 * rng.randint(1, 13)
    height = 3 if ndim == 3 else rng.choice([3, 5, 7])
    filt = (*(3 for _ in range(ndim - 2)), height, rng.randint(1, height))
    strided = direction is not Direction.BACKWARD_DATA
    stride = (*(rng.choice([1, 2]) if strided else 1 for _ in range(ndim - 2)), 1, rng.choice([1, 2]) if strided else 1)
    dilation = (*(rng.choice([1, 2]) for _ in range(ndim - 2)), 1, rng.choice([1, 2]))
    size = tuple(rng.randint(3, 8) for _ in range(ndim - 2)) + (rng.randint(4, 40), rng.randint(4, 70))
    size = tuple(max(s, d * (f - 1) + 1) for s, d, f in zip(size, dilation, filt))
    pad_begin = tuple(rng.randint(0, f) for f in filt)
    pad_end = tuple(rng.randint(0, f) for f in filt)
    return ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 4), groups=channels,
                       in_channels=channels, out_channels=channels, input_size=size, filter_size=filt,
                       stride=stride, dilation=dilation, pad_begin=pad_begin, pad_end=pad_end)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_random_depthwise_rolling_rows(registry, direction, dtype, ndim, seed):
    rng = random.Random(f"dwroll-{direction}-{dtype}-{ndim}-{seed}-{random.random()}")
    problem = _random_depthwise_rows_problem(rng, ndim, direction, dtype)
    configs = [c for c in registry.configs if c.family is Family.DWROLL and c.direction is direction
               and c.dtype is dtype and c.ndim == ndim]
    assert not _check(problem, registry, configs), problem.key


def _depthwise_weight_problem(rng: random.Random, dtype: DType, channels: int, size, filt, stride,
                              dilation) -> ConvProblem:
    """A depthwise backward-weight problem: ``size`` grown to hold the dilated filter, pads 0..filter on either
    side, a batch of 1-6."""
    size = tuple(max(s, d * (f - 1) + 1) for s, d, f in zip(size, dilation, filt))
    pad_begin = tuple(rng.randint(0, f) for f in filt)
    pad_end = tuple(rng.randint(0, f) for f in filt)
    return ConvProblem(direction=Direction.BACKWARD_WEIGHT, dtype=dtype, batch=rng.randint(1, 6), groups=channels,
                       in_channels=channels, out_channels=channels, input_size=size, filter_size=filt,
                       stride=stride, dilation=dilation, pad_begin=pad_begin, pad_end=pad_end)


def _random_depthwise_filter_rows_problem(rng: random.Random, ndim: int, dtype: DType) -> ConvProblem:
    """A depthwise backward-weight problem the dwrow kernels run: any filter height (up to 7 wide), strides and
    dilations 1-3 on every axis, asymmetric pads, channels a multiple of 8 that often leaves a partial block,
    batches and sizes that give several strips, row chunks and splits."""
    channels = 8 * rng.randint(1, 13)
    filt = (*(rng.choice([1, 3]) for _ in range(ndim - 2)), rng.randint(1, 9), rng.randint(1, 7))
    stride = tuple(rng.choice([1, 1, 2, 3]) for _ in range(ndim))
    dilation = tuple(rng.choice([1, 1, 2]) for _ in range(ndim))
    size = tuple(rng.randint(3, 8) for _ in range(ndim - 2)) + (rng.randint(4, 40), rng.randint(4, 70))
    return _depthwise_weight_problem(rng, dtype, channels, size, filt, stride, dilation)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
def test_random_depthwise_filter_rows(registry, dtype, ndim, seed):
    rng = random.Random(f"dwrow-{dtype}-{ndim}-{seed}-{random.random()}")
    problem = _random_depthwise_filter_rows_problem(rng, ndim, dtype)
    configs = [c for c in registry.configs if c.family is Family.DWROW and c.dtype is dtype and c.ndim == ndim]
    assert not _check(problem, registry, configs), problem.key


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
def test_random_multiplier_filter_rows(registry, dtype, ndim, seed):
    """dwrow's scalar binary (vec 1) on depthwise-multiplier and odd-channel problems: C/G = 1, K/G 1-6, any group
    count, any filter up to 7 wide, strides and dilations on every axis; every kernel that supports it, and at
    least one scalar dwrow among them."""
    rng = random.Random(f"dwrow-scalar-{dtype}-{ndim}-{seed}-{random.random()}")
    groups = rng.choice([rng.randrange(1, 80, 2), 8 * rng.randint(1, 9)])
    multiplier = rng.choice([1, 2, 3, 4, 6])
    base = _random_depthwise_filter_rows_problem(rng, ndim, dtype)
    problem = dataclasses.replace(base, groups=groups, in_channels=groups, out_channels=groups * multiplier)
    configs = [c for c in registry.configs if c.dtype is dtype and c.ndim == ndim and c.direction is problem.direction]
    assert any(c.family is Family.DWROW and c.vec == 1 and is_supported(problem, c) for c in configs), problem.key
    assert not _check(problem, registry, configs), problem.key

def _random_depthwise_runs_problem(rng: random.Random, ndim: int, dtype: DType) -> ConvProblem:
    """A depthwise backward-weight problem the dwrun kernels run: rows and columns at stride 1 and dilation 1 with
    a 3, 5 or 7 high filter (at most as wide), depth strided and dilated, asymmetric pads up to the filter, any
    channel count (odd ones leave partial channel blocks), widths that leave partial runs and strips."""
    channels = rng.choice([rng.randint(1, 40), 8 * rng.randint(1, 13)])
    height = rng.choice([3, 5, 7])
    filt = (*(rng.choice([1, 3]) for _ in range(ndim - 2)), height, rng.randint(1, height))
    stride = (*(rng.choice([1, 2]) for _ in range(ndim - 2)), 1, 1)
    dilation = (*(rng.choice([1, 2]) for _ in range(ndim - 2)), 1, 1)
    size = tuple(rng.randint(3, 8) for _ in range(ndim - 2)) + (rng.randint(3, 40), rng.randint(3, 70))
    return _depthwise_weight_problem(rng, dtype, channels, size, filt, stride, dilation)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ndim", (2, 3))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
def test_random_depthwise_runs(registry, dtype, ndim, seed):
    rng = random.Random(f"dwrun-{dtype}-{ndim}-{seed}-{random.random()}")
    problem = _random_depthwise_runs_problem(rng, ndim, dtype)
    configs = [c for c in registry.configs if c.family is Family.DWRUN and c.dtype is dtype and c.ndim == ndim]
    assert not _check(problem, registry, configs), problem.key


def _planar_3d(rng: random.Random, flat: ConvProblem) -> ConvProblem:
    """A 3D problem that is ``flat`` (ConvProblem.planar): its images split over 1-4 depths of a 1-deep filter
    (depth dilation drawn: idle), or, where ``flat``'s columns are idle (1 wide, stride 1, unpadded), its rows
    become depth and its columns an H x W plane."""
    idle_columns = (flat.filter_size[1] == 1 and flat.stride[1] == 1 and flat.pad_begin[1] == flat.pad_end[1] == 0)
    if idle_columns and rng.random() < 0.5:
        width = flat.input_size[1]
        height = next(h for h in (3, 2, 1) if width % h == 0)
        return dataclasses.replace(
            flat, input_size=(flat.input_size[0], height, width // height), filter_size=(flat.filter_size[0], 1, 1),
            stride=(flat.stride[0], 1, 1), dilation=(flat.dilation[0], rng.choice([1, 2]), 1),
            pad_begin=(flat.pad_begin[0], 0, 0), pad_end=(flat.pad_end[0], 0, 0))
    depth = rng.randint(1, 4)
    return dataclasses.replace(
        flat, batch=max(1, flat.batch // depth), input_size=(depth, *flat.input_size),
        filter_size=(1, *flat.filter_size), stride=(1, *flat.stride), dilation=(rng.choice([1, 3]), *flat.dilation),
        pad_begin=(0, *flat.pad_begin), pad_end=(0, *flat.pad_end))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_random_planar_3d_problems_on_2d_kernels(registry, direction, dtype, seed):
    """3D problems that are 2D ones, run by every 2D kernel that supports their 2D form, on the 3D tensors:
    odd shapes (seeds 0, 1) and depthwise runs (2, 3: the dwrun data kernels, 2D only)."""
    rng = random.Random(f"planar-{direction}-{dtype}-{seed}-{random.random()}")
    if seed < 2:
        flat = _random_problem(rng, 2, direction, dtype)
    else:
        flat = dataclasses.replace(_random_depthwise_runs_problem(rng, 2, dtype), direction=direction)
    problem = _planar_3d(rng, flat)
    assert problem.planar is not None, problem.key
    configs = [c for c in registry.configs if c.direction is direction and c.dtype is dtype and c.ndim == 2]
    assert not _check(problem, registry, configs), problem.key


def _random_walk_problem(rng: random.Random, direction: Direction, dtype: DType) -> ConvProblem:
    """A grouped 3x3 problem the gwalk kernels run (stride 1; backward-weight: strides and dilations 1-2, which
    its one-row walks take): 4-32 channels per group (K/G = C/G or twice it),
    odd group counts (partial merged blocks) where the channel counts stay multiples of 8 (the family's
    16-byte runs), pads 0-2 on either side, widths from a few columns (several images per program) to past
    a 128-row tile (several column tiles)."""
    cg = rng.choice([4, 8, 16, 32])
    kg = rng.choice([cg, cg, min(2 * cg, 32)])
    groups = rng.choice([2, 6, 8, 32] if cg == 4 else [2, 3, 6, 8, 32])
    size = (rng.randint(5, 30), rng.choice([rng.randint(5, 9), rng.randint(10, 70), rng.randint(129, 150)]))
    # backward-weight: strides and dilations 1-2 too (the one-row walks take them)
    steps = (1, 1, 2) if direction is Direction.BACKWARD_WEIGHT else (1,)
    return ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 5), groups=groups,
                       in_channels=groups * cg, out_channels=groups * kg, input_size=size, filter_size=(3, 3),
                       stride=(rng.choice(steps), rng.choice(steps)), dilation=(rng.choice(steps), rng.choice(steps)),
                       pad_begin=(rng.randint(0, 2), rng.randint(0, 2)), pad_end=(rng.randint(0, 2), rng.randint(0, 2)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_random_grouped_walks(registry, direction, dtype, seed):
    rng = random.Random(f"gwalk-{direction}-{dtype}-{seed}-{random.random()}")
    problem = _random_walk_problem(rng, direction, dtype)
    configs = [c for c in registry.configs if c.family is Family.GWALK and c.direction is direction
               and c.dtype is dtype and is_supported(problem, c)]
    assert configs, f"no gwalk kernel supports {problem.key}"
    assert not _check(problem, registry, configs), problem.key


def _random_halo_problem(rng: random.Random, direction: Direction, dtype: DType) -> ConvProblem:
    """A 3x3 grouped problem whose merged channel runs are multiples of 8: widths from 3 (many streams a tile) to
    70 (two column blocks of a 64-row tile), heights not multiples of the walk, every pad; a third dilated (1-3
    per axis: residue classes of unequal sizes); forward: another third at stride 2 (the ``strided`` program;
    widths up to 150: 75 output columns, two column blocks)."""
    cg, kg = rng.choice([(8, 8), (16, 16), (8, 16), (4, 4), (24, 8), (32, 32)])
    groups = rng.choice([2, 4, 8])
    kind = rng.choice(["plain", "dilated", "strided"] if direction is Direction.FORWARD else ["plain", "dilated"])
    dilation = (rng.randint(1, 3), rng.randint(1, 3)) if kind == "dilated" else (1, 1)
    stride = (2, 2) if kind == "strided" else (1, 1)
    size = (rng.randint(2 * dilation[0] + 1, 30),
            rng.choice([rng.randint(2 * dilation[1] + 1, 30), rng.randint(60, 150 if kind == "strided" else 70)]))
    return ConvProblem(direction=direction, dtype=dtype, batch=rng.randint(1, 5), groups=groups,
                       in_channels=groups * cg, out_channels=groups * kg, input_size=size, filter_size=(3, 3),
                       stride=stride, dilation=dilation,
                       pad_begin=(rng.randint(0, 2 * dilation[0]), rng.randint(0, 2 * dilation[1])),
                       pad_end=(rng.randint(0, 2 * dilation[0]), rng.randint(0, 2 * dilation[1])))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", (Direction.FORWARD, Direction.BACKWARD_DATA), ids=lambda d: d.value)
def test_random_halo_walks(registry, direction, dtype, seed):
    rng = random.Random(f"halo-{direction}-{dtype}-{seed}-{random.random()}")
    for _ in range(50):  # (a problem some halo test tile supports: merged runs of 8 channels)
        problem = _random_halo_problem(rng, direction, dtype)
        configs = [c for c in registry.configs if c.family is Family.HALO and c.direction is direction
                   and c.dtype is dtype and is_supported(problem, c)]
        if configs:
            break
    assert configs, f"no halo kernel supports {problem.key}"
    assert not _check(problem, registry, configs), problem.key


#: Split-K forward / backward-data problems (label -> ConvProblem fields): small GEMM M (batch 1), what
#: split-K is for — the dense 14x14 3x3 layer of the H200 dev suite (M = 196: 32 CTAs unsplit), a 7x7 one,
#: 1x1 (gemm1x1) — and odd ones: channels not multiples of 8 (the v1 kernels), strides 2 (backward-data's
#: residue classes, with different valid taps each), dilation, asymmetric pads, 8 channels per group (9
#: reduction steps for up to 16 splits: empty splits), 3D.
SPLIT_PROBLEMS = {
    2: {
        "dense_n1_c256_14x14": dict(batch=1, groups=1, in_channels=256, out_channels=256, input_size=(14, 14),
                                    filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1),
                                    pad_end=(1, 1)),
        "dense_n1_c512_7x7": dict(batch=1, groups=1, in_channels=512, out_channels=512, input_size=(7, 7),
                                  filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1),
                                  pad_end=(1, 1)),
        "pointwise_n1_c1024_7x7": dict(batch=1, groups=1, in_channels=1024, out_channels=256, input_size=(7, 7),
                                       filter_size=(1, 1), stride=(1, 1), dilation=(1, 1), pad_begin=(0, 0),
                                       pad_end=(0, 0)),
        "grouped_c8_per_group": dict(batch=1, groups=8, in_channels=64, out_channels=64, input_size=(14, 14),
                                     filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1),
                                     pad_end=(1, 1)),
        "stride2_n2": dict(batch=2, groups=1, in_channels=64, out_channels=128, input_size=(15, 15),
                           filter_size=(3, 3), stride=(2, 2), dilation=(1, 1), pad_begin=(1, 1), pad_end=(1, 1)),
        "odd_strided_dilated": dict(batch=1, groups=3, in_channels=27, out_channels=33, input_size=(9, 11),
                                    filter_size=(3, 3), stride=(2, 2), dilation=(1, 2), pad_begin=(1, 0),
                                    pad_end=(0, 1)),
    },
    3: {
        "dense_n1_c64_4x8x8": dict(batch=1, groups=1, in_channels=64, out_channels=64, input_size=(4, 8, 8),
                                   filter_size=(3, 3, 3), stride=(1, 1, 1), dilation=(1, 1, 1),
                                   pad_begin=(1, 1, 1), pad_end=(1, 1, 1)),
        "stride2_n1_c32": dict(batch=1, groups=2, in_channels=32, out_channels=64, input_size=(5, 9, 9),
                               filter_size=(3, 3, 3), stride=(1, 2, 2), dilation=(1, 1, 1), pad_begin=(1, 1, 1),
                               pad_end=(1, 1, 1)),
        "odd_channels": dict(batch=1, groups=2, in_channels=18, out_channels=22, input_size=(3, 5, 6),
                             filter_size=(2, 3, 3), stride=(1, 2, 1), dilation=(2, 1, 1), pad_begin=(1, 1, 0),
                             pad_end=(1, 0, 1)),
    },
}


@pytest.mark.parametrize("case", [(n, label) for n, problems in SPLIT_PROBLEMS.items() for label in problems],
                         ids=lambda c: f"{c[0]}d-{c[1]}")
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.value)
@pytest.mark.parametrize("direction", [Direction.FORWARD, Direction.BACKWARD_DATA], ids=lambda d: d.value)
def test_split_k_data_directions(registry, direction, dtype, case):
    """Every split-K forward / backward-data kernel of the test registry that supports the problem: within
    the error limit of the float64 reference, and bitwise the same on a second run (the reduce sums the
    partials in a fixed order: no atomics)."""
    import torch

    from tiledispatch.native import launch

    ndim, label = case
    problem = ConvProblem(direction=direction, dtype=dtype, **SPLIT_PROBLEMS[ndim][label])
    configs = [c for c in registry.configs if c.split_k > 1 and c.direction is direction and c.dtype is dtype
               and c.ndim == ndim and is_supported(problem, c)]
    assert configs, f"no split-K kernel supports {problem.key}"
    assert not _check(problem, registry, configs), problem.key
    torch_dtype = launch.torch_dtype(dtype)
    first = torch.randn(problem.operand_shapes[0], device="cuda", dtype=torch_dtype)
    second = torch.randn(problem.operand_shapes[1], device="cuda", dtype=torch_dtype)
    for config in configs:
        runs = []
        for _ in range(2):
            out = torch.full(problem.operand_shapes[2], float("nan"), device="cuda", dtype=torch_dtype)
            runs.append(launch.run(problem, config, first, second, out, loader=registry.loader()))
        torch.cuda.synchronize()
        assert torch.equal(runs[0], runs[1]), f"{config.name}: two runs differ"


def test_pytorch_channels_last_tensors_are_accepted_as_they_are(registry):
    import torch

    from tiledispatch.native import launch

    problem = ConvProblem(direction="fwd", dtype="bf16", batch=2, groups=4, in_channels=32, out_channels=64,
                          input_size=(9, 10), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1),
                          pad_begin=(1, 1), pad_end=(1, 1))
    x = torch.randn(2, 32, 9, 10, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 8, 3, 3, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    config = next(c for c in registry.configs if c.direction is Direction.FORWARD and c.dtype is DType.BF16
                  and c.ndim == 2 and is_supported(problem, c))
    y = launch.forward(problem, config, x, w, loader=registry.loader())
    expected = torch.nn.functional.conv2d(x.double(), w.double(), padding=1, groups=4)
    assert y.shape == expected.shape
    error = float(torch.linalg.vector_norm(y.double() - expected) / torch.linalg.vector_norm(expected))
    assert error <= RELATIVE_ERROR_LIMIT[DType.BF16]
