"""Analytic fallback predictor: a roofline with tile and wave quantisation (DESIGN §7).

Used where no trained model matches (arch, dtype, direction). For each candidate kernel it predicts

    time = launches × LAUNCH_US + max(compute time, memory time)

* compute time: the FLOPs the kernel really executes (the problem's FLOPs inflated by tile
  quantisation: M, N and K each padded up to the block sizes; for ``gmerge`` the block-diagonal
  operand of ``merge`` groups, which multiplies the work by ``merge``), at the family's peak:
  tensor-core peak for igemm/gmerge/gemm1x1 (scaled down for small tiles, whose operand staging
  cannot feed the tensor cores), CUDA-core FMA peak for ``direct`` and ``dwroll``; spread over the
  SMs in waves of ``SMs × CTAs per SM`` (occupancy from shared memory, registers and warps), so a
  grid of 133 CTAs on 132 SMs costs two waves;
* memory time: every operand read once and the result written once (DESIGN §3), at the arch's
  bandwidth (lower for unvectorised kernels), plus split-K's fp32 partials written and read back
  (``split_k`` copies of the result: dW in backward-weight, Y or dX in forward / backward-data);
* launches: one, plus the split-K reduction.

Split-K is modelled the same way in every direction: ``split_k`` times the CTAs, each running its
share (rounded up) of the reduction — backward-weight's N·prod(out) positions, forward and
backward-data's (filter tap × channel block) steps.

Families are looked up by name (:data:`FAMILY_CODES`), never by their position in
:class:`~tiledispatch.native.configs.Family`. ``tma`` (an implicit GEMM whose operand tiles are TMA
boxes of a zero-padded copy of the input) is costed as ``igemm`` plus that copy when the problem
pads: ``TmaGeometry.padded_elements`` written once and read once, one launch more. ``dwroll`` (the
depthwise row-rolling CUDA-core kernels) takes the direct view as it is: ``block_m`` × ``block_n``
positions × channels per CTA, every output a dot over the taps. Its code (5) changed no number: it
had the same view before it had a code, as a CUDA-core family this module did not know.
``gwalk`` (code 6: grouped 3×3 stride-1 walks on tensor cores) takes the tensor-core view of gmerge
(its ``merge`` groups multiply the work), which it also had before its code; so does ``halo`` (code 9).
A family this module does not know gets :data:`UNKNOWN_FAMILY` as its code and the cost view of its
kind: the tensor-core implicit GEMM for a family with ``uses_tensor_cores``, the direct view
otherwise — a sane estimate, never an error.

The figures come from :mod:`tiledispatch.native.arch` (datasheet values); the few efficiency
constants below are round numbers, not fits: this predictor ranks, it does not promise times.
Everything is vectorised over candidates (≈300 ranked in well under a millisecond).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tiledispatch.native.arch import ArchSpec, get_arch
from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.tma_geometry import TmaGeometry
from tiledispatch.native.problem import ConvProblem, Direction, DType

NAME = "analytic"
#: Bump when a formula or constant changes: selections are cached and reported by version.
VERSION = "1"

LAUNCH_US = 3.0
#: Best fraction of the datasheet tensor-core peak one well-shaped Triton tile sustains.
TENSOR_CORE_EFFICIENCY = 0.7
#: Tile "intensity" bm·bn/(bm+bn) at which operand staging stops limiting the tensor cores
#: (128×128 reaches it; 64×64 gets half).
FULL_RATE_INTENSITY = 64.0
#: Direct kernels accumulate in fp32 on the CUDA cores; fraction of the FMA peak they sustain.
FMA_EFFICIENCY = 0.5
#: Fraction of the datasheet bandwidth reached with 16-byte (v8) and with scalar accesses.
BANDWIDTH_EFFICIENCY_V8 = 0.85
BANDWIDTH_EFFICIENCY_SCALAR = 0.55
#: 64-bit address arithmetic costs issue slots in the inner loop.
INDEX64_SLOWDOWN = 1.15
#: Registers per thread beside the accumulators (addresses, indices, operand fragments).
REGISTER_OVERHEAD = 64
MAX_CTAS_PER_SM = 32
MAX_WARPS_PER_SM = 64
SMEM_RESERVE_PER_CTA = 1024

#: The ``family`` column's code of each family, by the family's name (value). New families are
#: appended; a code never changes meaning (the feature engine's one-hot columns read these codes).
FAMILY_CODES = {"igemm": 0, "gmerge": 1, "gemm1x1": 2, "direct": 3, "tma": 4, "dwroll": 5, "gwalk": 6, "dwrow": 7,
                "dwrun": 8, "halo": 9}
#: The code of a family missing from :data:`FAMILY_CODES` (costed by its kind, see the module doc).
UNKNOWN_FAMILY = -1
_DIRECT = FAMILY_CODES["direct"]
_TMA = FAMILY_CODES["tma"]
_COLUMNS = ("family", "block_m", "block_n", "block_k", "num_warps", "num_stages", "split_k", "merge", "vec",
            "index64", "cuda_core")


def _cdiv(a, b):
    return -(-a // b)


def result_elements(problem: ConvProblem) -> int:
    """Elements of the direction's result (dW, Y or dX): one split-K partial copy."""
    if problem.direction is Direction.BACKWARD_WEIGHT:
        return problem.weight_elements
    return problem.output_elements if problem.direction is Direction.FORWARD else problem.input_elements


