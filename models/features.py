"""The feature engine (DESIGN §7): ordered, named features for (problem, kernel) pairs.

One engine serves training and serving. :meth:`FeatureEngine.build` turns one problem and many
candidate configs into an ``(n_configs, n_features)`` float64 array, vectorised over the configs
(the problem's own features are computed once and broadcast). Groups, in order:

* problem (``p_``): sizes and their logs, output sizes, filter, stride, dilation, pads (total
  and asymmetry), group density ``G / C``, class flags (dense, grouped, depthwise,
  depthwise-multiplier), channel alignment (``C/G mod 8`` …), FLOPs, minimum bytes, arithmetic
  intensity ``FLOPs / bytes``, the implicit-GEMM ``M, N, K`` of one group (DESIGN §3), whether
  64-bit indexing is needed;
* kernel (``k_``): every field of :class:`KernelConfig` (family one-hot, block sizes, warps,
  stages, ``group_m``, split-K, merge, vec, index64) plus shared-memory and accumulator estimates
  — distinct kernels never share a row (no aliasing). The one-hot columns exist for igemm, gmerge,
  gemm1x1 and direct (schema 0 on) and dwroll (``k_dwroll``, schema 3) and are looked up by family
  name; a family without a column (``tma``, or one the engine does not know) has them all at 0 and
  its interaction features take the cost view ``models.analytic`` gives it (igemm's for tma, plus
  its padded input copy; the direct view for CUDA-core families, dwroll included);
* interaction (``x_``): tile quantisation per GEMM dimension ``dim / (ceil(dim / block)·block)``,
  CTAs, resident CTAs per SM, waves ``ctas / (SMs·per_sm)`` and last-wave fill, reduction steps
  per CTA, executed / useful FLOPs, bytes and FLOPs per CTA tile, and the analytic fallback's
  compute, memory and total time (``models.analytic``, whose version is in the feature name so a
  formula change can never silently change a shipped model's inputs);
* hardware (``h_``): SMs, shared memory per SM, L2, bandwidth, peak tensor-core and FMA rates,
  clock (constant per device: they let one model file describe which device it was trained for
  and cost nothing at inference);
* launch geometry (``x_grid_``, ``x_launch_``, schema 2): see :data:`LAUNCH_FEATURES`;
* dwroll (schema 3, :data:`DWROLL_FEATURES`): the ``k_dwroll`` one-hot, the fp32 values a dwroll
  thread keeps live, and the row-chunk halo fraction. From schema 3 on, the launch group also
  follows the dwroll launchers (``native/kernels/dwroll.py``) for dwroll rows;
* halo (schema 4, :data:`HALO_FEATURES`): the ``k_halo`` one-hot and the walk's geometry
  (``native/kernels/halo_tiling.py``): programs, waves by shared memory, the share of computed outputs
  that are real, the ring's prologue rows, the block-diagonal tap fill.

Every feature is finite (no NaN: LightGBM's missing-value paths are never taken).
A feature's name is its meaning: a feature whose definition changes gets a new name (as the
analytic ones carry the analytic model's version), never a new meaning under an old name.
``SCHEMA_VERSION`` numbers the engine's feature set (:data:`FEATURE_SETS`: the names each version
made); a model records the names it was trained on, and :mod:`models.predictor` maps them onto
the engine's columns by name, so older models keep loading while the engine only grows. A family
a model never saw in training (e.g. dwroll for a schema-1/2 model, which has no ``k_dwroll``) is
left out of that model's rankings (:attr:`models.predictor.TrainedPredictor.seen_families`).

Schema 3 changed no value of an earlier name for the families that existed before it (igemm,
gmerge, gemm1x1, direct, tma: ``tests/models/fixtures/schema2-golden`` holds schema-2 rows of
theirs made before it, and ``tests/models/test_features.py`` compares). It did give dwroll rows
their launchers' geometry under the schema-2 launch names (before, a dwroll row had the analytic
CTAs there, as any family without a launcher formula): no model had been trained on a dwroll row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import numpy as np

from tiledispatch.models import analytic
from tiledispatch.native.arch import ArchSpec, get_arch
from tiledispatch.native.configs import KernelConfig
from tiledispatch.native.kernels import channel_pad_geometry, dwroll_tiling
from tiledispatch.native.kernels.base import as3d
from tiledispatch.native.kernels.direct_tiling import bwd_weight_tiling
from tiledispatch.native.kernels.gwalk_geometry import weight_walk_geometry
from tiledispatch.native.kernels.halo_tiling import halo_geometry
from tiledispatch.native.problem import ConvProblem, Direction, ProblemClass

SCHEMA_VERSION = 5

PROBLEM_FEATURES = (
    "p_ndim", "p_batch", "p_groups", "p_in_channels", "p_out_channels", "p_c_per_group", "p_k_per_group",
    "p_log_batch", "p_log_groups", "p_log_c_per_group", "p_log_k_per_group", "p_group_density",
    "p_in_d", "p_in_h", "p_in_w", "p_out_d", "p_out_h", "p_out_w", "p_log_in_positions", "p_log_out_positions",
    "p_filter_d", "p_filter_h", "p_filter_w", "p_taps", "p_is_1x1",
    "p_stride_d", "p_stride_h", "p_stride_w", "p_stride_max", "p_dilation_max", "p_pad_total", "p_pad_asymmetric",
    "p_dense", "p_grouped", "p_depthwise", "p_depthwise_multiplier",
    "p_cg_mod8", "p_kg_mod8", "p_c_mod8", "p_k_mod8", "p_cg_mod16", "p_kg_mod16",
    "p_log_flops", "p_log_bytes", "p_log_intensity",
    "p_gemm_m", "p_gemm_n", "p_gemm_k", "p_log_gemm_m", "p_log_gemm_n", "p_log_gemm_k", "p_needs_int64",
)

KERNEL_FEATURES = (
    "k_igemm", "k_gmerge", "k_gemm1x1", "k_direct", "k_block_m", "k_block_n", "k_block_k", "k_num_warps",
    "k_num_stages", "k_group_m", "k_split_k", "k_merge", "k_vec", "k_index64", "k_smem_bytes", "k_acc_registers",
)

#: The families with a one-hot column (``k_<family>``), looked up by name in the config table's
#: family codes (``analytic.FAMILY_CODES``), never by position in the ``Family`` enum. The first four
#: are in the kernel group (schema 0 on), ``k_dwroll`` in :data:`DWROLL_FEATURES` (schema 3).
ONE_HOT_FAMILIES = ("igemm", "gmerge", "gemm1x1", "direct", "dwroll")
_KERNEL_GROUP_ONE_HOT = ONE_HOT_FAMILIES[:4]

_ANALYTIC = f"analytic_v{analytic.VERSION}"

INTERACTION_FEATURES = (
    "x_tile_eff_m", "x_tile_eff_n", "x_tile_eff_k", "x_tile_eff", "x_log_ctas", "x_per_sm", "x_waves",
    "x_last_wave_fill", "x_log_k_steps", "x_work_efficiency", "x_log_cta_flops", "x_log_cta_bytes",
    "x_cta_intensity", "x_merge_fill", "x_log_split_reduction",
    f"x_{_ANALYTIC}_log_compute_us", f"x_{_ANALYTIC}_log_memory_us", f"x_{_ANALYTIC}_log_us",
    "x_log_bound_us",
)

HARDWARE_FEATURES = (
    "h_sms", "h_smem_per_sm_kib", "h_l2_mib", "h_bandwidth_gbs", "h_peak_tflops", "h_fma_tflops", "h_clock_mhz",
)

#: Launch geometry (``x_grid_``/``x_launch_``), as the kernel launchers compute it (the analytic view
#: above approximates the direct backward-weight grid as one program per tap; the launcher blocks
#: taps by :func:`~tiledispatch.native.kernels.direct_tiling.bwd_weight_tiling`): CTAs of the main
#: launch, waves over the SMs (plain and with the analytic occupancy) and last-wave fill, reduction
#: elements and inner-loop steps per CTA, the fraction of the ``split_k`` splits that get work, the
#: split-K fp32 workspace (bytes, and relative to the problem's minimum bytes), and the direct
#: backward-weight tiling (tap block, useful fraction of the tile rows).
#:
#: dwroll rows (schema 3 on; :func:`dwroll_geometry`, as ``native/kernels/dwroll.py`` plans them):
#: CTAs of the rolling launch (forward / backward-data: channel blocks × column strips × row chunks ×
#: N × out_D, over the extents the kernel runs, dY's for backward-data; backward-weight: channel
#: blocks × F_D × split_k), reduction per CTA = the taps of one output's dot (forward / backward-data)
#: or ``ITEMS_PER_SPLIT·ROWS·BLOCK_W`` dY positions (backward-weight), steps per CTA = the row steps
#: ``(ROWS + F_H − 1)·F_D`` (forward / backward-data) or ``ITEMS_PER_SPLIT·(ROWS + F_H − 1)``
#: (backward-weight), split use = splits with items / split_k, tap block 0, and as useful tile rows
#: the column-strip fill ``out_W / (ceil(out_W / BLOCK_W)·BLOCK_W)``.
LAUNCH_FEATURES = (
    "x_grid_log_ctas", "x_grid_waves", "x_grid_last_wave_fill", "x_grid_occ_waves", "x_grid_occ_last_wave_fill",
    "x_launch_log_reduction_per_cta", "x_launch_log_steps_per_cta", "x_launch_split_used",
    "x_launch_log_splitk_workspace_bytes", "x_launch_splitk_workspace_ratio",
    "x_launch_direct_tap_block", "x_launch_tile_rows_useful",
)

#: Schema 3: dwroll's one-hot; the fp32 values a dwroll thread keeps live in the plain (num_stages 1)
#: walk — ``(F_H + 1)·e`` forward / backward-data (F_H rolling accumulators and the input tile),
#: ``(F_H² + F_H + 1)·e`` backward-weight (F_H² accumulators, the F_H-row dY window and the input
#: tile), ``e = BLOCK_W·BLOCK_N / (32·warps)``, ``F_H`` = ``block_k`` (the next row's raw tiles that
#: the num_stages-2 kernels also hold, and ``native/rules.py`` adds against spills, are not in it:
#: ``k_num_stages`` tells the two apart, and the name keeps the meaning it was trained with); and the row-chunk
#: halo fraction ``(F_H − 1) / ROWS`` (input rows a chunk reads beyond its own, per row). All three
#: are 0 on rows of other families; the halo (a launch feature) is 0 too when the launch group is off.
DWROLL_FEATURES = ("k_dwroll", "k_dwroll_live_values", "x_launch_dwroll_halo")

#: Schema 4: the halo family's walk (``native/kernels/halo_tiling.py``; every one 0 on rows of other
#: families): its one-hot; log of its programs; waves, programs / (SMs × programs an SM's shared memory
#: holds); useful, the share of the outputs its programs compute (BLOCK_M rows × ROWS walked × BLOCK_N
#: channels each: padded stream columns, rows past the image, streams past the batch, channels past the
#: merged groups) that are real; prologue, ``(rows read − stride·ROWS) / ROWS`` (the input rows a chunk reads
#: beyond its walk, per walked row: ``2 / ROWS`` at stride 1, ``1 / ROWS`` on the stride-2 walk of session 32,
#: whose programs' shared memory — a ring of 5, not 4 — the waves count too); and the tap fill,
#: ``MERGE·RG·MERGE·OG / (BLOCK_K·BLOCK_N)`` useful of the block-diagonal tap matrices' products — hence the
#: useful MACs of each wgmma, ``fill / MERGE``.
HALO_FEATURES = ("k_halo", "x_halo_log_programs", "x_halo_waves", "x_halo_useful", "x_halo_prologue",
                 "x_halo_tap_fill")

#: Schema 5: channel padding (``pad_channels``, ``native/kernels/channel_pad.py``; both 0 on other rows): the
#: flag, which tells a padded kernel's row from its v8 tile's (the tile's own fields are the same), and the
#: bytes its copies move (operands padded into the workspace, a padded result copied back) over the problem's
#: minimum bytes.
PAD_FEATURES = ("k_pad_channels", "x_pad_copy_ratio")

#: The names ``FeatureEngine.build(..., launch=False)`` leaves 0 (the costliest to compute).
LAUNCH_NAMES = LAUNCH_FEATURES + ("x_launch_dwroll_halo",) + HALO_FEATURES[1:]

_V1_NAMES = PROBLEM_FEATURES + KERNEL_FEATURES + INTERACTION_FEATURES + HARDWARE_FEATURES
_V2_NAMES = _V1_NAMES + LAUNCH_FEATURES
_V3_NAMES = _V2_NAMES + DWROLL_FEATURES
_V4_NAMES = _V3_NAMES + HALO_FEATURES
FEATURE_NAMES: tuple[str, ...] = _V4_NAMES + PAD_FEATURES

#: Every feature set the engine has shipped, by schema version (each a subset of the next; the
#: engine must keep making every name listed here). 0: problem sizes and kernel fields only;
#: 1: + derived problem features, interaction and hardware groups; 2: + launch geometry;
#: 3: + dwroll (its one-hot, live fp32 values per thread, row-chunk halo; and its launchers'
#: geometry under the launch names); 4: + the halo family's walk; 5: + channel padding.
FEATURE_SETS: dict[int, tuple[str, ...]] = {
    0: ("p_ndim", "p_batch", "p_groups", "p_in_channels", "p_out_channels", "p_c_per_group", "p_k_per_group",
        "p_in_d", "p_in_h", "p_in_w", "p_out_d", "p_out_h", "p_out_w", "p_filter_d", "p_filter_h", "p_filter_w",
        "p_stride_d", "p_stride_h", "p_stride_w", "p_dilation_max", "p_pad_total", "p_log_flops",
        "p_gemm_m", "p_gemm_n", "p_gemm_k", *KERNEL_FEATURES),
    1: _V1_NAMES,
    2: _V2_NAMES,
    3: _V3_NAMES,
    4: _V4_NAMES,
    5: FEATURE_NAMES,
}



def _log(x):
    return np.log(np.maximum(x, 1e-30))


def _cdiv(a, b):
    return -(-a // b)


def _pad3(values: Sequence[int], fill: int) -> tuple[int, int, int]:
    return (fill,) * (3 - len(values)) + tuple(values)


def dwroll_geometry(p: ConvProblem, block_m: np.ndarray, block_n: np.ndarray, block_k: np.ndarray,
                    num_warps: np.ndarray, split_k: np.ndarray, group_m: np.ndarray) -> dict[str, np.ndarray]:
    """The launch of dwroll configs (int64 columns of their fields) on ``p``, as
    ``native/kernels/dwroll.py`` plans it (:mod:`~tiledispatch.native.kernels.dwroll_tiling`, vectorised
    over the configs): ``grid`` (CTAs of the rolling launch), ``rows`` (ROWS), ``items_per_split``
    (backward-weight; 0 otherwise), ``items`` (backward-weight work items), and the feature values
    ``reduction``, ``steps``, ``split_used``, ``useful``, ``halo``, ``live_values`` (see
    :data:`LAUNCH_FEATURES` and :data:`DWROLL_FEATURES`). ``group_m`` > 1: forward / backward-data programs
    holding that many output rows (ROWS = ``group_m``; live: the held rows and one input tile)."""
    f_d, f_h, _ = _pad3(p.filter_size, 1)
    channels = p.in_channels
    per_thread = block_m * block_n // (32 * num_warps)
    if p.direction is Direction.BACKWARD_WEIGHT:
        out_d, out_h, out_w = _pad3(p.output_size, 1)
        strips = p.batch * out_d * _cdiv(out_w, block_m)
        rows = dwroll_tiling.row_chunk(strips * _cdiv(dwroll_tiling.TARGET_PROGRAMS, split_k), out_h, f_h)
        items = strips * _cdiv(out_h, rows)
        per_split = _cdiv(items, split_k)
        grid = _cdiv(channels, block_n) * f_d * split_k
        reduction = per_split * rows * block_m
        steps = per_split * (rows + block_k - 1)
        split_used = _cdiv(items, per_split) / split_k
        live = (block_k * block_k + block_k + 1) * per_thread
    else:
        # Backward-data runs the forward kernel over dY: its "out" extents are the problem's input's.
        extents = p.output_size if p.direction is Direction.FORWARD else p.input_size
        out_d, out_h, out_w = _pad3(extents, 1)
        strips = _cdiv(channels, block_n) * _cdiv(out_w, block_m) * p.batch * out_d
        held = group_m > 1
        rows = np.where(held, group_m, dwroll_tiling.row_chunk(strips, out_h, f_h))
        grid = strips * _cdiv(out_h, rows)
        items = per_split = np.zeros_like(block_m)
        reduction = np.full(len(block_m), p.filter_taps)  # C/G = 1: one output's dot runs over the taps
        steps = (rows + block_k - 1) * f_d
        split_used = np.ones(len(block_m))
        live = (np.where(held, group_m, block_k) + 1) * per_thread
    return {"grid": grid, "rows": rows, "items": items, "items_per_split": per_split, "reduction": reduction,
            "steps": steps, "split_used": split_used, "useful": out_w / (_cdiv(out_w, block_m) * block_m),
            "halo": (block_k - 1) / rows, "live_values": live}


@dataclass(frozen=True)
class ConfigTable:
    """The candidates as int64 columns (one per config field), built once per candidate list."""

    configs: tuple[KernelConfig, ...]
    columns: dict[str, np.ndarray] = field(compare=False)

    @classmethod
    def of(cls, configs: Sequence[KernelConfig]) -> ConfigTable:
        table = analytic.config_table(configs)
        table["group_m"] = np.array([c.group_m for c in configs], dtype=np.int64)
        table["smem"] = np.array([c.smem_bytes_estimate for c in configs], dtype=np.int64)
        table["pad_channels"] = np.array([c.pad_channels for c in configs], dtype=np.int64)
        return cls(tuple(configs), table)

    def __len__(self) -> int:
        return len(self.configs)

    @cached_property
    def names(self) -> tuple[str, ...]:
        """The configs' kernel names (computed on first use, once per cached table)."""
        return tuple(c.name for c in self.configs)


