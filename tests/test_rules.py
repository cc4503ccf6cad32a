"""Rule sets tiny ⊂ default ⊂ full, generated from the arch spec (DESIGN §4)."""

from __future__ import annotations

import pytest

from tests.strategies import HALF_DTYPES, all_slices, rule_slice, rule_slice_set, slice_id
from tiledispatch.native.arch import get_arch
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import Direction, DType
from tiledispatch.native.rules import (
    DEFAULT_FAMILIES,
    EPILOGUE_SMEM_RESERVE,
    MAX_ACCUMULATOR_REGISTERS,
    MAX_DIRECT_ELEMENTS_PER_THREAD,
    MAX_DWROLL_DATA_VALUES,
    MAX_DWROLL_WEIGHT_VALUES,
    RULE_SETS,
    _candidates,
    _default_rule,
    _full_rule,
    rule_set_configs,
)

SLICES = all_slices()


def hard_rule_violation(config: KernelConfig, arch: str) -> str | None:
    """The hard rules of ``full``, restated: shared memory within the per-block budget (less the
    epilogue reserve), accumulators per thread bounded, 8 warps only for tiles that feed two
    warpgroups (gwalk: any tile, its accumulators counted per output row walked), direct kernels within
    their per-thread element budget."""
    spec = get_arch(arch)
    if config.family is Family.DWROLL:
        # Live fp32 tiles per thread: F_H accumulators (or group_m held rows) + the input (data directions),
        # F_H² accumulators + the F_H-row dY window + the input (backward-weight); at least 2 elements per thread.
        # (+ the next row's raw 16-bit tiles, half a register per element, when loads run ahead).
        per_thread = config.block_m * config.block_n // (32 * config.num_warps)
        height = config.block_k
        weight = config.direction is Direction.BACKWARD_WEIGHT
        tiles = height * height + height + 1 if weight else height + 1
        if config.group_m > 1:  # held rows instead of the F_H rolling accumulators
            tiles = config.group_m + 1
        if config.num_stages == 2:
            tiles += (height + 1 if weight else height) / 2
        limit = MAX_DWROLL_WEIGHT_VALUES if weight else MAX_DWROLL_DATA_VALUES
        if per_thread < 2 or tiles * per_thread > limit:
            return f"dwroll live values {tiles} x {per_thread}"
        return None
    if config.family is Family.DWROW:
        # block_k accumulators (one per filter column) + the row's raw 16-bit dY and input tiles (half a register
        # per element), twice when loads run ahead; at least 2 elements per thread.
        per_thread = config.block_m * config.block_n // (32 * config.num_warps)
        tiles = config.block_k + (config.block_k + 1) / 2 * config.num_stages
        if per_thread < 2 or tiles * per_thread > MAX_DWROLL_DATA_VALUES:
            return f"dwrow live values {tiles} x {per_thread}"
        return None
    if config.family is Family.DWRUN:
        # One element of each tile a thread: F_H² accumulators, the F_H × RUN dY window, the RUN + F_H − 1 input
        # columns of a step, and the next step's raw values when loads run ahead.
        height, run = config.block_k, config.block_m
        raw = (run + height - 1) + (run if config.direction is Direction.BACKWARD_WEIGHT else 0)
        # vec 2 / 4 (channels a thread): that many times the fp32 values; their raw values share a register. Rows
        # through shared memory (num_stages 3, 4) hold no registers in flight.
        values = (config.vec * (height * height + height * run + run + height - 1)
                  + raw * (config.num_stages == 2))
        if config.group_m * config.block_n != 32 * config.num_warps * config.vec or values > MAX_DWROLL_WEIGHT_VALUES:
            return f"dwrun tile {config.group_m} x {config.block_n} on {config.num_warps} warps, {values} live values"
        return None
    if config.family is Family.DIRECT:
        per_thread = config.block_m * config.block_n // (32 * config.num_warps)
        if not 1 <= per_thread <= MAX_DIRECT_ELEMENTS_PER_THREAD:
            return f"direct per-thread elements {per_thread}"
        return None
    if config.family is Family.HALO:  # a ring of 3 column shifts x 4 input rows, nine taps, the store's scratch
        smem = (12 * config.block_m * config.block_k + 9 * config.block_k * config.block_n
                + config.block_m * config.block_n) * config.dtype.itemsize
        acc = config.block_m * config.block_n // (32 * config.num_warps)
        if smem > spec.smem_per_block_bytes - EPILOGUE_SMEM_RESERVE:
            return f"halo smem {smem}"
        return None if acc <= MAX_ACCUMULATOR_REGISTERS else f"halo accumulators {acc}"
    smem = config.num_stages * (config.block_m + config.block_n) * config.block_k * config.dtype.itemsize
    if config.family is Family.GWALK and config.num_stages > 1:  # TMA walk: 3·rows dY and rows + 2 X boxes a stage
        rows = config.group_m
        smem = config.num_stages * (3 * rows * config.block_m + (rows + 2) * config.block_n) * config.block_k * 2
    if smem > spec.smem_per_block_bytes - EPILOGUE_SMEM_RESERVE:
        return f"smem {smem} > {spec.smem_per_block_bytes} - {EPILOGUE_SMEM_RESERVE}"
    acc = config.block_m * config.block_n // (32 * config.num_warps)
    if config.family is Family.GWALK and config.direction is Direction.BACKWARD_WEIGHT:
        # three stacked 4·block_m × block_n accumulators (one per filter column), warps along M only
        stacked = 3 * 4 * acc
        if 4 * config.block_m < 16 * config.num_warps:
            return "gwalk backward-weight warps share rows"
        if (config.num_warps, config.group_m, config.num_stages) == (4, 2, 1):
            return "gwalk backward-weight pointer walk, 4 warps x 2 rows (miscompiled)"
        return None if stacked <= MAX_ACCUMULATOR_REGISTERS else f"gwalk accumulators {stacked}"
    if config.family is Family.GWALK:  # one accumulator tile per output row walked; 8 warps on any tile
        rows_acc = config.group_m * acc
        return None if acc >= 4 and rows_acc <= MAX_ACCUMULATOR_REGISTERS else f"gwalk accumulators {rows_acc}"
    if not 4 <= acc <= MAX_ACCUMULATOR_REGISTERS:
        return f"accumulator registers {acc}"
    if config.num_warps == 8 and config.block_m * config.block_n < 128 * 64:
        return "8 warps on a small tile"
    return None


