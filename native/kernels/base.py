"""What a kernel template declares, so one runtime can compile, load and launch every family.

A *template* is one Triton kernel source (plus helper binaries such as a split-K reduction) for
one direction and a set of families. For a :class:`KernelConfig` it gives

* ``programs(config)``: every binary the instance needs, each as a :class:`Program` (the
  ``@triton.jit`` function, its constexprs, and the types of its run-time parameters). Constexprs
  come from the config alone, never from a problem, so an instance compiles exactly once;
* ``plan(problem, config, first, second, out, workspace)``: the launches for one problem, each a
  :class:`Launch` naming a program, its grid and its run-time arguments in parameter order;
* ``workspace_elements(problem, config)``: fp32 scratch the plan needs (split-K partials).

Run-time integer parameters are typed ``i32`` in 32-bit-indexed kernels and ``i64`` in
``index64`` kernels; pointers are declared 16-byte aligned (the runtime checks each tensor); a program may
declare integer parameters divisible by a value (``Program.divisible``: dwrun's channel pairs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType

TRITON_DTYPE = {DType.BF16: "bf16", DType.FP16: "fp16", DType.FP32: "fp32"}


#: Size parameters whose values every 2D problem fixes (2D runs as 3D with depth 1; backward-data's
#: flipped depth pad ``dil·(F − 1) − pad`` is 0 and its depth tap step 1).
DEPTH_OF_2D = {"IN_D": 1, "OUT_D": 1, "F_D": 1, "STR_D": 1, "DIL_D": 1, "PAD_D": 0, "STEP_D": 1}


@dataclass(frozen=True)
class Program:
    """One binary of a kernel instance."""

    fn: Any                           # the @triton.jit function
    constexprs: dict[str, Any]        # values of its tl.constexpr parameters
    param_types: dict[str, str]       # every run-time parameter in order: "*bf16", "*fp32", "i32", "i64"
    num_warps: int
    num_stages: int
    # Run-time parameters the config fixes (:func:`fixed_sizes`), compiled in as constants: launches
    # still pass them, and the runtime checks that they pass these values.
    fixed: dict[str, int] = field(default_factory=dict)
    # Run-time integer parameters the config promises divisible by a value (``tt.divisibility``), so the
    # compiler can prove wider aligned loads; the config's support check guarantees the promise.
    divisible: dict[str, int] = field(default_factory=dict)
    # A register budget per thread for ptxas (Triton's ``maxnreg``; :func:`register_cap`), or None: the
    # compiler's own choice.
    max_registers: int | None = None

    def compile_options(self) -> dict[str, int]:
        """Triton compile options beyond the constants: warps, stages and the register budget if any."""
        options = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.max_registers is not None:
            options["maxnreg"] = self.max_registers
        return options

    def signature(self) -> dict[str, str]:
        """Triton's full signature: every parameter in definition order, constexprs (and fixed sizes) marked."""
        out = {}
        for name in self.fn.arg_names:
            if name in self.constexprs or name in self.fixed:
                out[name] = "constexpr"
            elif name in self.param_types:
                out[name] = self.param_types[name]
            else:
                raise KeyError(f"{self.fn.__name__}: parameter {name!r} has neither a type nor a constexpr value")
        return out


    def compile_constants(self) -> dict[str, Any]:
        """What the compiler gets as constants: the constexprs and the fixed sizes."""
        return {**self.constexprs, **self.fixed}


def fixed_sizes(config: KernelConfig, fn: Any) -> dict[str, int]:
    """The depth sizes of :data:`DEPTH_OF_2D` among ``fn``'s parameters, for a 2D config (32-bit indexed):
    a 2D problem's launch always passes these values, and as constants they drop the depth loops and
    index arithmetic (H200, Triton 3.6: gmerge forward 8–12 % and the 64×32 dwroll walk 7 % faster on
    ResNeXt / depthwise layers than with every size a run-time argument). 3D and 64-bit configs: none."""
    if config.ndim != 2 or config.index64:
        return {}
    return {name: value for name, value in DEPTH_OF_2D.items() if name in fn.arg_names}


#: An H100/H200 SM: 65,536 32-bit registers, 228 KiB of shared memory (1 KiB of it reserved per CTA),
#: 2,048 threads.
SM_REGISTERS = 65_536
SM_SHARED_BYTES = 233_472
CTA_RESERVED_SHARED_BYTES = 1_024
SM_THREADS = 2_048
#: Registers a thread keeps beside its fp32 accumulators (addresses, masks, the odometer) below which
#: ptxas cannot compile the backward-data tiles (sm_90, Triton 3.6: a 128×128×32 8-warp tile fails at 80,
#: 64 accumulators), and the least budget worth asking for.
_REGISTERS_BESIDE_ACCUMULATORS = 40
_LEAST_REGISTER_CAP = 48


