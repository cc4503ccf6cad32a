"""Kernel instances: a family plus a config, with canonical names that parse back (DESIGN §4).

Every field that changes the compiled binary is part of :class:`KernelConfig` and of its name, so
no two distinct kernels ever share a name or a feature row (the seed's aliasing flaw).

Name grammar (all fields, fixed order)::

    gconv_{direction}_{dtype}_{ndim}d_{family}_{block_m}x{block_n}x{block_k}
         _w{num_warps}_s{num_stages}_gm{group_m}_sk{split_k}_mg{merge}_v{vec}[p]_i{32|64}

e.g. ``gconv_fwd_bf16_2d_igemm_128x64x32_w4_s3_gm8_sk1_mg1_v8_i32``; ``v8p`` (``pad_channels``): the same v8
tile run on copies of the operands whose channel runs are zero-padded to multiples of 8 (igemm, gemm1x1: each
group's C/G and K/G; direct, dwrow on C/G = 1 problems: the number of groups; ``kernels/channel_pad.py``).

Families and what their block sizes tile (per group, see each kernel's docstring for the GEMM):

=========  ===============================================  =========================================
family     what it is                                       block_m × block_n × block_k
=========  ===============================================  =========================================
igemm      tensor-core implicit GEMM, one flattened loop    GEMM M × GEMM N × channels per tap step
           over (filter taps × channel blocks)
gmerge     igemm with ``merge`` groups per CTA and a        as igemm, over the merged groups
           block-diagonal operand (small C/G or K/G)
gemm1x1    1×1, stride 1, no padding: a plain GEMM          as igemm
direct     CUDA-core FMA (depthwise and small C/G),         positions × channels × 1 (depthwise tap
           vectorised over channels (forward ``group_m``    rows: × filter columns unrolled, 4 or 8;
           2 or 4: the depthwise-multiplier binary, each    multiplier: positions × groups × 1)
           loaded input feeding that many of its group's
           K/G outputs)
tma        stride-1 implicit GEMM over a zero-padded copy   padded positions × GEMM N × channels per
           of the activations: every operand tile is one    tap step (forward and backward-data)
           rectangular TMA box, no per-element addressing
dwroll     depthwise CUDA-core FMA rolling down the rows:   output columns × channels × filter height
           each input row is read once and serves every     (exact; backward-weight: also the most
           filter row from registers (``group_m`` > 1:      filter columns)
           forward / backward-data programs holding that
           many output rows, loads per depth tap at once)
gwalk      2D 3×3 grouped conv on tensor cores walking      forward / backward-data: GEMM M (images ×
           down ``group_m`` output rows (stride 1; one-row  output columns) × merged output channels ×
           backward-weight walks: any stride, dilation):    merged reduction channels (at least
           each input row is loaded once and serves every   MERGE·C/G or K/G); backward-weight: merged
           output row (forward and backward-data) or        K × merged C × (images × input columns);
           filter row (backward-weight) it feeds            ``group_m`` = output rows walked (1, 2 or
                                                            4), ``merge`` ≥ 1
halo       2D 3×3 grouped conv on tensor cores from a       GEMM M (images × padded output columns)
           shared-memory ring of input rows (Gluon; stride  × merged output channels (≥ MERGE·K/G) ×
           1 forward and backward-data, stride 2 forward):  merged reduction channels (≥ MERGE·C/G);
           each input row is copied once per column shift,  ``group_m`` = output rows a program walks
           every tap is a wgmma on two shared-memory        (4–32), ``merge`` ≥ 1
           operands
=========  ===============================================  =========================================

``split_k`` splits the GEMM reduction into that many contiguous parts (a grid axis), each written to an
fp32 workspace, then summed in a fixed order by one shared reduce (``kernels/split_reduce.py``;
deterministic, no atomics): in backward-weight the N·prod(out) positions (every family but tma), in
forward and backward-data the flattened (filter tap × channel block) loop of the tensor-core families
igemm, gmerge and gemm1x1 (for small GEMM M, e.g. batch-1 inference, where the (m, n) tiles alone leave
most SMs idle). direct, dwroll, tma and gwalk kernels of the data directions do not split (split_k = 1).
``vec`` = 8 promises 16-byte-aligned channel runs, ``vec`` = 2 or 4 (dwrun) that many neighbouring channels a
thread: a channel count divisible by ``vec`` (``is_supported`` checks the channel counts);
``index64`` computes element offsets in 64 bits for tensors over 2^31 elements; ``pad_channels`` (igemm, gemm1x1,
direct and dwrow, v8, 32-bit: :data:`PADDABLE_FAMILIES`) runs problems whose channel runs are not multiples of 8
on the v8 tile through zero-padded copies in the workspace (``is_supported`` refuses it where the channels are
aligned already).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import Enum

from tiledispatch.native.problem import Direction, DType

#: Tallest filter a dwroll kernel unrolls (one fp32 accumulator tile per filter row), and the widest a dwrow
#: kernel unrolls (one per filter column).
MAX_DWROLL_FILTER_HEIGHT = 7
#: Most output rows a forward / backward-data dwroll kernel holds (``group_m``; 1 = the rolling walk).
MAX_DWROLL_HELD_ROWS = 8
#: Most output columns a dwrun thread owns (``block_m``): its run's dY window holds ``F_H × RUN`` values.
MAX_DWRUN_RUN = 16


class ConfigError(ValueError):
    """A kernel config or name is malformed; the message names the field."""


class Family(str, Enum):
    IGEMM = "igemm"
    GMERGE = "gmerge"
    GEMM1X1 = "gemm1x1"
    DIRECT = "direct"
    TMA = "tma"
    DWROLL = "dwroll"
    GWALK = "gwalk"
    DWROW = "dwrow"
    DWRUN = "dwrun"
    HALO = "halo"

    @property
    def uses_tensor_cores(self) -> bool:
        return self not in _CUDA_CORE_FAMILIES

    @property
    def directions(self) -> tuple[Direction, ...]:
        """The directions the family has kernels for (tma: forward and backward-data; dwrow: backward-weight)."""
        return _FAMILY_DIRECTIONS.get(self, _EVERY_DIRECTION)

    @property
    def ndims(self) -> tuple[int, ...]:
        """The spatial dimensionalities the family has kernels for (gwalk, halo: 2D)."""
        return (2,) if self in (Family.GWALK, Family.HALO) else (2, 3)

    def ndims_for(self, direction: Direction) -> tuple[int, ...]:
        """:attr:`ndims` in one direction (dwrun: 3D backward-weight only)."""
        if self is Family.DWRUN and direction is not Direction.BACKWARD_WEIGHT:
            return (2,)
        return self.ndims

    @property
    def dtypes(self) -> tuple[DType, ...]:
        """The dtypes the family has kernels for (tma, gwalk, halo: bf16/fp16; fp32 runs on the exact igemm dots)."""
        if self in (Family.TMA, Family.GWALK, Family.HALO):
            return (DType.BF16, DType.FP16)
        return tuple(DType)


# Looked up by identity (enum members hash by their value: one dict or set probe, not a tuple scan of str ``==``).
_CUDA_CORE_FAMILIES = frozenset({Family.DIRECT, Family.DWROLL, Family.DWROW, Family.DWRUN})
#: Families with channel-padded (``pad_channels``) configs: the tensor-core GEMMs pad each group's channel run, the
#: CUDA-core depthwise ones the number of groups (``kernels/channel_pad_geometry.py``).
PADDABLE_FAMILIES = frozenset({Family.IGEMM, Family.GEMM1X1, Family.DIRECT, Family.DWROW})
#: The paddable families that pad the groups (of C/G = 1 problems) rather than each group's runs.
GROUP_PADDED_FAMILIES = frozenset({Family.DIRECT, Family.DWROW})
_FAMILY_DIRECTIONS = {Family.TMA: (Direction.FORWARD, Direction.BACKWARD_DATA),
                      Family.HALO: (Direction.FORWARD, Direction.BACKWARD_DATA),
                      Family.DWROW: (Direction.BACKWARD_WEIGHT,)}
_EVERY_DIRECTION = tuple(Direction)


@dataclass(frozen=True)
class KernelConfig:
    direction: Direction
    dtype: DType
    ndim: int
    family: Family
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int = 1
    split_k: int = 1
    merge: int = 1
    vec: int = 1
    index64: bool = False
    pad_channels: bool = False

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name in ("ndim", "block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "split_k",
                     "merge", "vec"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name}: must be an integer, got {value!r}")
        for name in ("index64", "pad_channels"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}: must be a bool, got {getattr(self, name)!r}")
        for name, kind in (("direction", Direction), ("dtype", DType), ("family", Family)):
            if type(getattr(self, name)) is kind:  # the rule sets' hundreds of thousands of candidates: no lookup
                continue
            try:
                set_(self, name, kind(getattr(self, name)))
            except ValueError:
                raise ConfigError(f"{name}: must be one of {[v.value for v in kind]}, "
                                  f"got {getattr(self, name)!r}") from None
        if self.ndim not in (2, 3):
            raise ConfigError(f"ndim: must be 2 or 3, got {self.ndim}")
        powers = ("block_m", "block_n", "num_warps", "group_m", "split_k", "merge")
        if self.family not in (Family.DWROLL, Family.DWROW, Family.DWRUN):
            powers += ("block_k",)  # (their block_k is a filter height / width: 3, 5, 7)
        if self.family is Family.DWRUN:  # its block_m is a run of output columns (7 for 56- and 28-wide rows)
            powers = tuple(name for name in powers if name != "block_m")
        if self.family is Family.HALO:  # its group_m is a walk of output rows (7, 14, 28 divide 14/28/56 rows)
            powers = tuple(name for name in powers if name != "group_m")
        for name in powers:
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ConfigError(f"{name}: must be a power of two >= 1, got {value}")
        if self.num_stages < 1:
            raise ConfigError(f"num_stages: must be >= 1, got {self.num_stages}")
        if self.vec not in (1, 2, 4, 8):
            raise ConfigError(f"vec: must be 1, 2 or 4 (dwrun) or 8, got {self.vec}")
        if self.vec in (2, 4) and self.family is not Family.DWRUN:
            raise ConfigError(f"vec: {self.vec} (channels a thread) is a dwrun tile, not {self.family.value}")
        if (self.split_k > 1 and self.direction is not Direction.BACKWARD_WEIGHT
                and self.family not in (Family.IGEMM, Family.GMERGE, Family.GEMM1X1)):
            raise ConfigError(f"split_k: {self.direction.value} kernels split the reduction only in the "
                              "tensor-core families igemm, gmerge and gemm1x1 "
                              "(direct, dwroll, tma and gwalk: split_k=1)")
        if self.merge > 1 and self.family not in (Family.GMERGE, Family.GWALK, Family.HALO):
            raise ConfigError("merge: must be 1 outside the gmerge, gwalk and halo families")
        if self.merge == 1 and self.family is Family.GMERGE:
            raise ConfigError("merge: gmerge kernels merge 2 or more groups (merge 1 is igemm)")
        if self.direction not in self.family.directions:
            raise ConfigError(f"family: {self.family.value} kernels run "
                              f"{' and '.join(d.value for d in self.family.directions)}, not {self.direction.value}")
        if self.pad_channels and (self.family not in PADDABLE_FAMILIES or self.vec != 8 or self.index64):
            raise ConfigError(f"pad_channels: channel padding runs an igemm, gemm1x1, direct or dwrow v8 tile with "
                              f"32-bit indices on padded copies, got {self.family.value} v{self.vec}"
                              f"{' i64' if self.index64 else ''}")
        if self.family is Family.TMA:
            if self.vec != 8 or self.index64:
                raise ConfigError("vec/index64: tma kernels need 16-byte-aligned channel runs (v8) and 32-bit indices")
            if self.dtype is DType.FP32:
                raise ConfigError("dtype: tma kernels are bf16/fp16 (fp32 runs on the exact igemm dots)")
        if self.family is Family.GWALK:
            if self.ndim not in self.family.ndims or self.vec != 8 or self.index64:
                raise ConfigError("ndim/vec/index64: gwalk kernels are 2D, vec=8 (16-byte channel runs), 32-bit "
                                  "indexed")
            if self.num_stages not in ((1, 2, 3) if self.direction is Direction.BACKWARD_WEIGHT else (1,)):
                raise ConfigError(f"num_stages: gwalk kernels walk with pointer loads (num_stages=1; the walk is "
                                  f"static code, nothing to pipeline) or, backward-weight, TMA boxes pipelined 2 or "
                                  f"3 deep; got {self.num_stages} for {self.direction.value}")
            if self.group_m not in (1, 2, 4):
                raise ConfigError(f"group_m: a gwalk kernel walks 1, 2 or 4 output rows, got {self.group_m}")
            if self.dtype not in self.family.dtypes:
                raise ConfigError("dtype: gwalk kernels are bf16/fp16 (fp32 runs on the exact igemm dots)")
        if self.family is Family.HALO:
            if self.ndim not in self.family.ndims or self.vec != 8 or self.index64 or self.num_stages != 1:
                raise ConfigError("ndim/vec/index64/num_stages: halo kernels are 2D, vec=8 (16-byte channel runs), "
                                  "32-bit indexed, num_stages=1 (the ring of input rows is the pipeline)")
            if self.dtype not in self.family.dtypes:
                raise ConfigError("dtype: halo kernels are bf16/fp16 (fp32 runs on the exact igemm dots)")
            if self.block_m not in (64, 128) or self.num_warps != 4:
                raise ConfigError(f"block_m/num_warps: a halo kernel is one warpgroup (num_warps=4) over 64 or 128 "
                                  f"rows, got block_m={self.block_m}, num_warps={self.num_warps}")
            if not 16 <= self.block_k <= 64 or not 16 <= self.block_n <= 128:
                raise ConfigError(f"block_k/block_n: a halo kernel's reduction tile is 16..64 and output tile "
                                  f"16..128 channels, got {self.block_k}/{self.block_n}")
            if not 4 <= self.group_m <= 32:
                raise ConfigError(f"group_m: a halo kernel walks 4..32 output rows, got {self.group_m}")
        if self.family is Family.DWROLL:
            if self.vec != 8 or self.num_stages not in (1, 2):
                raise ConfigError("vec/num_stages: dwroll kernels use vec=8 (16-byte channel runs), "
                                  "num_stages=1 (or 2: loads one row ahead)")
            if self.group_m != 1 and (self.group_m > MAX_DWROLL_HELD_ROWS or self.num_stages != 1
                                      or self.direction is Direction.BACKWARD_WEIGHT):
                raise ConfigError(f"group_m: a dwroll kernel rolls its rows (group_m=1) or, forward / backward-data "
                                  f"with num_stages=1, holds group_m = 2..{MAX_DWROLL_HELD_ROWS} output rows, "
                                  f"got group_m={self.group_m} (num_stages={self.num_stages}, "
                                  f"{self.direction.value})")
            if not 1 <= self.block_k <= MAX_DWROLL_FILTER_HEIGHT:
                raise ConfigError(f"block_k: a dwroll kernel's filter height must be 1..{MAX_DWROLL_FILTER_HEIGHT}, "
                                  f"got {self.block_k}")
        elif self.family is Family.DWROW:
            # (vec: 8, 16-byte channel runs, or 1, the scalar binary: any channel count, depthwise multipliers)
            if self.num_stages not in (1, 2) or self.group_m != 1:
                raise ConfigError("num_stages/group_m: dwrow kernels use num_stages=1 (or 2: loads one row ahead), "
                                  "group_m=1")
            if not 1 <= self.block_k <= MAX_DWROLL_FILTER_HEIGHT:
                raise ConfigError(f"block_k: a dwrow kernel's filter width must be 1..{MAX_DWROLL_FILTER_HEIGHT}, "
                                  f"got {self.block_k}")
        elif self.family is Family.DWRUN:
            if self.vec not in (1, 2, 4) or self.num_stages not in (1, 2, 3, 4) or self.merge != 1:
                raise ConfigError("vec/num_stages/merge: dwrun kernels use vec=1 (one 16-bit channel value a thread: "
                                  "any channel count), 2 or 4 (channels a thread, one 32- or 64-bit load: channel "
                                  "counts divisible by vec), num_stages=1 (or 2: loads one row ahead in registers; "
                                  "3, 4: forward / backward-data rows through shared memory, that many stages), "
                                  "merge=1")
            if self.num_stages > 2 and self.direction is Direction.BACKWARD_WEIGHT:
                raise ConfigError(f"num_stages: dwrun backward-weight kernels load 1 or 2 (a row ahead), "
                                  f"got {self.num_stages}")
            if self.ndim not in self.family.ndims_for(self.direction):
                raise ConfigError(f"ndim: dwrun {self.direction.value} kernels are 2D (3D: backward-weight only), "
                                  f"got {self.ndim}")
            if not 1 <= self.block_m <= MAX_DWRUN_RUN:
                raise ConfigError(f"block_m: a dwrun thread owns 1..{MAX_DWRUN_RUN} output columns, got {self.block_m}")
            if not 1 <= self.block_k <= MAX_DWROLL_FILTER_HEIGHT:
                raise ConfigError(f"block_k: a dwrun kernel's filter height must be 1..{MAX_DWROLL_FILTER_HEIGHT}, "
                                  f"got {self.block_k}")
        elif self.family.uses_tensor_cores:
            if self.block_k < 16 or self.block_m < 16 or self.block_n < 16:
                raise ConfigError("block_m/block_n/block_k: tensor-core tiles need every side >= 16")
        else:
            # block_k > 1: the depthwise tap-row programs, block_k = the most filter columns
            # they unroll (see kernels/direct.py).
            if self.block_k not in (1, 4, 8) or self.num_stages != 1:
                raise ConfigError("direct kernels use block_k=1 (or 4/8: depthwise tap rows), num_stages=1")
            if self.group_m != 1 and (self.group_m not in (2, 4) or self.direction is not Direction.FORWARD
                                      or self.block_k != 1):
                raise ConfigError(f"group_m: a direct kernel's group_m is 1, or 2 / 4 for the forward "
                                  f"depthwise-multiplier binary (block_k 1), got group_m={self.group_m} "
                                  f"({self.direction.value}, block_k={self.block_k})")

    @property
    def name(self) -> str:
        return (f"gconv_{self.direction.value}_{self.dtype.value}_{self.ndim}d_{self.family.value}"
                f"_{self.block_m}x{self.block_n}x{self.block_k}_w{self.num_warps}_s{self.num_stages}"
                f"_gm{self.group_m}_sk{self.split_k}_mg{self.merge}_v{self.vec}{'p' if self.pad_channels else ''}"
                f"_i{64 if self.index64 else 32}")

    @property
    def unpadded(self) -> KernelConfig:
        """The v8 kernel a ``pad_channels`` config runs on the padded copies (itself otherwise)."""
        return dataclasses.replace(self, pad_channels=False) if self.pad_channels else self

    def __str__(self) -> str:
        return self.name

    @property
    def smem_bytes_estimate(self) -> int:
        """Operand staging buffers of the software pipeline (tensor-core families); 0 for direct. halo: its ring
        of 3 column shifts × 4 input-row tiles, the nine tap matrices and the epilogue's conversion scratch;
        TMA-fed gwalk backward-weight: a unit's 3·ROWS gradient and ROWS + 2 input boxes per pipeline stage."""
        if not self.family.uses_tensor_cores:
            return 0
        if self.family is Family.HALO:
            return (12 * self.block_m * self.block_k + 9 * self.block_k * self.block_n
                    + self.block_m * self.block_n) * self.dtype.itemsize
        if self.family is Family.GWALK and self.num_stages > 1:  # TMA walk: a unit's boxes, num_stages deep
            rows = self.group_m
            return (self.num_stages * (3 * rows * self.block_m + (rows + 2) * self.block_n) * self.block_k
                    * self.dtype.itemsize)
        return self.num_stages * (self.block_m * self.block_k + self.block_k * self.block_n) * self.dtype.itemsize

    @property
    def accumulator_registers(self) -> int:
        """fp32 accumulator registers each thread holds."""
        return self.block_m * self.block_n // (32 * self.num_warps)


