from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from tiledispatch.models.features import FEATURE_NAMES, FEATURE_SETS, SCHEMA_VERSION, FeatureEngine
from tiledispatch.native.problem import ConvProblem, Direction
from tiledispatch.native.rules import rule_set_configs
from tiledispatch.native.sampler import sample_problem
from tiledispatch.native.support import is_supported


def test_names_unique_and_every_shipped_set_is_still_made():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert FEATURE_SETS[SCHEMA_VERSION] == FEATURE_NAMES
    for version, names in FEATURE_SETS.items():
        assert set(names) <= set(FEATURE_NAMES), version


def test_rows_are_finite_vectorised_and_unaliased():
    engine = FeatureEngine("sm_90")
    rng = random.Random(3)
    for direction in Direction:
        pool = rule_set_configs("default", "sm_90", directions=[direction], dtypes=["bf16"])
        for stratum in ("dense", "grouped_small", "grouped_large", "depthwise", "depthwise_multiplier"):
            # the candidates selection ranks: kernels of the problem's canonical rank, on its canonical form (a
            # 3D problem that is a 2D one runs 3D and 2D kernels alike, which share their kernel features)
            problem = sample_problem(rng, stratum, direction=direction).canonical
            configs = [c for c in pool if c.ndim == problem.ndim and is_supported(problem, c)]
            x = engine.build(problem, configs)
            assert x.shape == (len(configs), len(engine.names))
            assert np.isfinite(x).all()
            # one config at a time gives the same rows as all at once
            for i in (0, len(configs) // 2, len(configs) - 1):
                np.testing.assert_array_equal(engine.build(problem, [configs[i]])[0], x[i])
            # distinct kernels never share a feature row
            assert len({row.tobytes() for row in x}) == len(configs)


def test_problem_features_follow_the_problem():
    engine = FeatureEngine("sm_90")
    problem = sample_problem(random.Random(1), "dense")
    config = [c for c in rule_set_configs("default", "sm_90", directions=["fwd"], dtypes=["bf16"])
              if is_supported(problem, c)][0]
    row = engine.build(problem, [config])[0]
    assert row[engine.index["p_batch"]] == problem.batch
    assert row[engine.index["p_gemm_m"]] == problem.gemm_mnk[0]
    assert row[engine.index["k_block_m"]] == config.block_m
    assert row[engine.index["h_sms"]] == 132


# ---- families: looked up by name; tma and unknown families are costed, never an error -----------

def _igemm_config(direction="fwd"):
    from tiledispatch.native.configs import Family, KernelConfig

    return KernelConfig(direction, "bf16", 2, Family.IGEMM, 128, 128, 64, 8, 3, 8, 1, 1, 8, False)


def _conv(pad: int, direction="fwd"):
    from tiledispatch.native.problem import ConvProblem

    return ConvProblem(direction, "bf16", 32, 1, 256, 256, (28, 28), (3, 3), (1, 1), (1, 1), (pad, pad), (pad, pad))


class _FutureFamily:
    """A family value neither the analytic model nor the engine knows (as a newer configs.py may add)."""

    def __init__(self, tensor_cores: bool):
        self.value, self.uses_tensor_cores = "future", tensor_cores


def _with_family(config, family):
    import dataclasses

    other = dataclasses.replace(config)
    object.__setattr__(other, "family", family)  # bypasses KernelConfig's check of known families
    return other


def test_one_hot_columns_are_looked_up_by_family_name():
    from tiledispatch.models import analytic
    from tiledispatch.models.features import ONE_HOT_FAMILIES

    engine = FeatureEngine("sm_90")
    one_hot = [f"k_{f}" for f in ONE_HOT_FAMILIES]
    assert [n for n in engine.names if n in set(one_hot)] == one_hot
    assert set(ONE_HOT_FAMILIES) <= set(analytic.FAMILY_CODES)
    assert analytic.family_code("never-heard-of") == analytic.UNKNOWN_FAMILY
    assert len(set(analytic.FAMILY_CODES.values())) == len(analytic.FAMILY_CODES)


def test_an_unknown_family_gets_the_cost_view_of_its_kind_and_finite_features():
    from tiledispatch.models.analytic import AnalyticPredictor

    predictor, engine = AnalyticPredictor("sm_90"), FeatureEngine("sm_90")
    igemm = _igemm_config()
    problem = _conv(1)
    tensor_core = _with_family(igemm, _FutureFamily(tensor_cores=True))
    t_igemm, t_future = predictor.predict_us(problem, [igemm, tensor_core])
    assert t_future == t_igemm  # the implicit-GEMM view, no extra term
    x = engine.build(problem, [igemm, tensor_core])
    assert np.isfinite(x).all()
    hot = [engine.index[f"k_{f}"] for f in ("igemm", "gmerge", "gemm1x1", "direct")]
    assert x[0, hot].tolist() == [1, 0, 0, 0] and x[1, hot].tolist() == [0, 0, 0, 0]
    # One that does not use the tensor cores is costed like a direct kernel of the same tile.
    from tiledispatch.native.configs import Family, KernelConfig

    direct = KernelConfig("fwd", "bf16", 2, Family.DIRECT, 64, 32, 1, 4, 1, 1, 1, 1, 8, False)
    cuda_core = _with_family(direct, _FutureFamily(tensor_cores=False))
    assert predictor.predict_us(problem, [cuda_core])[0] == predictor.predict_us(problem, [direct])[0]
    assert np.isfinite(engine.build(problem, [direct, cuda_core])).all()


def test_tma_is_igemm_plus_the_padded_input_copy():
    import dataclasses

    import pytest

    from tiledispatch.models import analytic
    from tiledispatch.native.configs import Family

    predictor, engine = analytic.AnalyticPredictor("sm_90"), FeatureEngine("sm_90")
    igemm = _igemm_config()
    tma = dataclasses.replace(igemm, family=Family.TMA)
    unpadded = _conv(0)
    assert analytic.padded_copy_elements(unpadded) == 0
    t_igemm, t_tma = predictor.predict_us(unpadded, [igemm, tma])
    assert t_tma == t_igemm
    padded = _conv(1)
    assert analytic.padded_copy_elements(padded) == 32 * 30 * 30 * 256
    b = predictor.breakdown(padded, analytic.config_table([igemm, tma]))
    # N·prod(in + pads)·C bf16 elements written once and read once, at the v8 bandwidth.
    bandwidth = predictor.spec.memory_bandwidth_gbs * 1e9 * analytic.BANDWIDTH_EFFICIENCY_V8
    copy_us = 2 * (32 * 30 * 30 * 256 * 2) / bandwidth * 1e6
    assert b["memory_us"][1] - b["memory_us"][0] == pytest.approx(copy_us)
    assert b["compute_us"][1] == b["compute_us"][0] and b["launches"].tolist() == [1, 2]
    x = engine.build(padded, [igemm, tma])
    assert np.isfinite(x).all() and x[1, engine.index["k_igemm"]] == 0 and x[0, engine.index["k_igemm"]] == 1


# ---- launch geometry: the grid the launchers really launch ---------------------------------------

class _Workspace:
    """Stands in for the workspace tensor ``plan`` slices (only its size and views are used)."""

    def numel(self) -> int:
        return 1 << 50

    def view(self, *args):
        return self

    def __getitem__(self, key):
        return self


def test_launch_grid_is_the_launchers_grid():
    import math

    from tiledispatch.native.launch import template_for

    engine = FeatureEngine("sm_90")
    column = engine.index["x_grid_log_ctas"]
    # halo's launch grid is its own group's (x_grid_log_ctas keeps the analytic tensor-core view for it, as
    # for gwalk's forward / backward-data rows: what the shipped models were trained on, features.py)
    halo_column = engine.index["x_halo_log_programs"]
    rng = random.Random(5)
    checked = halo_checked = 0
    for direction in Direction:
        pool = rule_set_configs("default", "sm_90", directions=[direction], dtypes=["bf16"])
        for stratum in ("dense", "grouped_small", "grouped_large", "depthwise", "depthwise_multiplier"):
            problem = sample_problem(rng, stratum, direction=direction)
            configs = [c for c in pool if is_supported(problem, c) and c.family.value != "tma"
                       and not (c.family.value == "gwalk" and direction is not Direction.BACKWARD_WEIGHT)]
            x = engine.build(problem, configs)
            for row, config in zip(x, configs):
                launches = template_for(config).plan(problem, config, None, None, None, _Workspace())
                main = [launch for launch in launches
                        if launch.program not in ("reduce", "pack", "tap_major", "repack")]
                if config.family.value == "halo":
                    assert row[halo_column] == np.log(math.prod(main[-1].grid)), config.name
                    halo_checked += 1
                else:
                    assert row[column] == np.log(math.prod(main[-1].grid)), config.name
                checked += 1
    assert checked > 100 and halo_checked > 0


@pytest.mark.parametrize("key", ["n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
                                 "n8|g8|c256|k256|in64x64|f3x3|s1x1|d2x2|pb2x2|pe2x2",
                                 "n32|g32|c256|k256|in56x56|f3x3|s2x2|d1x1|pb1x1|pe1x1"])
def test_gwalk_backward_weight_launch_features_are_its_walk(key):
    from tiledispatch.native.kernels.gwalk_geometry import weight_walk_geometry

    engine = FeatureEngine("sm_90")
    problem = ConvProblem.from_key(f"bwd_weight|bf16|2d|{key}")
    configs = [c for c in rule_set_configs("default", "sm_90", directions=["bwd_weight"], dtypes=["bf16"])
               if c.family.value == "gwalk" and is_supported(problem, c)]
    assert configs
    x = engine.build(problem, configs)
    for row, config in zip(x, configs):
        geo = weight_walk_geometry(problem, config)
        assert np.exp(row[engine.index["x_grid_log_ctas"]]) == pytest.approx(np.prod(geo["grid"]))
        lanes = np.exp(row[engine.index["x_launch_log_reduction_per_cta"]])
        assert lanes == pytest.approx(geo["lanes_per_split"])


# ---- schema 3: dwroll -------------------------------------------------------------------------

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "schema2-golden"


def test_schema_3_is_schema_2_plus_the_dwroll_group():
    from tiledispatch.models.features import DWROLL_FEATURES, LAUNCH_FEATURES, LAUNCH_NAMES, ONE_HOT_FAMILIES

    assert FEATURE_SETS[3] == FEATURE_SETS[2] + DWROLL_FEATURES
    assert FEATURE_SETS[2] == FEATURE_SETS[1] + LAUNCH_FEATURES and len(FEATURE_SETS[2]) == 106
    assert "k_dwroll" in DWROLL_FEATURES and "dwroll" in ONE_HOT_FAMILIES
    assert not set(FEATURE_SETS[2]) & set(DWROLL_FEATURES)
    assert {"x_launch_dwroll_halo"} <= set(LAUNCH_NAMES) - set(LAUNCH_FEATURES)


def test_schema_1_and_2_values_of_the_earlier_families_are_unchanged():
    """The committed rows were made by the schema-2 engine (fixtures/schema2-golden/make.py): every
    schema-2 value of igemm, gmerge, gemm1x1, direct and tma rows, and the schema-1 values of dwroll
    rows (its launch values now follow its launchers), must come out the same."""
    import json

    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.problem import ConvProblem

    document = json.loads((GOLDEN / "rows.json").read_text())
    expected = np.load(GOLDEN / "values.npz")["values"]
    assert tuple(document["feature_names"]) == FEATURE_SETS[2]
    engine = FeatureEngine("sm_90")
    columns = [engine.index[n] for n in FEATURE_SETS[2]]
    schema1 = [i for i, n in enumerate(FEATURE_SETS[2]) if n in set(FEATURE_SETS[1])]
    rows_of: dict[int, list[int]] = {}
    for i, (problem_index, _) in enumerate(document["rows"]):
        rows_of.setdefault(problem_index, []).append(i)
    families = set()
    for problem_index, rows in rows_of.items():
        problem = ConvProblem.from_dict(document["problems"][problem_index])
        configs = [parse_kernel_name(document["rows"][i][1]) for i in rows]
        got = engine.build(problem, configs)[:, columns]
        for row, i, config in zip(got, rows, configs):
            families.add(config.family.value)
            keep = schema1 if config.family.value == "dwroll" else slice(None)
            np.testing.assert_allclose(row[keep], expected[i][keep], rtol=1e-12, atol=1e-12, err_msg=config.name)
    assert families == {"igemm", "gmerge", "gemm1x1", "direct", "tma", "dwroll"}


def _dwroll_problems():
    from tiledispatch.native.problem import ConvProblem

    out = []
    for direction in Direction:
        for size, filt, stride, batch, channels in (
                ((56, 56), (3, 3), (1, 1), 16, 96), ((112, 112), (3, 3), (1, 1), 1, 32),
                ((14, 14), (5, 5), (1, 1), 64, 480), ((7, 7), (7, 7), (1, 1), 128, 384),
                ((28, 28), (3, 1), (1, 1), 8, 64), ((40, 33), (5, 5), (1, 2), 2, 144),
                ((8, 28, 28), (3, 3, 3), (1, 1, 1), 2, 64), ((16, 14, 14), (1, 5, 5), (2, 1, 1), 1, 240)):
            if direction is Direction.BACKWARD_DATA and any(s != 1 for s in stride):
                continue
            pad = tuple(f // 2 for f in filt)
            out.append(ConvProblem(direction, "bf16", batch, channels, channels, channels, size, filt, stride,
                                   (1,) * len(size), pad, pad))
    return out


def test_dwroll_launch_features_are_the_dwroll_launchers():
    import math

    import pytest

    from tiledispatch.native.kernels import dwroll
    from tiledispatch.native.launch import template_for

    engine = FeatureEngine("sm_90")
    col = engine.index
    checked = set()
    for problem in _dwroll_problems():
        ndims = [problem.ndim]
        configs = [c for c in rule_set_configs("full", "sm_90", directions=[problem.direction], dtypes=["bf16"],
                                               ndims=ndims) if c.family.value == "dwroll" and is_supported(problem, c)]
        assert configs, problem.key
        x = engine.build(problem, configs)
        assert np.isfinite(x).all()
        for row, config in zip(x, configs):
            launches = template_for(config).plan(problem, config, None, None, None, _Workspace())
            (roll,) = [launch for launch in launches if launch.program == "roll"]
            grid = math.prod(roll.grid)
            assert row[col["x_grid_log_ctas"]] == np.log(grid), config.name
            assert row[col["x_grid_waves"]] == grid / 132
            f_h = config.block_k
            per_thread = config.block_m * config.block_n // (32 * config.num_warps)
            out_w = (problem.input_size if problem.direction is Direction.BACKWARD_DATA else problem.output_size)[-1]
            assert row[col["x_launch_tile_rows_useful"]] == out_w / (-(-out_w // config.block_m) * config.block_m)
            assert row[col["x_launch_direct_tap_block"]] == 0
            if problem.direction is Direction.BACKWARD_WEIGHT:
                rows, per_split = dwroll.weight_tiling(problem, config)
                assert roll.args[-2:] == (rows, per_split)
                out_h = problem.output_size[-2]
                strips = problem.batch * math.prod(problem.output_size[:-2]) * -(-out_w // config.block_m)
                items = strips * -(-out_h // rows)
                assert row[col["x_launch_split_used"]] == pytest.approx(-(-items // per_split) / config.split_k)
                assert row[col["x_launch_log_reduction_per_cta"]] == pytest.approx(
                    math.log(per_split * rows * config.block_m))
                assert row[col["x_launch_log_steps_per_cta"]] == pytest.approx(math.log(per_split * (rows + f_h - 1)))
                live = (f_h * f_h + f_h + 1) * per_thread
                workspace = config.split_k * problem.weight_elements * 4.0 if config.split_k > 1 else 0.0
                assert row[col["x_launch_log_splitk_workspace_bytes"]] == pytest.approx(np.log1p(workspace))
            else:
                rows = dwroll.data_rows(problem, config)
                assert roll.args[-1] == rows
                f_d = problem.filter_size[0] if problem.ndim == 3 else 1
                assert row[col["x_launch_split_used"]] == 1
                assert row[col["x_launch_log_reduction_per_cta"]] == pytest.approx(math.log(problem.filter_taps))
                assert row[col["x_launch_log_steps_per_cta"]] == pytest.approx(math.log((rows + f_h - 1) * f_d))
                live = ((config.group_m if config.group_m > 1 else f_h) + 1) * per_thread  # held rows or F_H
            assert row[col["x_launch_dwroll_halo"]] == (f_h - 1) / rows
            assert row[col["k_dwroll_live_values"]] == live
            assert row[col["k_dwroll"]] == 1 and row[[col[f"k_{f}"] for f in ("igemm", "gmerge", "gemm1x1",
                                                                                "direct")]].sum() == 0
            checked.add((problem.direction, rows > 1, problem.ndim))
    assert len(checked) >= 6, checked


def test_the_dwroll_group_is_zero_on_other_families_and_launch_off_zeroes_only_launch_names():
    from tiledispatch.models.features import DWROLL_FEATURES, LAUNCH_NAMES

    engine = FeatureEngine("sm_90")
    problem = _dwroll_problems()[0]
    configs = [c for c in rule_set_configs("default", "sm_90", directions=[problem.direction], dtypes=["bf16"],
                                           ndims=[2]) if is_supported(problem, c)]
    dw = np.array([c.family.value == "dwroll" for c in configs])
    assert dw.any() and (~dw).any()
    x = engine.build(problem, configs)
    group = [engine.index[n] for n in DWROLL_FEATURES]
    assert (x[~dw][:, group] == 0).all() and (x[dw][:, group] > 0).all()
    off = engine.build(problem, configs, launch=False)
    launch = [engine.index[n] for n in LAUNCH_NAMES]
    assert (off[:, launch] == 0).all()
    rest = [i for i in range(len(engine.names)) if i not in set(launch)]
    np.testing.assert_array_equal(off[:, rest], x[:, rest])


# ---- schema 4: halo ---------------------------------------------------------------------------


def test_schema_4_is_schema_3_plus_the_halo_group():
    from tiledispatch.models.features import HALO_FEATURES, LAUNCH_FEATURES, LAUNCH_NAMES

    assert FEATURE_SETS[4] == FEATURE_SETS[3] + HALO_FEATURES
    assert not set(FEATURE_SETS[3]) & set(HALO_FEATURES)
    # the one-hot is computed with launch off too; the walk's geometry is a launch name
    assert set(LAUNCH_NAMES) - set(LAUNCH_FEATURES) == {"x_launch_dwroll_halo", *HALO_FEATURES[1:]}


def test_halo_features_are_its_walk():
    """ResNeXt-50's conv2 layer (n32 g32 c128 56x56 3x3) on the 64x32x32 tile walking 28 rows over 8 merged
    groups: 64-column streams (56 + 2 pad columns, padded to a power of two), 2 row chunks, 32 x 2 x 1
    programs a channel block, 32 / 8 channel blocks; 71,680 B of shared memory, three programs an SM."""
    import math

    from tiledispatch.models.features import HALO_FEATURES
    from tiledispatch.native.configs import parse_kernel_name
    from tiledispatch.native.problem import ConvProblem

    engine = FeatureEngine("sm_90")
    config = parse_kernel_name("gconv_fwd_bf16_2d_halo_64x32x32_w4_s1_gm28_sk1_mg8_v8_i32")
    problem = ConvProblem(Direction.FORWARD, "bf16", 32, 32, 128, 128, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1),
                          (1, 1))
    assert config.smem_bytes_estimate == 71_680 and engine.spec.smem_per_sm_bytes // 71_680 == 3
    row = engine.build(problem, [config])[0]
    got = {name: row[engine.index[name]] for name in HALO_FEATURES}
    assert got["k_halo"] == 1.0
    assert got["x_halo_log_programs"] == pytest.approx(math.log(256))
    assert got["x_halo_waves"] == pytest.approx(256 / (engine.spec.sms * 3))
    assert got["x_halo_useful"] == pytest.approx(56 / 64)  # rows: 2 x 28 = 56 exactly; columns 56 of 64
    assert got["x_halo_prologue"] == pytest.approx(2 / 28)
    assert got["x_halo_tap_fill"] == pytest.approx(1.0)  # 8 groups x 4 channels fill the 32 x 32 taps
    # a 32-row walk over the same image computes 64 rows of 56; one group in a 32 x 32 tap: 1/64 of it
    walk32 = parse_kernel_name("gconv_fwd_bf16_2d_halo_64x32x32_w4_s1_gm32_sk1_mg1_v8_i32")
    row = engine.build(problem, [walk32])[0]
    assert row[engine.index["x_halo_useful"]] == pytest.approx(56 / 64 * 56 / 64 * 4 / 32)
    assert row[engine.index["x_halo_tap_fill"]] == pytest.approx(16 / 1024)


def test_the_halo_group_is_zero_on_other_families_and_on_the_weight_gradient():
    from tiledispatch.models.features import HALO_FEATURES
    from tiledispatch.native.problem import ConvProblem

    engine = FeatureEngine("sm_90")
    group = [engine.index[n] for n in HALO_FEATURES]
    for direction in (Direction.FORWARD, Direction.BACKWARD_DATA):
        problem = ConvProblem(direction, "bf16", 8, 32, 256, 256, (28, 28), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
        configs = [c for c in rule_set_configs("default", "sm_90", directions=[direction], dtypes=["bf16"],
                                               ndims=[2]) if is_supported(problem, c)]
        halo = np.array([c.family.value == "halo" for c in configs])
        assert halo.any() and (~halo).any()
        x = engine.build(problem, configs)
        assert (x[~halo][:, group] == 0).all() and (x[halo][:, group] > 0).all()
        assert np.isfinite(x).all()
        off = engine.build(problem, configs, launch=False)
        assert (off[halo][:, group[0]] == 1).all() and (off[:, group[1:]] == 0).all()
