"""Kernel configs and their canonical names (DESIGN §4): every name parses back to its config."""

from __future__ import annotations

import dataclasses
import random
import re

import pytest

from tests.strategies import all_slices, rule_slice
from tiledispatch.native.configs import ConfigError, Family, KernelConfig, parse_kernel_name
from tiledispatch.native.problem import Direction, DType
from tiledispatch.native.rules import rule_set_configs

# The grammar, written out independently of configs._NAME_RE.
GRAMMAR = re.compile(
    r"gconv_(fwd|bwd_data|bwd_weight)_(bf16|fp16|fp32)_([23])d_(igemm|gmerge|gemm1x1|direct|tma|dwroll|gwalk|dwrow|dwrun|halo)"
    r"_([1-9][0-9]*)x([1-9][0-9]*)x([1-9][0-9]*)_w([1-9][0-9]*)_s([1-9][0-9]*)_gm([1-9][0-9]*)"
    r"_sk([1-9][0-9]*)_mg([1-9][0-9]*)_v(1|2|4|8)(p?)_i(32|64)"
)

FULL_SAMPLE_SIZE = 20_000


def check_name(config: KernelConfig) -> None:
    name = config.name
    match = GRAMMAR.fullmatch(name)
    assert match, name
    direction, dtype, ndim, family, bm, bn, bk, w, s, gm, sk, mg, v, padded, bits = match.groups()
    assert (direction, dtype, int(ndim), family) == (config.direction.value, config.dtype.value, config.ndim,
                                                      config.family.value)
    assert tuple(int(x) for x in (bm, bn, bk, w, s, gm, sk, mg, v)) == (
        config.block_m, config.block_n, config.block_k, config.num_warps, config.num_stages, config.group_m,
        config.split_k, config.merge, config.vec)
    assert bits == ("64" if config.index64 else "32")
    assert (padded == "p") == config.pad_channels
    assert str(config) == name
    parsed = parse_kernel_name(name)
    assert parsed == config
    assert parsed.name == name


def check_names_unique(configs) -> None:
    names = [c.name for c in configs]
    assert len(set(names)) == len(names) == len(set(configs))


@pytest.mark.parametrize("rule_set", ["tiny", "default"])
def test_whole_rule_set_round_trips(rule_set):
    configs = rule_set_configs(rule_set)
    assert configs
    for config in configs:
        check_name(config)
    check_names_unique(configs)


def test_full_sample_round_trips():
    rng = random.Random(20261121)
    population = [c for key in all_slices() for c in rule_slice("full", *key)]
    assert len(population) > 10 * FULL_SAMPLE_SIZE
    sample = rng.sample(population, FULL_SAMPLE_SIZE)
    for config in sample:
        check_name(config)
    check_names_unique(sample)
    # every slice and family is represented in the sample
    assert {(c.direction, c.dtype, c.ndim, c.family) for c in sample} == {
        (d, t, n, f) for d, t, n in all_slices() for f in Family
        if d in f.directions and n in f.ndims_for(d) and t in f.dtypes}


def test_names_unique_across_whole_full_slice():
    configs = rule_slice("full", Direction.BACKWARD_WEIGHT, DType.BF16, 3)
    check_names_unique(configs)


def test_example_name():
    config = KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.IGEMM, 128, 64, 32, 4, 3, group_m=8, vec=8)
    assert config.name == "gconv_fwd_bf16_2d_igemm_128x64x32_w4_s3_gm8_sk1_mg1_v8_i32"
    assert parse_kernel_name("gconv_bwd_weight_fp16_3d_gmerge_64x32x32_w4_s4_gm8_sk16_mg4_v1_i64") == KernelConfig(
        Direction.BACKWARD_WEIGHT, DType.FP16, 3, Family.GMERGE, 64, 32, 32, 4, 4, 8, 16, 4, 1, True)
    direct = parse_kernel_name("gconv_bwd_data_fp32_2d_direct_64x32x1_w4_s1_gm1_sk1_mg1_v1_i32")
    assert direct.family is Family.DIRECT and direct.block_k == 1


