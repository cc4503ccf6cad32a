"""Architecture specs for the GPUs the registry targets (sm_80, sm_89, sm_90).

Figures are vendor datasheet values (dense, no sparsity) and are used for rule sets, features
and the analytic bound. Measured ceilings of a particular machine (DESIGN §5: H200 773 TFLOP/s
bf16 matmul, 4,256 GB/s copy) are recorded by the benchmark next to its results, not here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tiledispatch.native.problem import DType


class ArchError(ValueError):
    pass


@dataclass(frozen=True)
class ArchSpec:
    name: str                   # device model, e.g. "h200"
    arch: str                   # compute target, e.g. "sm_90"
    compute_capability: int     # 90
    sms: int
    smem_per_block_bytes: int   # opt-in maximum dynamic shared memory per block
    smem_per_sm_bytes: int
    l2_bytes: int
    registers_per_sm: int
    max_registers_per_thread: int
    memory_bandwidth_gbs: float
    peak_bf16_tflops: float     # dense tensor-core rate
    peak_fp16_tflops: float
    peak_tf32_tflops: float
    peak_fp32_fma_tflops: float  # CUDA-core FMA rate (direct kernels)
    boost_clock_mhz: int

    def peak_tflops(self, dtype: DType) -> float:
        return {DType.BF16: self.peak_bf16_tflops, DType.FP16: self.peak_fp16_tflops,
                DType.FP32: self.peak_tf32_tflops}[dtype]


_KIB = 1024
_MIB = 1024 * 1024

ARCH_SPECS: dict[str, ArchSpec] = {
    spec.name: spec
    for spec in (
        ArchSpec("a100_sxm", "sm_80", 80, 108, 163 * _KIB, 164 * _KIB, 40 * _MIB, 65536, 255,
                 2039.0, 312.0, 312.0, 156.0, 19.5, 1410),
        ArchSpec("l40s", "sm_89", 89, 142, 99 * _KIB, 100 * _KIB, 96 * _MIB, 65536, 255,
                 864.0, 362.0, 362.0, 183.0, 91.6, 2520),
        ArchSpec("h100_sxm", "sm_90", 90, 132, 227 * _KIB, 228 * _KIB, 50 * _MIB, 65536, 255,
                 3350.0, 989.0, 989.0, 495.0, 67.0, 1980),
        ArchSpec("h100_pcie", "sm_90", 90, 114, 227 * _KIB, 228 * _KIB, 50 * _MIB, 65536, 255,
                 2000.0, 756.0, 756.0, 378.0, 51.0, 1755),
        ArchSpec("h200", "sm_90", 90, 132, 227 * _KIB, 228 * _KIB, 60 * _MIB, 65536, 255,
                 4800.0, 989.0, 989.0, 495.0, 67.0, 1980),
    )
}

#: The device whose figures stand for a compute target when only the target is known.
DEFAULT_DEVICE_FOR_ARCH = {"sm_80": "a100_sxm", "sm_89": "l40s", "sm_90": "h200"}


def get_arch(name: str) -> ArchSpec:
    """Look up by device name (``h200``) or compute target (``sm_90`` gives its default device)."""
    key = name.lower().replace("-", "_")
    key = DEFAULT_DEVICE_FOR_ARCH.get(key, key)
    try:
        return ARCH_SPECS[key]
    except KeyError:
        known = sorted(ARCH_SPECS) + sorted(DEFAULT_DEVICE_FOR_ARCH)
        raise ArchError(f"arch: unknown {name!r}; known: {known}") from None


def arch_for_device_name(device_name: str, compute_capability: tuple[int, int]) -> ArchSpec:
    """Map what the driver reports (``NVIDIA H200``, (9, 0)) to a spec."""
    text = device_name.lower()
    if "h200" in text:
        return ARCH_SPECS["h200"]
    if "h100" in text:
        return ARCH_SPECS["h100_pcie" if "pcie" in text else "h100_sxm"]
    if "a100" in text:
        return ARCH_SPECS["a100_sxm"]
    if "l40" in text:
        return ARCH_SPECS["l40s"]
    return get_arch(f"sm_{compute_capability[0]}{compute_capability[1]}")