def ctas_by_shared_memory(shared_bytes: int, threads: int) -> int:
    """CTAs of ``shared_bytes`` and ``threads`` one SM can hold by shared memory (and threads)."""
    return min(SM_SHARED_BYTES // (shared_bytes + CTA_RESERVED_SHARED_BYTES), SM_THREADS // threads)


def occupancy_budget(threads: int, ctas: int) -> int:
    """Registers a thread may have so that ``ctas`` CTAs of ``threads`` share an SM: rounded down to 8, ≤ 255."""
    return min(255, SM_REGISTERS // (threads * ctas) // 8 * 8)


def register_cap(config: KernelConfig) -> int | None:
    """The register budget that lets as many CTAs share an SM as its shared memory does, for the main
    programs of pipelined (``num_stages`` ≥ 3, 16-byte ``cp.async``) 2D ``igemm`` / ``gmerge`` tiles with
    32-bit indices — backward-data's, and backward-weight's 64×32×64 3-stage 16-bit tiles; None elsewhere.

    Shared memory per CTA = ``num_stages · (BLOCK_M·BLOCK_K + BLOCK_K·BLOCK_N)`` operand elements; CTAs by
    shared memory ``s`` = ⌊228 KiB / (that + 1 KiB)⌋ (at most 2,048 threads); the budget is
    ⌊65,536 / (threads · s)⌋ rounded down to 8, asked only where it leaves the accumulators
    (``BLOCK_M·BLOCK_N / threads`` fp32) 40 registers and is ≥ 48. ptxas left to itself spends what one CTA
    can have: the backward-data 128×128×64 8-warp tile took 143 registers (one CTA an SM) and compiles to
    124 at a 128 budget (two, as its 96 KiB of shared memory allow) with no spill.

    Where, from compiling every 2D ``default`` tile at its budget (ptxas, sm_90, Triton 3.6): every
    backward-data igemm / gmerge tile compiles spill-free (``gemm1x1`` is under its budget already: a new
    build id for the same binary); 3D tiles spill 24–40 bytes (their depth coordinates); forward tiles
    already fit or cannot compile in it (accumulators); backward-weight (two accumulator tiles while it
    promotes chunks) spills on every tile but the 64-row, 64-deep 3-stage ones (64×32/64/128: 119–233 →
    80–168 registers, 4 → 6, 3 → 4, 2 → 3 CTAs an SM; the unsplit 64×128 spills 8 bytes), and measured
    (H100, same run, ``bench/results/2026-11-28_h100_s25/``) only the 64×32 tile gains: 1.10–1.26× on
    the dev suite's larger grouped layers, while 64×64 and 64×128 moved 0.90–1.03×.
    """
    if (config.family not in (Family.IGEMM, Family.GMERGE) or config.num_stages < 3 or config.vec != 8
            or config.ndim != 2 or config.index64):
        return None
    if config.direction is Direction.FORWARD:
        return None
    if config.direction is Direction.BACKWARD_WEIGHT and not (
            config.dtype is not DType.FP32 and (config.block_m, config.block_n, config.block_k) == (64, 32, 64)
            and config.num_stages == 3):
        return None
    threads = 32 * config.num_warps
    itemsize = 4 if config.dtype is DType.FP32 else 2
    shared = config.num_stages * (config.block_m * config.block_k + config.block_k * config.block_n) * itemsize
    ctas = ctas_by_shared_memory(shared, threads)
    if ctas < 1:
        return None
    cap = occupancy_budget(threads, ctas)
    accumulators = config.block_m * config.block_n // threads
    if cap < max(_LEAST_REGISTER_CAP, accumulators + _REGISTERS_BESIDE_ACCUMULATORS) or cap >= 255:
        return None
    return cap


@dataclass(frozen=True)
class Launch:
    program: str                      # key into programs(config)
    grid: tuple[int, int, int]
    args: tuple                       # run-time arguments in parameter order (constexprs excluded)
    zero_fill: tuple = field(default=())  # tensors to zero before this launch (rarely needed)


class KernelTemplate(Protocol):
    direction: Direction
    families: frozenset[Family]

    def programs(self, config: KernelConfig) -> dict[str, Program]: ...

    def plan(self, problem: ConvProblem, config: KernelConfig, first: Any, second: Any, out: Any,
             workspace: Any) -> list[Launch]: ...

    def workspace_elements(self, problem: ConvProblem, config: KernelConfig) -> int: ...


def as3d(values: tuple[int, ...], fill: int) -> tuple[int, ...]:
    """A 2D size as the 3D one the kernels take (2D problems run as 3D with depth 1)."""
    return (fill,) * (3 - len(values)) + tuple(values)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def int_type(config: KernelConfig) -> str:
    return "i64" if config.index64 else "i32"


def pointer_type(dtype: DType) -> str:
    return "*" + TRITON_DTYPE[dtype]


def tensor_core_constexprs(config: KernelConfig) -> dict[str, Any]:
    """Constexprs shared by the igemm / gmerge / gemm1x1 templates of every direction."""
    return {
        "BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
        "GROUP_M": config.group_m, "MERGE": config.merge, "IS_1X1": config.family is Family.GEMM1X1,
        "VEC": config.vec, "INDEX64": config.index64,
        # fp32 problems get exact products; tf32 would miss the fp32 error limit.
        "DOT_PRECISION": "ieee" if config.dtype is DType.FP32 else "tf32",
    }