def test_every_field_changes_the_name():
    """No aliasing: changing any one field of a config changes its name."""
    base = KernelConfig(Direction.BACKWARD_WEIGHT, DType.BF16, 2, Family.GMERGE, 64, 32, 32, 4, 3, 8, 4, 2, 1,
                        False)
    variants = dict(direction=None, dtype=DType.FP16, ndim=3, family=None, block_m=128, block_n=64, block_k=64,
                    num_warps=8, num_stages=4, group_m=1, split_k=8, merge=4, vec=8, index64=True,
                    pad_channels=True)
    assert set(variants) == {f.name for f in dataclasses.fields(KernelConfig)}
    names = {base.name}
    for field, value in variants.items():
        if field == "pad_channels":  # (igemm / gemm1x1 v8 only): against its v8 twin
            twin = dataclasses.replace(base, family=Family.IGEMM, merge=1, vec=8)
            other = dataclasses.replace(twin, pad_channels=True)
            assert other.name != twin.name
        elif field == "direction":
            other = dataclasses.replace(base, direction=Direction.FORWARD, split_k=1)
        elif field == "family":
            other = dataclasses.replace(base, family=Family.IGEMM, merge=1)
        else:
            other = dataclasses.replace(base, **{field: value})
        assert other.name not in names, field
        names.add(other.name)
        assert parse_kernel_name(other.name) == other


GOOD = "gconv_fwd_bf16_2d_igemm_128x64x32_w4_s3_gm8_sk1_mg1_v8_i32"
BAD_NAMES = [
    "",
    "gconv",
    GOOD[:-4],                                   # missing index width
    GOOD + "_x",                                 # trailing junk
    GOOD + "\n",                                 # trailing newline ($ would match before it)
    " " + GOOD,
    GOOD.upper(),
    GOOD.replace("gconv_", "conv_"),
    GOOD.replace("_fwd_", "_forward_"),          # alias, not the canonical spelling
    GOOD.replace("_bf16_", "_bfloat16_"),
    GOOD.replace("_2d_", "_4d_"),
    GOOD.replace("_2d_", "_2_"),
    GOOD.replace("igemm", "winograd"),
    GOOD.replace("igemm", "IGEMM"),
    GOOD.replace("128x", "0128x"),               # leading zero: not canonical
    GOOD.replace("_w4_", "_w04_"),
    GOOD.replace("_i32", "_i16"),
    GOOD.replace("_i32", "_i064"),
    GOOD.replace("_w4_s3_", "_s3_w4_"),          # fields out of order
    GOOD.replace("128x64x32", "128x64"),
    GOOD.replace("_gm8_", "_gm-8_"),
    GOOD.replace("_v8_", "_v_"),
    GOOD.replace("_v8_", "_v8pp_"),
    GOOD.replace("_v8_", "_v8P_"),
    GOOD.replace("_v8_i32", "_v8_i32p"),                # the padding mark belongs to the vec field
    GOOD.replace("_", "-"),
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=range(len(BAD_NAMES)))
def test_bad_names_raise(name):
    with pytest.raises(ConfigError, match="kernel name"):
        parse_kernel_name(name)


def test_noncanonical_error_suggests_canonical_name():
    with pytest.raises(ConfigError, match=re.escape(GOOD)):
        parse_kernel_name(GOOD.replace("_s3_", "_s03_"))


@pytest.mark.parametrize("name, field", [
    (GOOD.replace("igemm", "tma").replace("_sk1_", "_sk2_"), "split_k"),  # data-direction split-K: igemm,
    (GOOD.replace("_fwd_", "_bwd_data_").replace("igemm", "tma").replace("_sk1_", "_sk4_"), "split_k"),  # gmerge,
    (GOOD.replace("igemm_128x64x32_w4_s3_gm8_sk1", "direct_64x32x1_w4_s1_gm1_sk8"), "split_k"),  # gemm1x1 only
    (GOOD.replace("_mg1_", "_mg2_"), "merge"),                    # merge outside gmerge
    (GOOD.replace("igemm", "gmerge"), "merge"),                   # gmerge without merge
    (GOOD.replace("128x", "96x"), "block_m"),
    (GOOD.replace("_w4_", "_w3_"), "num_warps"),
    (GOOD.replace("_v8_", "_v4_"), "vec"),
    (GOOD.replace("_s3_", "_s0_"), "num_stages"),
    (GOOD.replace("x32_", "x8_"), "block_k"),                     # tensor cores need k >= 16
    (GOOD.replace("igemm", "direct").replace("x32_", "x1_"), "num_stages"),  # direct has 1 stage
    (GOOD.replace("_v8_", "_v1p_"), "pad_channels"),              # padding runs a v8 tile
    (GOOD.replace("igemm", "gmerge").replace("_mg1_v8_", "_mg2_v8p_"), "pad_channels"),  # igemm / gemm1x1 only
    (GOOD.replace("_v8_i32", "_v8p_i64"), "pad_channels"),        # 32-bit only
])
def test_well_formed_name_of_invalid_config_raises(name, field):
    with pytest.raises(ConfigError, match=field):
        parse_kernel_name(name)