def test_rule_set_names():
    assert RULE_SETS == ("tiny", "default", "full")
    with pytest.raises(ValueError, match="rule_set"):
        rule_set_configs("huge")


@pytest.mark.parametrize("key", SLICES, ids=slice_id)
def test_tiny_subset_default_subset_full(key):
    tiny = rule_slice("tiny", *key)
    default = rule_slice("default", *key)
    full = rule_slice_set("full", *key)
    default_set = set(default)
    assert set(tiny) <= default_set
    missing = [c.name for c in default if c not in full]
    assert not missing, missing[:5]
    assert len(default) < len(full)
    if key[1] in HALF_DTYPES:
        assert len(tiny) < len(default)
    # every config carries the slice's fields
    direction, dtype, ndim = key
    assert all((c.direction, c.dtype, c.ndim) == key for c in default)
    assert all((c.direction, c.dtype, c.ndim) == key for c in rule_slice("full", *key))


@pytest.mark.parametrize("key", SLICES, ids=slice_id)
def test_every_config_respects_hard_rules(key):
    for rule_set in RULE_SETS:
        configs = rule_slice(rule_set, *key)
        bad = [(c.name, why) for c in configs if (why := hard_rule_violation(c, "sm_90"))]
        assert not bad, bad[:5]
        # the properties used by the rules agree with the restatement
        for c in configs[:: max(1, len(configs) // 500)]:
            if c.family is Family.HALO:
                assert c.smem_bytes_estimate == (12 * c.block_m * c.block_k + 9 * c.block_k * c.block_n
                                                 + c.block_m * c.block_n) * c.dtype.itemsize
            elif c.family is Family.GWALK and c.num_stages > 1:
                rows = c.group_m
                assert c.smem_bytes_estimate == (c.num_stages * (3 * rows * c.block_m + (rows + 2) * c.block_n)
                                                 * c.block_k * c.dtype.itemsize)
            elif c.family.uses_tensor_cores:
                assert c.smem_bytes_estimate == c.num_stages * (c.block_m + c.block_n) * c.block_k * c.dtype.itemsize
                assert c.smem_bytes_estimate <= get_arch("sm_90").smem_per_block_bytes - EPILOGUE_SMEM_RESERVE
                assert c.accumulator_registers <= MAX_ACCUMULATOR_REGISTERS


@pytest.mark.parametrize("arch", ["sm_80", "sm_89"])
def test_hard_rules_on_smaller_arches(arch):
    key = (Direction.FORWARD, DType.FP32, 2)
    configs = rule_slice("full", *key, arch=arch)
    bad = [(c.name, why) for c in configs if (why := hard_rule_violation(c, arch))]
    assert configs and not bad, bad[:5]


def test_rule_sets_are_sorted_deterministic_and_duplicate_free():
    for rule_set in ("tiny", "default"):
        configs = rule_set_configs(rule_set)
        assert configs == rule_set_configs(rule_set)
        assert len(set(configs)) == len(configs)
    for key in SLICES:
        names = [c.name for c in rule_slice("default", *key)]
        assert names == sorted(names)


def test_rule_set_sizes_are_sane():
    """tiny is CI's compile check (a handful); default is 'a few hundred per (direction, dtype)'."""
    assert 0 < len(rule_set_configs("tiny")) <= 100  # one or two per family and direction (and kind of binary)
    assert all(c.dtype is DType.BF16 and not c.index64 for c in rule_set_configs("tiny"))
    for direction in Direction:
        count = len(rule_set_configs("default", directions=[direction], dtypes=[DType.BF16]))
        assert 50 <= count <= 1000, (direction, count)


def test_narrowing_arguments():
    only = rule_set_configs("default", directions=["bwd_weight"], dtypes=["fp16"], ndims=[3])
    assert only and all((c.direction, c.dtype, c.ndim) == (Direction.BACKWARD_WEIGHT, DType.FP16, 3) for c in only)
    everything = rule_set_configs("default")
    assert set(only) < set(everything)
    assert {(c.direction, c.dtype, c.ndim) for c in everything} == set(SLICES)


@pytest.mark.parametrize("narrowing", [dict(directions=[]), dict(dtypes=[])], ids=["directions", "dtypes"])
def test_empty_narrowing_gives_nothing(narrowing):
    assert rule_set_configs("tiny", **narrowing) == []


# ---- coverage of families --------------------------------------------------------------------
TINY_FAMILY_CASES = [
    pytest.param(d, n, f, id=f"{d.value}-{n}d-{f.value}")
    for d in Direction for n in (2, 3) for f in DEFAULT_FAMILIES if d in f.directions and n in f.ndims_for(d)
]


@pytest.mark.parametrize("direction, ndim, family", TINY_FAMILY_CASES)
def test_every_family_in_tiny(direction, ndim, family):
    configs = rule_slice("tiny", direction, DType.BF16, ndim)
    chosen = [c for c in configs if c.family is family]
    assert chosen
    # both split-K paths are compiled in CI: every backward-weight family, the forward / backward-data igemm
    if direction is Direction.BACKWARD_WEIGHT or family is Family.IGEMM:
        assert {c.split_k == 1 for c in chosen} == {True, False}


@pytest.mark.parametrize("key", [k for k in SLICES if k[1] in HALF_DTYPES], ids=slice_id)
def test_default_covers_every_family(key):
    families = {c.family for c in rule_slice("default", *key)}
    assert families == {f for f in DEFAULT_FAMILIES if key[0] in f.directions and key[2] in f.ndims_for(key[0])}


@pytest.mark.parametrize("key", SLICES, ids=slice_id)
def test_default_has_generic_kernels(key):
    """A generic fallback per slice: an unaligned (v1) 32-bit igemm with split_k 1, a 64-bit one,
    and an unaligned direct kernel for small groups."""
    configs = rule_slice("default", *key)
    assert any(c.family is Family.IGEMM and c.vec == 1 and c.split_k == 1 and not c.index64 for c in configs)
    assert any(c.family is Family.IGEMM and c.vec == 1 and c.split_k == 1 and c.index64 for c in configs)
    assert any(c.family is Family.DIRECT and c.vec == 1 and c.split_k == 1 for c in configs)
    if key[0] is Direction.BACKWARD_WEIGHT:
        assert any(c.split_k > 1 for c in configs)
    else:  # split-K forward / backward-data: a few aligned 16-bit tensor-core tiles for small GEMM M
        split = [c for c in configs if c.split_k > 1]
        assert all(c.family in (Family.IGEMM, Family.GEMM1X1) and c.vec == 8 and not c.index64 for c in split)
        assert bool(split) == (key[1] is not DType.FP32)


# ---- arch dependence ------------------------------------------------------------------------
def test_sm80_full_excludes_configs_over_its_smem_budget():
    """The A100 has 163 KiB per block against 227 KiB on Hopper: some sm_90 configs must not exist
    for sm_80, and everything else is shared."""
    key = (Direction.FORWARD, DType.BF16, 2)
    sm90 = rule_slice_set("full", *key)
    sm80 = rule_slice_set("full", *key, arch="sm_80")
    budget80 = get_arch("sm_80").smem_per_block_bytes - EPILOGUE_SMEM_RESERVE
    big = {c for c in sm90 if c.smem_bytes_estimate > budget80}
    assert big, "expected configs whose staging buffers only fit Hopper's shared memory"
    assert not big & sm80
    assert sm80 == sm90 - big
    example = KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.IGEMM, 256, 128, 64, 8, 4, 8)
    assert example.smem_bytes_estimate == 4 * (256 + 128) * 64 * 2  # 192 KiB
    assert example in sm90 and example not in sm80


def test_sm89_default_differs_where_smem_binds():
    """L40S: 99 KiB per block; a 3-stage 128x128x64 bf16 pipeline (96 KiB + reserve) does not fit."""
    key = (Direction.FORWARD, DType.BF16, 2)
    sm90 = set(rule_slice("default", *key))
    sm89 = set(rule_slice("default", *key, arch="sm_89"))
    assert sm89 < sm90
    budget89 = get_arch("sm_89").smem_per_block_bytes - EPILOGUE_SMEM_RESERVE
    assert sm90 - sm89 == {c for c in sm90 if c.smem_bytes_estimate > budget89}


def test_arch_aliases_give_the_same_rule_set():
    key = dict(directions=["fwd"], dtypes=["bf16"], ndims=[2])
    assert rule_set_configs("default", "h200", **key) == rule_set_configs("default", "sm_90", **key)
    assert rule_set_configs("default", "h100_sxm", **key) == rule_set_configs("default", "sm_90", **key)


def test_default_split_k_data_direction_kernels_are_few_and_aimed_at_small_m():
    """Split-K forward / backward-data in default: 4-warp, 3-stage, aligned 16-bit igemm (2D and 3D) and
    gemm1x1 (2D) tiles of at most 64x64, splits 4-16; few enough that the default registry grows modestly.
    full holds split-K for every tensor-core family of the data directions (gmerge too), not tma."""
    from tiledispatch.native.rules import SPLIT_K_DATA_SPLITS, SPLIT_K_DATA_TILES

    split = [c for c in rule_set_configs("default") if c.split_k > 1 and c.direction is not Direction.BACKWARD_WEIGHT]
    assert 0 < len(split) <= 150
    assert {(c.block_m, c.block_n, c.block_k) for c in split} == set(SPLIT_K_DATA_TILES)
    assert {c.split_k for c in split} == set(SPLIT_K_DATA_SPLITS)
    assert all(c.block_m <= 64 and c.block_n <= 64 and c.num_warps == 4 and c.num_stages == 3 and c.vec == 8
               and not c.index64 and c.dtype is not DType.FP32 for c in split)
    assert {(c.family, c.ndim) for c in split} == {(Family.IGEMM, 2), (Family.IGEMM, 3), (Family.GEMM1X1, 2)}
    assert {c.direction for c in split} == {Direction.FORWARD, Direction.BACKWARD_DATA}
    full = rule_slice("full", Direction.FORWARD, DType.BF16, 2)
    full_split = {c.family for c in full if c.split_k > 1}
    assert full_split == {Family.IGEMM, Family.GMERGE, Family.GEMM1X1}
    assert {c.split_k for c in full} == {1, 2, 4, 8, 16}


def test_default_backward_weight_extra_splits_are_few_aligned_tensor_core_tiles():
    """Backward-weight splits beyond (1, 4, 16) in default: only the listed 4-warp, 3-stage, aligned 16-bit
    igemm (2D and 3D) and gemm1x1 (2D) tiles, each at every extra split."""
    from tiledispatch.native.rules import WEIGHT_EXTRA_SPLIT_TILES, WEIGHT_EXTRA_SPLITS

    weight = [c for c in rule_set_configs("default") if c.direction is Direction.BACKWARD_WEIGHT
              and c.family in (Family.IGEMM, Family.GEMM1X1) and not c.pad_channels]
    extra = [c for c in weight if c.split_k not in (1, 4, 16)]
    assert {c.split_k for c in extra} == set(WEIGHT_EXTRA_SPLITS)
    assert {(c.block_m, c.block_n, c.block_k) for c in extra} == set(WEIGHT_EXTRA_SPLIT_TILES)
    assert all(c.num_warps == 4 and c.num_stages == 3 and c.vec == 8 and c.group_m == 8 and not c.index64
               and c.dtype is not DType.FP32 for c in extra)
    assert {(c.family, c.ndim) for c in extra} == {(Family.IGEMM, 2), (Family.IGEMM, 3), (Family.GEMM1X1, 2)}
    assert len(extra) == len(WEIGHT_EXTRA_SPLIT_TILES) * len(WEIGHT_EXTRA_SPLITS) * 2 * 3  # 2 dtypes, 3 (family, ndim)


def test_default_gmerge_backward_weight_long_split_twins_every_16_split_tile():
    """gmerge backward-weight in default: splits 1, 4, 16 and GMERGE_WEIGHT_LONG_SPLIT, the long-split kernels
    exactly the 16-split ones at the longer split (same tile, stages, merge, vec, dtype, ndim); no other direction
    holds it."""
    import dataclasses

    from tiledispatch.native.rules import GMERGE_WEIGHT_LONG_SPLIT

    gmerge = [c for c in rule_set_configs("default") if c.family is Family.GMERGE]
    weight = [c for c in gmerge if c.direction is Direction.BACKWARD_WEIGHT]
    assert {c.split_k for c in weight} == {1, 4, 16, GMERGE_WEIGHT_LONG_SPLIT}
    sixteen = {dataclasses.replace(c, split_k=GMERGE_WEIGHT_LONG_SPLIT) for c in weight if c.split_k == 16}
    assert sixteen and {c for c in weight if c.split_k == GMERGE_WEIGHT_LONG_SPLIT} == sixteen
    assert all(c.split_k != GMERGE_WEIGHT_LONG_SPLIT for c in gmerge if c.direction is not Direction.BACKWARD_WEIGHT)


def test_default_channel_padded_kernels_are_twins_of_default_v8_tiles():
    """Every pad_channels kernel of default runs a v8 tile default holds, is one of rules.PADDED_TILES (16-bit,
    igemm 2D and 3D, gemm1x1 2D) or rules.PADDED_DEPTHWISE_TILES (direct and dwrow on padded groups), and every
    listed tile is there in both dtypes."""
    from tiledispatch.native.rules import PADDED_DEPTHWISE_TILES, PADDED_TILES

    default = set(rule_set_configs("default"))
    every_padded = [c for c in default if c.pad_channels]
    assert all(c.unpadded in default and c.vec == 8 and not c.index64 and c.dtype is not DType.FP32
               for c in every_padded)
    depthwise = [c for c in every_padded if c.family in (Family.DIRECT, Family.DWROW)]
    for direction, tiles in PADDED_DEPTHWISE_TILES.items():
        found = [(c.family, c.ndim, c.block_m, c.block_n, c.block_k, c.num_warps, c.split_k, c.dtype)
                 for c in depthwise if c.direction is direction]
        assert sorted(found) == sorted((*tile, dtype) for tile in tiles for dtype in (DType.BF16, DType.FP16))
    padded = [c for c in every_padded if c.family not in (Family.DIRECT, Family.DWROW)]
    for direction, tiles in PADDED_TILES.items():
        found = {(c.family, c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages, c.split_k): set()
                 for c in padded if c.direction is direction}
        for c in padded:
            if c.direction is direction:
                found[(c.family, c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages, c.split_k)].add(
                    (c.dtype, c.ndim))
        assert set(found) == set(tiles), direction
        for (family, *_), kinds in found.items():
            ndims = (2, 3) if family is Family.IGEMM else (2,)
            assert kinds == {(dtype, n) for dtype in (DType.BF16, DType.FP16) for n in ndims}, (direction, family)


def test_default_unpipelined_tensor_core_tiles_are_aligned_data_direction_kernels():
    # num_stages 1 (plain, L1-cached loads): gmerge/igemm forward and backward-data, 16-bit, aligned runs.
    unpipelined = [c for c in rule_set_configs("default") if c.num_stages == 1
                   and c.family in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1)]
    assert unpipelined
    assert {c.direction for c in unpipelined} == {Direction.FORWARD, Direction.BACKWARD_DATA}
    assert all(c.vec == 8 and not c.index64 and c.dtype is not DType.FP32 for c in unpipelined)
    assert {c.family for c in unpipelined} == {Family.IGEMM, Family.GMERGE}
    merged = {(c.block_m, c.block_n, c.block_k, c.merge) for c in unpipelined if c.family is Family.GMERGE}
    assert (128, 32, 32, 8) in merged and (128, 32, 32, 2) in merged


