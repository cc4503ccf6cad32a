"""Correctness thresholds: ‖out − ref‖ / ‖ref‖ against the float64 reference (DESIGN §4).

Inputs are drawn in the problem's dtype and the reference sees exactly those values, so the error
measured is the kernel's own: fp32 accumulation order plus rounding of the result to the dtype
(bf16 keeps 8 significant bits, fp16 11). fp32 problems use exact (non-tf32) dots.
"""

from __future__ import annotations

from tiledispatch.native.problem import DType

RELATIVE_ERROR_LIMIT = {DType.BF16: 1e-2, DType.FP16: 2e-3, DType.FP32: 1e-5}


def within_limit(dtype: DType, error: float) -> bool:
    """NaN and inf never pass."""
    return error == error and error <= RELATIVE_ERROR_LIMIT[dtype]