def tc(**overrides) -> dict:
    fields = dict(direction=Direction.FORWARD, dtype=DType.BF16, ndim=2, family=Family.IGEMM, block_m=64,
                  block_n=64, block_k=32, num_warps=4, num_stages=3, group_m=8, split_k=1, merge=1, vec=1,
                  index64=False)
    fields.update(overrides)
    return fields


def direct(**overrides) -> dict:
    return tc(**{**dict(family=Family.DIRECT, block_m=64, block_n=32, block_k=1, num_stages=1, group_m=1),
                 **overrides})


INVALID_CONFIGS = [
    ("split_k_tma_fwd", tc(family=Family.TMA, vec=8, split_k=4), "split_k"),
    ("split_k_tma_bwd_data", tc(direction=Direction.BACKWARD_DATA, family=Family.TMA, vec=8, split_k=2), "split_k"),
    ("split_k_direct_fwd", direct(split_k=8), "split_k"),
    ("split_k_direct_bwd_data", direct(direction=Direction.BACKWARD_DATA, split_k=4), "split_k"),
    ("split_k_dwroll_fwd", tc(family=Family.DWROLL, block_m=16, block_k=3, num_stages=1, group_m=1, vec=8,
                              split_k=16), "split_k"),
    ("split_k_fwd_6", tc(split_k=6), "split_k"),
    ("merge_igemm", tc(merge=2), "merge"),
    ("merge_gemm1x1", tc(family=Family.GEMM1X1, merge=4), "merge"),
    ("merge_direct", direct(merge=2), "merge"),
    ("gmerge_merge1", tc(family=Family.GMERGE, merge=1), "merge"),
    ("gwalk_3d", tc(family=Family.GWALK, ndim=3, vec=8, num_stages=1, group_m=2), "ndim"),
    ("gwalk_pipelined", tc(family=Family.GWALK, vec=8, num_stages=3, group_m=2), "num_stages"),
    ("gwalk_weight_stages_4", tc(direction=Direction.BACKWARD_WEIGHT, family=Family.GWALK, vec=8, num_stages=4,
                                 group_m=2), "num_stages"),
    ("gwalk_unaligned", tc(family=Family.GWALK, vec=1, num_stages=1, group_m=2), "vec"),
    ("gwalk_rows_8", tc(family=Family.GWALK, vec=8, num_stages=1, group_m=8), "group_m"),
    ("gwalk_fp32", tc(family=Family.GWALK, dtype=DType.FP32, vec=8, num_stages=1, group_m=2), "dtype"),
    ("gwalk_split_fwd", tc(family=Family.GWALK, vec=8, num_stages=1, group_m=2, split_k=4), "split_k"),
    ("block_m_48", tc(block_m=48), "block_m"),
    ("block_n_24", tc(block_n=24), "block_n"),
    ("block_k_40", tc(block_k=40), "block_k"),
    ("block_m_0", tc(block_m=0), "block_m"),
    ("warps_6", tc(num_warps=6), "num_warps"),
    ("group_m_3", tc(group_m=3), "group_m"),
    ("split_k_3", tc(direction=Direction.BACKWARD_WEIGHT, split_k=3), "split_k"),
    ("merge_6", tc(family=Family.GMERGE, merge=6), "merge"),
    ("stages_0", tc(num_stages=0), "num_stages"),
    ("vec_4", tc(vec=4), "vec"),
    ("ndim_1", tc(ndim=1), "ndim"),
    ("ndim_4", tc(ndim=4), "ndim"),
    ("tc_block_k_8", tc(block_k=8), "block_k"),
    ("tc_block_n_8", tc(block_n=8), "block_n"),
    ("direct_block_k_16", direct(block_k=16), "block_k"),
    ("direct_block_k_2", tc(family=Family.DIRECT, block_k=2, num_stages=1, group_m=1), "block_k"),
    ("direct_stages_2", direct(num_stages=2), "num_stages"),
    ("direct_group_m_8", direct(group_m=8), "group_m"),
    ("direction_unknown", tc(direction="sideways"), "direction"),
    ("dtype_unknown", tc(dtype="int8"), "dtype"),
    ("family_unknown", tc(family="winograd"), "family"),
]