@lru_cache(maxsize=512)
def _table(configs: tuple[KernelConfig, ...]) -> ConfigTable:
    """A server ranks the same candidate lists again and again (one per problem signature): the
    per-config columns are built once per list (hashing the tuple costs a quarter of building it)."""
    return ConfigTable.of(configs)


def table_of(configs: Sequence[KernelConfig] | ConfigTable) -> ConfigTable:
    """``configs`` as a :class:`ConfigTable` (built once per candidate list, see :func:`_table`)."""
    return configs if isinstance(configs, ConfigTable) else _table(tuple(configs))


class FeatureEngine:
    """Features for one device spec. ``names`` is the ordered list every row follows."""

    names: tuple[str, ...] = FEATURE_NAMES
    schema_version: int = SCHEMA_VERSION

    def __init__(self, arch: ArchSpec | str = "sm_90"):
        self.spec = get_arch(arch) if isinstance(arch, str) else arch
        self._analytic = analytic.AnalyticPredictor(self.spec)
        self.index = {name: i for i, name in enumerate(self.names)}

    # ---- problem ---------------------------------------------------------------------------
    def problem_vector(self, p: ConvProblem) -> np.ndarray:
        """The problem group, in ``PROBLEM_FEATURES`` order."""
        in_d, in_h, in_w = _pad3(p.input_size, 1)
        out_d, out_h, out_w = _pad3(p.output_size, 1)
        f_d, f_h, f_w = _pad3(p.filter_size, 1)
        s_d, s_h, s_w = _pad3(p.stride, 1)
        cg, kg = p.c_per_group, p.k_per_group
        m, n, k = p.gemm_mnk
        cls = p.problem_class
        in_pos, out_pos = p.batch * math.prod(p.input_size), p.batch * math.prod(p.output_size)
        values = (
            p.ndim, p.batch, p.groups, p.in_channels, p.out_channels, cg, kg,
            math.log(p.batch), math.log(p.groups), math.log(cg), math.log(kg), p.groups / p.in_channels,
            in_d, in_h, in_w, out_d, out_h, out_w, math.log(in_pos), math.log(out_pos),
            f_d, f_h, f_w, p.filter_taps, float(p.filter_taps == 1),
            s_d, s_h, s_w, max(p.stride), max(p.dilation), sum(p.pad_begin) + sum(p.pad_end),
            float(p.pad_begin != p.pad_end),
            float(cls is ProblemClass.DENSE), float(cls is ProblemClass.GROUPED), float(cls is ProblemClass.DEPTHWISE),
            float(cls is ProblemClass.DEPTHWISE_MULTIPLIER),
            float(cg % 8 == 0), float(kg % 8 == 0), float(p.in_channels % 8 == 0), float(p.out_channels % 8 == 0),
            float(cg % 16 == 0), float(kg % 16 == 0),
            math.log(p.flops), math.log(p.min_bytes), math.log(p.flops / p.min_bytes),
            m, n, k, math.log(m), math.log(n), math.log(k), float(p.needs_int64_index),
        )
        return np.asarray(values, dtype=np.float64)

    def hardware_vector(self, p: ConvProblem) -> np.ndarray:
        s = self.spec
        return np.asarray((s.sms, s.smem_per_sm_bytes / 1024, s.l2_bytes / 2**20, s.memory_bandwidth_gbs,
                           s.peak_tflops(p.dtype), s.peak_fp32_fma_tflops, s.boost_clock_mhz), dtype=np.float64)

    # ---- kernel and interaction -------------------------------------------------------------
    @staticmethod
    def kernel_matrix(table: ConfigTable) -> np.ndarray:
        t = table.columns
        fam = t["family"]
        bm, bn, bk, warps, stages = t["block_m"], t["block_n"], t["block_k"], t["num_warps"], t["num_stages"]
        one_hot = tuple(fam == analytic.FAMILY_CODES[name] for name in _KERNEL_GROUP_ONE_HOT)
        cols = (*one_hot, bm, bn, bk, warps, stages, t["group_m"], t["split_k"],
                t["merge"], t["vec"], t["index64"], t["smem"], bm * bn // (32 * warps))
        return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])

    def interaction_matrix(self, p: ConvProblem, table: ConfigTable, breakdown: dict | None = None) -> np.ndarray:
        t = table.columns
        bm, bn, bk = t["block_m"], t["block_n"], t["block_k"]
        split, merge = t["split_k"], t["merge"]
        direct = t["cuda_core"] == 1  # the direct (CUDA-core) view, as in analytic.py
        cg, kg, taps = p.c_per_group, p.k_per_group, p.filter_taps
        out_pos = p.batch * math.prod(p.output_size)
        in_pos = p.batch * math.prod(p.input_size)
        # GEMM dims each CTA tiles (tensor-core families; analytic.py has the same view).
        if p.direction is Direction.BACKWARD_WEIGHT:
            dim_m, dim_n, dim_k = merge * kg, merge * cg, _cdiv(out_pos, split)
        else:
            rows, cols, red = (out_pos, kg, cg) if p.direction is Direction.FORWARD else (in_pos, cg, kg)
            dim_m, dim_n, dim_k = np.full_like(bm, rows), merge * cols, merge * red
        # Direct: block_m positions × block_n channels (bwd_weight: reduction over positions).
        if p.direction is Direction.BACKWARD_WEIGHT:
            d_m, d_n, d_k = _cdiv(out_pos, split), np.full_like(bm, p.groups * kg), np.ones_like(bm)
        elif p.direction is Direction.FORWARD:
            d_m, d_n, d_k = np.full_like(bm, out_pos), np.full_like(bm, p.groups * kg), np.ones_like(bm)
        else:
            d_m, d_n, d_k = np.full_like(bm, in_pos), np.full_like(bm, p.groups * cg), np.ones_like(bm)
        dim_m, dim_n, dim_k = (np.where(direct, a, b) for a, b in ((d_m, dim_m), (d_n, dim_n), (d_k, dim_k)))
        eff_m = dim_m / (_cdiv(dim_m, bm) * bm)
        eff_n = dim_n / (_cdiv(dim_n, bn) * bn)
        eff_k = dim_k / (_cdiv(dim_k, bk) * bk)
        b = self._analytic.breakdown(p, t) if breakdown is None else breakdown
        ctas, per_sm, cta_flops = b["ctas"], b["per_sm"], b["cta_flops"]
        slots = self.spec.sms * per_sm
        waves = ctas / slots
        last_fill = ctas / (np.ceil(waves) * slots)
        # Tensor-core steps per CTA: backward-weight's dim_k is already per split; forward / backward-data
        # split their (tap, channel block) steps `split` ways (1 unless split-K).
        k_steps = np.where(direct, np.where(p.direction is Direction.BACKWARD_WEIGHT, _cdiv(dim_m, bm), 1),
                           _cdiv(dim_k, bk) if p.direction is Direction.BACKWARD_WEIGHT
                           else _cdiv(_cdiv(dim_k, bk) * taps, split))
        executed = ctas * cta_flops
        itemsize = p.dtype.itemsize
        cta_bytes = np.where(direct, (bm + bn) * itemsize * np.maximum(taps, 1),
                             (bm + bn) * k_steps * bk * itemsize)
        merge_fill = np.where(t["family"] == analytic.FAMILY_CODES["gmerge"],
                              np.minimum(1.0, merge * np.maximum(cg, kg) / np.maximum(bn, 1)), 1.0)
        bound_us = max(p.flops / (self.spec.peak_tflops(p.dtype) * 1e12),
                       p.min_bytes / (self.spec.memory_bandwidth_gbs * 1e9)) * 1e6
        cols = (eff_m, eff_n, eff_k, eff_m * eff_n * eff_k, _log(ctas), per_sm, waves, last_fill, _log(k_steps),
                p.flops / np.maximum(executed, 1.0), _log(cta_flops), _log(cta_bytes),
                cta_flops / np.maximum(cta_bytes, 1.0), merge_fill, _log(_cdiv(out_pos, split)),
                _log(b["compute_us"]), _log(b["memory_us"]), _log(b["time_us"]), np.full(len(bm), math.log(bound_us)))
        return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])

    @staticmethod
    def _dwroll(p: ConvProblem, table: ConfigTable) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
        """The rows of dwroll configs and their :func:`dwroll_geometry` (None when there are none)."""
        t = table.columns
        rows = np.flatnonzero(t["family"] == analytic.FAMILY_CODES["dwroll"])
        if rows.size == 0:
            return rows, None
        return rows, dwroll_geometry(p, *(t[name][rows] for name in ("block_m", "block_n", "block_k", "num_warps",
                                                                       "split_k", "group_m")))

    def launch_matrix(self, p: ConvProblem, table: ConfigTable, breakdown: dict | None = None,
                      dwroll: tuple[np.ndarray, dict[str, np.ndarray] | None] | None = None) -> np.ndarray:
        """The launch group, in ``LAUNCH_FEATURES`` order (grids as the launchers in
        ``native/kernels`` compute them; a family without a launcher formula here, e.g. ``tma``,
        takes the analytic CTAs)."""
        t = table.columns
        n_rows = len(table)
        bm, bn, bk = t["block_m"], t["block_n"], t["block_k"]
        split, merge = t["split_k"], t["merge"]
        fam = t["family"]
        tc = (fam == analytic.FAMILY_CODES["igemm"]) | (fam == analytic.FAMILY_CODES["gmerge"]) | (
            fam == analytic.FAMILY_CODES["gemm1x1"])
        direct = fam == analytic.FAMILY_CODES["direct"]
        groups, cg, kg, taps = p.groups, p.c_per_group, p.k_per_group, p.filter_taps
        out_pos = p.batch * math.prod(p.output_size)
        b = self._analytic.breakdown(p, t) if breakdown is None else breakdown
        grid = np.asarray(b["ctas"], dtype=np.float64).copy()
        reduction = np.ones(n_rows)
        steps = np.ones(n_rows)
        split_used = np.ones(n_rows)
        tap_block = np.zeros(n_rows)
        useful = np.ones(n_rows)
        group_tiles = _cdiv(groups, merge)
        if p.direction is Direction.BACKWARD_WEIGHT:
            # igemm_bwd_weight.py: (m, tap × n) tiles × group blocks × splits; a split owns a
            # contiguous range of ceil(ceil(P / BLOCK_K) / split_k) reduction blocks.
            tiles = _cdiv(merge * kg, bm) * taps * _cdiv(merge * cg, bn)
            n_blocks = _cdiv(out_pos, bk)
            per_split = _cdiv(n_blocks, split)
            grid = np.where(tc, tiles * group_tiles * split, grid)
            reduction = np.where(tc, per_split * bk, reduction)
            steps = np.where(tc, per_split, steps)
            split_used = np.where(tc, _cdiv(n_blocks, per_split) / split, split_used)
            # direct.py: (channel blocks × C/G × tap blocks, or × filter rows for tap rows) × splits.
            lines = p.batch * math.prod(p.output_size[:-1])
            out_w = p.output_size[-1]
            for i in np.flatnonzero(direct):
                config = table.configs[i]
                tb, line_block, row_width, per_lines = bwd_weight_tiling(p, config)
                if config.block_k > 1:
                    axis0 = _cdiv(p.out_channels, config.block_n) * (taps // p.filter_size[-1])
                    rows_used = line_block * row_width / config.block_m
                    tap_block[i] = p.filter_size[-1]
                else:
                    axis0 = _cdiv(p.out_channels, config.block_n) * cg * _cdiv(taps, tb)
                    rows_used = (tb * line_block * row_width / config.block_m) * taps / (_cdiv(taps, tb) * tb)
                    tap_block[i] = tb
                grid[i] = axis0 * config.split_k
                reduction[i] = per_lines * out_w
                steps[i] = _cdiv(per_lines, line_block) * _cdiv(out_w, row_width)
                split_used[i] = _cdiv(lines, per_lines) / config.split_k
                useful[i] = rows_used
            # gwalk_bwd_weight.py: splits × group blocks; a split walks a contiguous range of reduction units
            # (images × output-row walks × input-column tiles), block_k lanes per unit row (gwalk_geometry.py).
            for i in np.flatnonzero(fam == analytic.FAMILY_CODES["gwalk"]):
                config = table.configs[i]
                geo = weight_walk_geometry(p, config)
                units_per_split = _cdiv(geo["units"], config.split_k)
                grid[i] = math.prod(geo["grid"])
                reduction[i] = geo["lanes_per_split"]
                steps[i] = units_per_split * config.group_m
                split_used[i] = _cdiv(geo["units"], units_per_split) / config.split_k
            # dwrow.py: (channel blocks × F_D × F_H) × splits; a split walks a contiguous range of work items
            # (image, output depth, column strip, row chunk), one dY row and block_k input shifts per row.
            for i in np.flatnonzero(fam == analytic.FAMILY_CODES["dwrow"]):
                config = table.configs[i]
                rows, items_per_split, items = dwroll_tiling.dwrow_tiling(p, config)
                f_d, f_h, _ = as3d(p.filter_size, 1)
                out_w = p.output_size[-1]
                grid[i] = _cdiv(p.out_channels, config.block_n) * f_d * f_h * config.split_k
                reduction[i] = items_per_split * rows * config.block_m
                steps[i] = items_per_split * rows
                split_used[i] = _cdiv(items, items_per_split) / config.split_k
                tap_block[i] = p.filter_size[-1]
                useful[i] = out_w / (_cdiv(out_w, config.block_m) * config.block_m)
            # dwrun.py: (channel blocks × F_D) × splits; a split walks a contiguous range of work items (image,
            # output depth, strip of group_m runs of block_m columns, row chunk), F_H − 1 extra steps a chunk.
            f_d, f_h, _ = as3d(p.filter_size, 1)
            out_d, out_h, out_w = as3d(p.output_size, 1)
            for i in np.flatnonzero(fam == analytic.FAMILY_CODES["dwrun"]):
                config = table.configs[i]
                rows, items_per_split = dwroll_tiling.dwrun_tiling(p, config)
                strip_w = config.block_m * config.group_m
                items = p.batch * out_d * _cdiv(out_w, strip_w) * _cdiv(out_h, rows)
                grid[i] = _cdiv(p.out_channels, config.block_n) * f_d * config.split_k
                reduction[i] = items_per_split * rows * strip_w
                steps[i] = items_per_split * (rows + f_h - 1)
                split_used[i] = _cdiv(items, items_per_split) / config.split_k
                tap_block[i] = p.filter_size[-1]
                useful[i] = out_w / (_cdiv(out_w, strip_w) * strip_w) * rows / (rows + f_h - 1)
            workspace = np.where(split > 1, split * float(p.weight_elements) * 4.0, 0.0)
        else:
            fwd = p.direction is Direction.FORWARD
            red = cg if fwd else kg
            if fwd:
                tc_grid = _cdiv(out_pos, bm) * _cdiv(merge * kg, bn) * group_tiles
                # direct_multiplier.py (group_m > 1): (group blocks × j chunks of group_m) per row block.
                d_grid = _cdiv(out_pos, bm) * np.where(t["group_m"] > 1, _cdiv(groups, bn) * _cdiv(kg, t["group_m"]),
                                                       _cdiv(p.out_channels, bn))
            else:
                per_class = p.batch * math.prod(_cdiv(i, s) for i, s in zip(p.input_size, p.stride))
                classes = math.prod(p.stride)
                in_pos = p.batch * math.prod(p.input_size)
                is_1x1 = fam == analytic.FAMILY_CODES["gemm1x1"]
                tc_grid = np.where(is_1x1, _cdiv(in_pos, bm), classes * _cdiv(per_class, bm)) * _cdiv(
                    merge * cg, bn) * group_tiles
                d_grid = _cdiv(per_class, bm) * _cdiv(p.in_channels, bn) * classes
            # Split-K (igemm, gmerge, gemm1x1; split 1 elsewhere): grid axis 2, a split owns a contiguous
            # range of ceil(taps · ceil(merge · red / BLOCK_K) / split_k) (tap, channel block) steps.
            grid = np.where(tc, tc_grid * split, np.where(direct, d_grid, grid))
            total_steps = taps * _cdiv(merge * red, bk)
            per_split = _cdiv(total_steps, split)
            reduction = np.where(direct, red * taps, per_split * bk)
            steps = np.where(direct, red * taps, per_split)
            split_used = np.where(tc, _cdiv(total_steps, per_split) / split, split_used)
            result = p.output_elements if fwd else p.input_elements
            workspace = np.where(tc & (split > 1), split * float(result) * 4.0, 0.0)
            # dwrun.py (2D): channel blocks × strips of group_m runs of block_m columns × row chunks × images; a
            # program walks its chunk's rows + F_H − 1 input rows, F_H·F_W taps a step.
            dwrun_rows = np.flatnonzero(fam == analytic.FAMILY_CODES["dwrun"])
            if len(dwrun_rows):
                geo = dwroll_tiling.data_geometry(p)
                _, out_h, out_w = geo["out"]
                _, f_h, f_w = geo["filter"]
            for i in dwrun_rows:
                config = table.configs[i]
                rows = dwroll_tiling.dwrun_data_rows(p, config, geo)
                strip_w = config.block_m * config.group_m
                grid[i] = _cdiv(p.in_channels, config.block_n) * _cdiv(out_w, strip_w) * _cdiv(out_h, rows) * p.batch
                reduction[i] = f_h * f_w
                steps[i] = rows + f_h - 1
                tap_block[i] = f_w
                useful[i] = out_w / (_cdiv(out_w, strip_w) * strip_w) * rows / (rows + f_h - 1)
        # gwalk forward / backward-data rows keep the analytic tensor-core view above (b["ctas"]), not their
        # launch grid (gwalk.walk_geometry: about half as many CTAs): it is what fwd/9 and bwd_data/9 were
        # trained on, so moving them to the launch grid needs those models retrained with it.
        # dwroll.py: the rolling launch (its tap-major weight copy and split-K reduction are extra launches).
        dw_rows, dw = self._dwroll(p, table) if dwroll is None else dwroll
        if dw is not None:
            grid, reduction, steps = (np.asarray(a, dtype=np.float64).copy() for a in (grid, reduction, steps))
            grid[dw_rows], reduction[dw_rows], steps[dw_rows] = dw["grid"], dw["reduction"], dw["steps"]
            split_used[dw_rows], useful[dw_rows] = dw["split_used"], dw["useful"]
        grid = np.maximum(grid, 1)
        sms = self.spec.sms
        slots = sms * b["per_sm"]
        cols = (_log(grid), grid / sms, grid / (np.ceil(grid / sms) * sms), grid / slots,
                grid / (np.ceil(grid / slots) * slots), _log(reduction), _log(steps), split_used,
                np.log1p(workspace), workspace / p.min_bytes, tap_block, useful)
        return np.column_stack([np.asarray(c, dtype=np.float64) * np.ones(n_rows) for c in cols])

    def dwroll_matrix(self, p: ConvProblem, table: ConfigTable, *, launch: bool = True,
                      dwroll: tuple[np.ndarray, dict[str, np.ndarray] | None] | None = None) -> np.ndarray:
        """The dwroll group, in ``DWROLL_FEATURES`` order (0 on rows of other families; the halo 0
        too unless ``launch``)."""
        out = np.zeros((len(table), len(DWROLL_FEATURES)))
        dw_rows, dw = self._dwroll(p, table) if dwroll is None else dwroll
        if dw is not None:
            out[dw_rows, 0] = 1.0
            out[dw_rows, 1] = dw["live_values"]
            if launch:
                out[dw_rows, 2] = dw["halo"]
        return out

    def halo_matrix(self, p: ConvProblem, table: ConfigTable, *, launch: bool = True) -> np.ndarray:
        """The halo group, in ``HALO_FEATURES`` order (0 on rows of other families; all but the one-hot 0 too
        unless ``launch``)."""
        out = np.zeros((len(table), len(HALO_FEATURES)))
        rows = np.flatnonzero(table.columns["family"] == analytic.FAMILY_CODES["halo"])
        for i in rows:
            config = table.configs[i]
            out[i, 0] = 1.0
            if not launch or p.direction is Direction.BACKWARD_WEIGHT:
                continue
            geo = halo_geometry(p, config)
            programs = math.prod(geo["grid"])
            per_sm = max(1, min(self.spec.smem_per_sm_bytes // max(geo["smem_bytes"], 1), 16))
            computed = programs * config.block_m * config.group_m * config.block_n
            real = p.batch * geo["dst_h"] * geo["dst_w"] * p.groups * geo["og"]
            merged_rg, merged_og = config.merge * geo["rg"], config.merge * geo["og"]
            out[i, 1:] = (math.log(programs), programs / (self.spec.sms * per_sm), real / computed,
                          (geo["rows_read"] - geo["stride"] * config.group_m) / config.group_m,
                          merged_rg * merged_og / (config.block_k * config.block_n))
        return out

    @staticmethod
    def pad_matrix(p: ConvProblem, table: ConfigTable) -> np.ndarray:
        """The channel-padding group, in ``PAD_FEATURES`` order (0 on rows of unpadded kernels)."""
        flags = table.columns["pad_channels"].astype(np.float64)
        return np.column_stack((flags, flags * (channel_pad_geometry.copy_bytes(p) / p.min_bytes)))

    # ---- all ----------------------------------------------------------------------------------
    def build(self, problem: ConvProblem, configs: Sequence[KernelConfig] | ConfigTable, *,
              launch: bool = True) -> np.ndarray:
        """``(len(configs), len(names))`` features of ``problem`` with each config, in order.
        ``launch=False`` leaves the :data:`LAUNCH_NAMES` zero (for a model whose feature set has none
        of them: they cost the most to compute)."""
        table = table_of(configs)
        n = len(table)
        out = np.empty((n, len(self.names)), dtype=np.float64)
        if n == 0:
            return out
        out[:, :len(PROBLEM_FEATURES)] = self.problem_vector(problem)
        padded_rows = np.flatnonzero(table.columns["pad_channels"])
        if padded_rows.size == 0 or channel_pad_geometry.aligned(problem):
            self._fill_config_groups(problem, table, out, launch=launch)
            return out
        # A channel-padded kernel runs its v8 tile on the padded problem: its kernel, interaction, launch and
        # family groups describe that run (the problem group stays the caller's problem, and the pad group
        # counts the copies on it).
        for rows, padded in ((np.flatnonzero(table.columns["pad_channels"] == 0), False), (padded_rows, True)):
            if rows.size == 0:
                continue
            part = table_of([table.configs[i] for i in rows])
            block = np.empty((rows.size, len(self.names)), dtype=np.float64)
            self._fill_config_groups(channel_pad_geometry.padded_problem(problem) if padded else problem, part,
                                     block, launch=launch)
            if padded:
                block[:, -len(PAD_FEATURES):] = self.pad_matrix(problem, part)
            out[rows, len(PROBLEM_FEATURES):] = block[:, len(PROBLEM_FEATURES):]
        return out

    def _fill_config_groups(self, problem: ConvProblem, table: ConfigTable, out: np.ndarray, *,
                            launch: bool) -> None:
        """Every group after the problem's, into ``out``'s columns in :data:`FEATURE_NAMES` order."""
        a = len(PROBLEM_FEATURES)
        b = a + len(KERNEL_FEATURES)
        c = b + len(INTERACTION_FEATURES)
        d = c + len(HARDWARE_FEATURES)
        e = d + len(LAUNCH_FEATURES)
        f = e + len(DWROLL_FEATURES)
        g = f + len(HALO_FEATURES)
        out[:, a:b] = self.kernel_matrix(table)
        breakdown = self._analytic.breakdown(problem, table.columns)
        out[:, b:c] = self.interaction_matrix(problem, table, breakdown)
        out[:, c:d] = self.hardware_vector(problem)
        dwroll = self._dwroll(problem, table)
        out[:, d:e] = self.launch_matrix(problem, table, breakdown, dwroll) if launch else 0.0
        out[:, e:f] = self.dwroll_matrix(problem, table, launch=launch, dwroll=dwroll)
        out[:, f:g] = self.halo_matrix(problem, table, launch=launch)
        out[:, g:] = self.pad_matrix(problem, table)