def family_code(family: Family | str) -> int:
    """The ``family`` column's code: :data:`FAMILY_CODES` by name, :data:`UNKNOWN_FAMILY` if absent."""
    name = family.value if isinstance(family, Family) else str(family)
    return FAMILY_CODES.get(name, UNKNOWN_FAMILY)


def config_table(configs: Sequence[KernelConfig]) -> dict[str, np.ndarray]:
    """The configs as one int64 column per field (what the formulas vectorise over). Besides the
    fields: ``family`` (:func:`family_code`) and ``cuda_core`` (1 where the direct, CUDA-core cost
    view applies: every family without ``uses_tensor_cores`` — direct, dwroll, or an unknown one)."""
    rows = np.array([(family_code(c.family), c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages,
                      c.split_k, c.merge, c.vec, c.index64, not c.family.uses_tensor_cores) for c in configs],
                    dtype=np.int64).reshape(-1, len(_COLUMNS))
    return {name: rows[:, i] for i, name in enumerate(_COLUMNS)}


def padded_copy_elements(problem: ConvProblem) -> int:
    """Elements of the zero-padded operand copy a ``tma`` kernel reads its tiles from (X padded by
    the problem's pads for forward, dY by ``dil·(F−1) − pad`` for backward-data); 0 when it reads
    the operand in place."""
    return TmaGeometry(problem).padded_elements