@pytest.mark.parametrize("fields, field", [c[1:] for c in INVALID_CONFIGS], ids=[c[0] for c in INVALID_CONFIGS])
def test_invalid_config_names_field(fields, field):
    with pytest.raises(ConfigError) as info:
        KernelConfig(**fields)
    assert field in str(info.value).lower()
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("fields", [tc(ndim=2.0), tc(num_stages=2.5), tc(block_m=64.0)],
                         ids=["ndim_float", "stages_fraction", "block_m_float"])
def test_non_integer_config_fields_raise(fields):
    with pytest.raises(ConfigError):
        KernelConfig(**fields)


def test_valid_configs_accepted():
    KernelConfig(**tc())
    KernelConfig(**tc(family=Family.GMERGE, merge=32))
    KernelConfig(**tc(direction=Direction.BACKWARD_WEIGHT, split_k=64))
    KernelConfig(**direct(direction=Direction.BACKWARD_WEIGHT, split_k=8, vec=8, index64=True))
    # Split-K forward / backward-data: the tensor-core families igemm, gmerge and gemm1x1.
    KernelConfig(**tc(split_k=16))
    KernelConfig(**tc(direction=Direction.BACKWARD_DATA, family=Family.GMERGE, merge=4, split_k=4, vec=8))
    KernelConfig(**tc(family=Family.GEMM1X1, split_k=2, index64=True))
    KernelConfig(**tc(family=Family.GEMM1X1, block_m=16, block_n=16, block_k=16))


def test_resource_estimates():
    config = KernelConfig(**tc(block_m=128, block_n=64, block_k=32, num_stages=3))
    assert config.smem_bytes_estimate == 3 * (128 * 32 + 32 * 64) * 2 == 36_864
    assert config.accumulator_registers == 128 * 64 // (32 * 4) == 64
    fp32 = dataclasses.replace(config, dtype=DType.FP32)
    assert fp32.smem_bytes_estimate == 2 * config.smem_bytes_estimate
    eight = dataclasses.replace(config, num_warps=8)
    assert eight.accumulator_registers == 32
    assert KernelConfig(**direct()).smem_bytes_estimate == 0
    cuda_core = (Family.DIRECT, Family.DWROLL, Family.DWROW, Family.DWRUN)
    assert not any(f.uses_tensor_cores for f in cuda_core)
    assert all(f.uses_tensor_cores for f in Family if f not in cuda_core)


@pytest.mark.parametrize("fields, message", [
    (dict(block_k=8), "filter height must be 1..7"),
    (dict(block_k=0), "filter height must be 1..7"),
    (dict(vec=1), "vec=8"),
    (dict(num_stages=3), "num_stages=1"),
    (dict(block_m=24), "block_m: must be a power of two"),
    (dict(group_m=16), "holds group_m = 2..8 output rows"),
    (dict(group_m=4, num_stages=2), "with num_stages=1"),
    (dict(group_m=2, direction=Direction.BACKWARD_WEIGHT), "forward / backward-data"),
])
def test_dwroll_config_rules(fields, message):
    base = dict(direction=Direction.FORWARD, dtype=DType.BF16, ndim=2, family=Family.DWROLL, block_m=16,
                block_n=64, block_k=5, num_warps=4, num_stages=1, vec=8)
    assert KernelConfig(**base).name == "gconv_fwd_bf16_2d_dwroll_16x64x5_w4_s1_gm1_sk1_mg1_v8_i32"
    with pytest.raises(ConfigError, match=message):
        KernelConfig(**{**base, **fields})
    held = KernelConfig(**{**base, "group_m": 8})  # the most rows a program holds
    assert held.name == "gconv_fwd_bf16_2d_dwroll_16x64x5_w4_s1_gm8_sk1_mg1_v8_i32"