_NAME_RE = re.compile(
    r"^gconv_(?P<direction>fwd|bwd_data|bwd_weight)_(?P<dtype>bf16|fp16|fp32)_(?P<ndim>[23])d"
    r"_(?P<family>[a-z0-9]+)_(?P<block_m>\d+)x(?P<block_n>\d+)x(?P<block_k>\d+)_w(?P<num_warps>\d+)"
    r"_s(?P<num_stages>\d+)_gm(?P<group_m>\d+)_sk(?P<split_k>\d+)_mg(?P<merge>\d+)_v(?P<vec>\d+)"
    r"(?P<pad>p?)_i(?P<index_bits>32|64)$"
)


def parse_kernel_name(name: str) -> KernelConfig:
    """Inverse of :attr:`KernelConfig.name`; raises :class:`ConfigError` on anything else."""
    match = _NAME_RE.match(name)
    if not match:
        raise ConfigError(f"kernel name: {name!r} does not follow "
                          "gconv_<dir>_<dtype>_<n>d_<family>_<M>x<N>x<K>_w<W>_s<S>_gm<G>_sk<SK>_mg<MG>_v<V>[p]_i<32|64>")
    fields = match.groupdict()
    index_bits = fields.pop("index_bits")
    pad_channels = fields.pop("pad") == "p"
    try:
        family = Family(fields.pop("family"))
    except ValueError:
        raise ConfigError(f"kernel name: unknown family in {name!r}; families: {[f.value for f in Family]}") from None
    config = KernelConfig(
        direction=Direction(fields.pop("direction")),
        dtype=DType(fields.pop("dtype")),
        family=family,
        index64=index_bits == "64",
        pad_channels=pad_channels,
        **{key: int(value) for key, value in fields.items()},
    )
    if config.name != name:  # e.g. leading zeros: the canonical spelling is the only spelling
        raise ConfigError(f"kernel name: {name!r} is not canonical; did you mean {config.name!r}?")
    return config