class AnalyticPredictor:
    """Predicts microseconds per kernel for one device spec; covers every (dtype, direction)."""

    name = NAME
    version = VERSION
    kind = "analytic"

    def __init__(self, arch: ArchSpec | str = "sm_90"):
        self.spec = get_arch(arch) if isinstance(arch, str) else arch
        self.arch = self.spec.name
        self.dtypes = tuple(DType)
        self.directions = tuple(Direction)

    def covers(self, arch: str, dtype: DType | str, direction: Direction | str) -> bool:
        return True

    def predict_us(self, problem: ConvProblem, configs: Sequence[KernelConfig]) -> np.ndarray:
        """Predicted time of each config on ``problem``, microseconds, in the order given."""
        if not configs:
            return np.empty(0)
        return self.predict_table_us(problem, config_table(configs))

    def predict_table_us(self, problem: ConvProblem, t: dict[str, np.ndarray]) -> np.ndarray:
        return self.breakdown(problem, t)["time_us"]

    def breakdown(self, problem: ConvProblem, t: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every intermediate of the model, per config: ``ctas``, ``cta_flops`` (executed),
        ``per_sm`` (resident CTAs), ``waves``, ``compute_us``, ``memory_us``, ``launches`` and
        ``time_us`` (the prediction). The feature engine uses them as interaction features."""
        spec, p = self.spec, problem
        bm, bn, bk, warps, stages = t["block_m"], t["block_n"], t["block_k"], t["num_warps"], t["num_stages"]
        split, merge = t["split_k"], t["merge"]
        # The direct (CUDA-core) view: direct, dwroll and unknown CUDA-core families; every other row
        # (tma and unknown tensor-core families included) takes the tensor-core implicit-GEMM view.
        direct = t["cuda_core"] == 1
        groups, cg, kg, taps = p.groups, p.c_per_group, p.k_per_group, p.filter_taps
        out_positions = p.batch * int(np.prod(p.output_size))
        in_positions = p.batch * int(np.prod(p.input_size))

        # Tensor-core families: CTAs and executed FLOPs per CTA of the per-group implicit GEMM,
        # with `merge` groups sharing a CTA (merge = 1 outside gmerge).
        group_tiles = _cdiv(groups, merge)
        if p.direction is Direction.BACKWARD_WEIGHT:
            # M = K/G, N = (C/G)·taps blocked per tap, K = N·prod(out) split `split` ways.
            tiles = _cdiv(merge * kg, bm) * taps * _cdiv(merge * cg, bn)
            k_executed = _cdiv(out_positions, split * bk) * bk
            tc_ctas = tiles * group_tiles * split
        else:
            # M = positions, N = merged output channels, K = taps × merged reduction channels in BLOCK_K
            # steps, split `split` ways (contiguous ranges of steps).
            rows, cols, reduce = ((out_positions, kg, cg) if p.direction is Direction.FORWARD
                                  else (in_positions, cg, kg))
            tiles = _cdiv(rows, bm) * _cdiv(merge * cols, bn)
            k_executed = _cdiv(taps * _cdiv(merge * reduce, bk), split) * bk
            tc_ctas = tiles * group_tiles * split
        tc_cta_flops = 2.0 * bm * bn * k_executed

        # Direct: block_m positions × block_n channels per CTA, every output a dot over C/G·taps
        # (bwd_data visits every tap, masked, so strides waste work rather than skip it).
        if p.direction is Direction.BACKWARD_WEIGHT:
            dw_ctas = _cdiv(groups * kg, bn) * taps * split
            dw_flops = 2.0 * bn * cg * _cdiv(out_positions, split * bm) * bm
        else:
            positions, channels, per_output = ((out_positions, groups * kg, cg * taps)
                                               if p.direction is Direction.FORWARD
                                               else (in_positions, groups * cg, kg * taps))
            dw_ctas = _cdiv(positions, bm) * _cdiv(channels, bn)
            dw_flops = 2.0 * bm * bn * per_output
        ctas = np.where(direct, dw_ctas, tc_ctas)
        cta_flops = np.where(direct, dw_flops, tc_cta_flops)

        # Occupancy: CTAs resident per SM, limited by shared memory, registers and warps.
        itemsize = p.dtype.itemsize
        smem = np.where(direct, 0, stages * (bm * bk + bk * bn) * itemsize) + SMEM_RESERVE_PER_CTA
        accumulators = bm * bn // (32 * warps)
        registers = warps * 32 * np.minimum(255, accumulators + REGISTER_OVERHEAD)
        per_sm = np.minimum.reduce([spec.smem_per_sm_bytes // smem, spec.registers_per_sm // registers,
                                    MAX_WARPS_PER_SM // warps, np.full_like(warps, MAX_CTAS_PER_SM)])
        per_sm = np.maximum(per_sm, 1)
        waves = _cdiv(ctas, spec.sms * per_sm)
        concurrent = np.minimum(per_sm, _cdiv(ctas, spec.sms))

        intensity = bm * bn / (bm + bn)
        tc_rate = (spec.peak_tflops(p.dtype) * 1e12 * TENSOR_CORE_EFFICIENCY / spec.sms
                   * np.minimum(1.0, intensity / FULL_RATE_INTENSITY))
        fma_rate = spec.peak_fp32_fma_tflops * 1e12 * FMA_EFFICIENCY / spec.sms
        sm_rate = np.where(direct, fma_rate, tc_rate)
        compute_s = waves * concurrent * cta_flops / sm_rate
        compute_s = np.where(t["index64"] == 1, compute_s * INDEX64_SLOWDOWN, compute_s)

        bandwidth = spec.memory_bandwidth_gbs * 1e9 * np.where(t["vec"] == 8, BANDWIDTH_EFFICIENCY_V8,
                                                                BANDWIDTH_EFFICIENCY_SCALAR)
        # Split-K partials: fp32, one copy of the result per split, written then read by the reduction.
        workspace = np.where(split > 1, 2.0 * split * result_elements(p) * 4, 0.0)
        # tma: the zero-padded copy of the input, written once and read once, by one more launch.
        copy_bytes = padded_copy_elements(p) * itemsize
        padded_copy = (t["family"] == _TMA) & (copy_bytes > 0)
        memory_s = (p.min_bytes + workspace + np.where(padded_copy, 2.0 * copy_bytes, 0.0)) / bandwidth

        launches = 1 + (split > 1) + padded_copy
        return {"ctas": ctas, "cta_flops": cta_flops, "per_sm": per_sm, "waves": waves,
                "compute_us": compute_s * 1e6, "memory_us": memory_s * 1e6, "launches": launches,
                "time_us": launches * LAUNCH_US + np.maximum(compute_s, memory_s) * 1e6}