@pytest.mark.parametrize("fields, message", [
    (dict(block_k=8), "filter width must be 1..7"),
    (dict(block_k=0), "filter width must be 1..7"),
    (dict(vec=4), "is a dwrun tile, not dwrow"),
    (dict(num_stages=3), "num_stages=1"),
    (dict(group_m=2), "group_m=1"),
    (dict(block_n=24), "block_n: must be a power of two"),
    (dict(direction=Direction.FORWARD, split_k=1), "dwrow kernels run bwd_weight"),
])
def test_dwrow_config_rules(fields, message):
    base = dict(direction=Direction.BACKWARD_WEIGHT, dtype=DType.BF16, ndim=3, family=Family.DWROW, block_m=32,
                block_n=32, block_k=5, num_warps=4, num_stages=2, split_k=64, vec=8)
    assert KernelConfig(**base).name == "gconv_bwd_weight_bf16_3d_dwrow_32x32x5_w4_s2_gm1_sk64_mg1_v8_i32"
    with pytest.raises(ConfigError, match=message):
        KernelConfig(**{**base, **fields})


@pytest.mark.parametrize("fields, message", [
    (dict(block_m=17), "owns 1..16 output columns"),
    (dict(block_m=0), "owns 1..16 output columns"),
    (dict(block_k=8), "filter height must be 1..7"),
    (dict(vec=8), "vec=1"),
    (dict(num_stages=5), "num_stages=1"),
    (dict(num_stages=3), "backward-weight kernels load 1 or 2"),
    (dict(group_m=3), "group_m: must be a power of two"),
    (dict(block_n=24), "block_n: must be a power of two"),
    (dict(direction=Direction.FORWARD, split_k=1, ndim=3), "dwrun fwd kernels are 2D"),
    (dict(direction=Direction.BACKWARD_DATA, split_k=4), "split_k"),
])
def test_dwrun_config_rules(fields, message):
    base = dict(direction=Direction.BACKWARD_WEIGHT, dtype=DType.BF16, ndim=2, family=Family.DWRUN, block_m=7,
                block_n=16, block_k=7, num_warps=4, num_stages=2, group_m=8, split_k=64, vec=1)
    # block_m is a run of columns (7: any length up to 16), not a power of two
    assert KernelConfig(**base).name == "gconv_bwd_weight_bf16_2d_dwrun_7x16x7_w4_s2_gm8_sk64_mg1_v1_i32"
    with pytest.raises(ConfigError, match=message):
        KernelConfig(**{**base, **fields})


def test_channel_pairs_are_a_dwrun_tile():
    pair = KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.DWRUN, 8, 32, 3, 2, 2, 4, 1, 1, 2)
    assert pair.name == "gconv_fwd_bf16_2d_dwrun_8x32x3_w2_s2_gm4_sk1_mg1_v2_i32"
    assert parse_kernel_name(pair.name) == pair
    # four channels a thread, rows through shared memory (num_stages 3, 4: forward / backward-data only)
    quad = KernelConfig(Direction.BACKWARD_DATA, DType.BF16, 2, Family.DWRUN, 4, 32, 3, 2, 4, 8, 1, 1, 4)
    assert quad.name == "gconv_bwd_data_bf16_2d_dwrun_4x32x3_w2_s4_gm8_sk1_mg1_v4_i32"
    assert parse_kernel_name(quad.name) == quad
    for vec in (2, 4):
        with pytest.raises(ConfigError, match=f"vec: {vec} .channels a thread. is a dwrun tile, not igemm"):
            KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.IGEMM, 64, 64, 32, 4, 3, 8, 1, 1, vec)
    with pytest.raises(ConfigError, match="vec: must be 1, 2 or 4 .dwrun. or 8"):
        KernelConfig(Direction.FORWARD, DType.BF16, 2, Family.DWRUN, 8, 32, 3, 2, 2, 4, 1, 1, 3)


def test_halo_walks_any_row_count_from_4_to_32():
    """A halo kernel's group_m is the number of output rows a program walks (7, 14 and 28 divide the 14-, 28-
    and 56-row images), not a power of two; the other tile fields still are."""
    base = dict(direction=Direction.FORWARD, dtype=DType.BF16, ndim=2, family=Family.HALO, block_m=64, block_n=32,
                block_k=32, num_warps=4, num_stages=1, group_m=14, split_k=1, merge=2, vec=8)
    config = KernelConfig(**base)
    assert config.name == "gconv_fwd_bf16_2d_halo_64x32x32_w4_s1_gm14_sk1_mg2_v8_i32"
    assert parse_kernel_name(config.name) == config
    for rows in (3, 33):
        with pytest.raises(ConfigError, match=f"group_m: a halo kernel walks 4..32 output rows, got {rows}"):
            KernelConfig(**{**base, "group_m": rows})
    with pytest.raises(ConfigError, match="block_n: must be a power of two"):
        KernelConfig(**{**base, "block_n": 24})