def test_default_tensor_core_tiles_have_their_block_k_depth_and_only_the_measured_siblings():
    from tiledispatch.native.rules import PIPELINE_DEPTH as primary
    from tiledispatch.native.rules import STAGE_SIBLINGS

    seen = set()
    for c in rule_set_configs("default", "sm_90"):
        if c.family not in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1) or c.vec != 8 or c.num_stages == 1:
            continue
        key = (c.family, c.direction, c.block_k)
        assert c.num_stages in (primary[c.block_k], STAGE_SIBLINGS.get(key)), c.name
        if c.num_stages != primary[c.block_k]:
            seen.add(key)
    assert seen == set(STAGE_SIBLINGS)  # every sibling depth is built, none other


@pytest.mark.parametrize("key", [(d, DType.BF16, 2) for d in Direction] + [(Direction.BACKWARD_WEIGHT, DType.BF16, 3)],
                         ids=slice_id)
def test_narrowed_candidates_lose_no_default_dwrun_or_gmerge_config(key):
    # default and tiny draw dwrun and gmerge candidates from the default rule's own tables (a speed-up of the
    # first Select of a process); filtering every combination the families' broad domains hold must give the same.
    arch = get_arch("sm_90")
    families = {Family.DWRUN, Family.GMERGE}
    broad = {c.name for c in _candidates(*key, narrow=False)
             if c.family in families and _full_rule(c, arch) and _default_rule(c)}
    narrowed = {c.name for c in rule_slice("default", *key) if c.family in families}
    assert broad and narrowed == broad
