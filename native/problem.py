"""The grouped-convolution problem descriptor (DESIGN §3).

A problem is one convolution call in one direction. Channel counts are totals over groups
(``in_channels = G * C/G``); tensors are channels-last and grouped:

* input  ``X``: ``N, *spatial_in,  G, C/G``  (NHWGC, or NDHWGC in 3D)
* weight ``W``: ``G, K/G, *filter, C/G``     (GKYXC, or GKZYXC in 3D)
* output ``Y``: ``N, *spatial_out, G, K/G``  (NHWGK, or NDHWGK in 3D)

Per spatial dimension ``out = (in + pad_begin + pad_end - dilation*(filter-1) - 1) // stride + 1``
and the input position read by output position ``o`` through filter tap ``t`` is
``i = o*stride - pad_begin + t*dilation``.

Invalid input raises :class:`ProblemError` naming the field and the rule broken; nothing is
clamped or guessed.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

#: Largest element count allowed in any one tensor. Far above any GPU's memory; it exists so
#: that products of hostile sizes are refused before anything is allocated or indexed.
MAX_TENSOR_ELEMENTS = 1 << 48

#: Tensors with more elements than this need 64-bit element offsets inside kernels.
INT32_INDEX_LIMIT = (1 << 31) - 1


class ProblemError(ValueError):
    """A problem field breaks a rule. ``field`` names the field, ``rule`` says what must hold."""

    def __init__(self, field: str, rule: str):
        self.field = field
        self.rule = rule
        super().__init__(f"{field}: {rule}")


class Direction(str, Enum):
    FORWARD = "fwd"
    BACKWARD_DATA = "bwd_data"
    BACKWARD_WEIGHT = "bwd_weight"

    @classmethod
    def parse(cls, value: str | Direction, field: str = "direction") -> Direction:
        if isinstance(value, Direction):
            return value
        aliases = {"forward": "fwd", "backward_data": "bwd_data", "backward_weight": "bwd_weight",
                   "bwdd": "bwd_data", "bwdw": "bwd_weight"}
        text = aliases.get(str(value).lower(), str(value).lower())
        try:
            return cls(text)
        except ValueError:
            raise ProblemError(field, f"must be one of {[d.value for d in cls]}, got {value!r}") from None


class DType(str, Enum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"

    @property
    def itemsize(self) -> int:
        return 4 if self is DType.FP32 else 2

    @classmethod
    def parse(cls, value: str | DType, field: str = "dtype") -> DType:
        if isinstance(value, DType):
            return value
        aliases = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}
        text = aliases.get(str(value).lower(), str(value).lower())
        try:
            return cls(text)
        except ValueError:
            raise ProblemError(field, f"must be one of {[d.value for d in cls]}, got {value!r}") from None


class Layout(str, Enum):
    """Only the grouped channels-last layout exists: NHWGC / GKYXC / NHWGK (NDHWGC… in 3D)."""

    NHWGC = "nhwgc"

    @classmethod
    def parse(cls, value: str | Layout, field: str = "layout") -> Layout:
        if isinstance(value, Layout):
            return value
        text = str(value).lower()
        if text in ("nhwgc", "ndhwgc", "nhwgc_gkyxc_nhwgk", "ndhwgc_gkzyxc_ndhwgk"):
            return cls.NHWGC
        raise ProblemError(field, f"must be 'nhwgc' (NHWGC input / GKYXC weight / NHWGK output), got {value!r}")


class ProblemClass(str, Enum):
    DENSE = "dense"                           # G == 1
    GROUPED = "grouped"                       # G > 1, not depthwise
    DEPTHWISE = "depthwise"                   # C/G == 1 and K/G == 1
    DEPTHWISE_MULTIPLIER = "depthwise_multiplier"  # C/G == 1 and K/G > 1


_SPATIAL_FIELDS = ("input_size", "filter_size", "stride", "dilation", "pad_begin", "pad_end")


def _as_int(value: Any, field: str) -> int:
    """Integers, and floats with an integral value (JSON has one number type); nothing else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__index__"):
        raise ProblemError(field, f"must be an integer, got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ProblemError(field, f"must be an integer, got {value!r}")
        return int(value)
    return int(value)


def _as_dims(value: Any, field: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ProblemError(field, f"must be a list of 2 or 3 integers, got {value!r}")
    return tuple(_as_int(v, f"{field}[{i}]") for i, v in enumerate(value))


@dataclass(frozen=True)
class ConvProblem:
    """One grouped convolution in one direction. See the module docstring for the layout."""

    direction: Direction
    dtype: DType
    batch: int
    groups: int
    in_channels: int
    out_channels: int
    input_size: tuple[int, ...]
    filter_size: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_begin: tuple[int, ...]
    pad_end: tuple[int, ...]
    layout: Layout = Layout.NHWGC

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "direction", Direction.parse(self.direction))
        set_(self, "dtype", DType.parse(self.dtype))
        set_(self, "layout", Layout.parse(self.layout))
        for name in ("batch", "groups", "in_channels", "out_channels"):
            value = _as_int(getattr(self, name), name)
            if value < 1:
                raise ProblemError(name, f"must be >= 1, got {value}")
            set_(self, name, value)
        for name in _SPATIAL_FIELDS:
            set_(self, name, _as_dims(getattr(self, name), name))
        ndim = len(self.input_size)
        if ndim not in (2, 3):
            raise ProblemError("input_size", f"must have 2 (H, W) or 3 (D, H, W) entries, got {ndim}")
        for name in _SPATIAL_FIELDS[1:]:
            if len(getattr(self, name)) != ndim:
                raise ProblemError(name, f"must have {ndim} entries like input_size, got {len(getattr(self, name))}")
        for name, low in (("input_size", 1), ("filter_size", 1), ("stride", 1), ("dilation", 1),
                          ("pad_begin", 0), ("pad_end", 0)):
            for axis, value in enumerate(getattr(self, name)):
                if value < low:
                    raise ProblemError(f"{name}[{axis}]", f"must be >= {low}, got {value}")
        if self.in_channels % self.groups:
            raise ProblemError("in_channels", f"must be divisible by groups ({self.in_channels} % {self.groups} != 0)")
        if self.out_channels % self.groups:
            raise ProblemError("out_channels",
                               f"must be divisible by groups ({self.out_channels} % {self.groups} != 0)")
        for axis in range(ndim):
            span = self.input_size[axis] + self.pad_begin[axis] + self.pad_end[axis]
            reach = self.dilation[axis] * (self.filter_size[axis] - 1) + 1
            if span < reach:
                raise ProblemError(
                    f"filter_size[{axis}]",
                    f"output size would be < 1: input {self.input_size[axis]} + pads "
                    f"{self.pad_begin[axis]}+{self.pad_end[axis]} is smaller than the dilated filter extent {reach}",
                )
        for name, count in (("input", self.input_elements), ("weight", self.weight_elements),
                            ("output", self.output_elements)):
            if count > MAX_TENSOR_ELEMENTS:
                raise ProblemError(name, f"tensor of {count} elements exceeds the limit of {MAX_TENSOR_ELEMENTS}")

    # ---- sizes ---------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.input_size)

    @property
    def c_per_group(self) -> int:
        return self.in_channels // self.groups

    @property
    def k_per_group(self) -> int:
        return self.out_channels // self.groups

    @property
    def output_size(self) -> tuple[int, ...]:
        return tuple(
            (i + pb + pe - d * (f - 1) - 1) // s + 1
            for i, f, s, d, pb, pe in zip(self.input_size, self.filter_size, self.stride, self.dilation,
                                          self.pad_begin, self.pad_end)
        )

    @property
    def filter_taps(self) -> int:
        return math.prod(self.filter_size)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """X (and dX): N, *spatial_in, G, C/G."""
        return (self.batch, *self.input_size, self.groups, self.c_per_group)

    @property
    def weight_shape(self) -> tuple[int, ...]:
        """W (and dW): G, K/G, *filter, C/G."""
        return (self.groups, self.k_per_group, *self.filter_size, self.c_per_group)

    @property
    def output_shape(self) -> tuple[int, ...]:
        """Y (and dY): N, *spatial_out, G, K/G."""
        return (self.batch, *self.output_size, self.groups, self.k_per_group)

    @property
    def input_elements(self) -> int:
        return math.prod(self.input_shape)

    @property
    def weight_elements(self) -> int:
        return math.prod(self.weight_shape)

    @property
    def output_elements(self) -> int:
        return math.prod(self.output_shape)

    @property
    def needs_int64_index(self) -> bool:
        return max(self.input_elements, self.weight_elements, self.output_elements) > INT32_INDEX_LIMIT

    # ---- work ----------------------------------------------------------------------------
    @property
    def flops(self) -> int:
        """2·N·K·prod(out)·(C/G)·prod(filter), the same for every direction."""
        return 2 * self.batch * self.out_channels * math.prod(self.output_size) * self.c_per_group * self.filter_taps

    @property
    def operand_shapes(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(first operand, second operand, result) shapes of this direction's runner contract."""
        if self.direction is Direction.FORWARD:
            return self.input_shape, self.weight_shape, self.output_shape
        if self.direction is Direction.BACKWARD_DATA:
            return self.output_shape, self.weight_shape, self.input_shape
        return self.input_shape, self.output_shape, self.weight_shape

    @property
    def min_bytes(self) -> int:
        """Every operand read once and the result written once."""
        return sum(math.prod(shape) for shape in self.operand_shapes) * self.dtype.itemsize

    @property
    def gemm_mnk(self) -> tuple[int, int, int]:
        """(M, N, K) of the implicit GEMM of one group (DESIGN §3 table)."""
        taps = self.filter_taps
        if self.direction is Direction.FORWARD:
            return self.batch * math.prod(self.output_size), self.k_per_group, self.c_per_group * taps
        if self.direction is Direction.BACKWARD_DATA:
            return self.batch * math.prod(self.input_size), self.c_per_group, self.k_per_group * taps
        return self.k_per_group, self.c_per_group * taps, self.batch * math.prod(self.output_size)

    @property
    def problem_class(self) -> ProblemClass:
        if self.groups == 1:
            return ProblemClass.DENSE
        if self.c_per_group == 1:
            return ProblemClass.DEPTHWISE if self.k_per_group == 1 else ProblemClass.DEPTHWISE_MULTIPLIER
        return ProblemClass.GROUPED

    @property
    def class_label(self) -> str:
        """e.g. ``2d_depthwise``: the class used in reports."""
        return f"{self.ndim}d_{self.problem_class.value}"

    @functools.cached_property
    def planar(self) -> ConvProblem | None:
        """The 2D problem this 3D one is, over the same bytes, when one axis of the filter does nothing
        but map positions one to one; ``None`` when there is none (and for 2D problems).

        * Spatial filter (``1, fH, fW``; depth stride 1, no depth padding): output depth ``d`` reads only
          input depth ``d``, so the problem is a 2D convolution of ``N·D`` images ``H × W``:
          ``N, D, H, W, G, C`` memory is ``(N·D), H, W, G, C`` memory, and the same holds for the output;
          the weight ``G, K, 1, fH, fW, C`` is ``G, K, fH, fW, C``.
        * Temporal filter (``fD, 1, 1``; stride 1 and no padding in H and W): each (h, w) column is its own
          1D convolution along depth, so the problem is a 2D convolution of ``N`` images ``D × (H·W)``
          with a ``fD × 1`` filter: ``N, D, H, W, G, C`` memory is ``N, D, (H·W), G, C`` memory.

        A ``1 × 1 × 1`` filter at stride 1 without padding is both; the spatial form is used. Dilation
        along a 1-tap axis changes nothing and becomes 1. Element counts, and so 32-bit indexing, are
        unchanged; 2D kernels running it see exactly the 3D problem's work."""
        if self.ndim != 3:
            return None
        depth_idle = self.filter_size[0] == 1 and self.stride[0] == 1 and self.pad_begin[0] == self.pad_end[0] == 0
        plane_idle = (self.filter_size[1:] == (1, 1) and self.stride[1:] == (1, 1)
                      and self.pad_begin[1:] == (0, 0) and self.pad_end[1:] == (0, 0))
        if depth_idle:
            depth = self.input_size[0]
            return dataclasses.replace(self, batch=self.batch * depth, input_size=self.input_size[1:],
                                       filter_size=self.filter_size[1:], stride=self.stride[1:],
                                       dilation=self.dilation[1:], pad_begin=self.pad_begin[1:],
                                       pad_end=self.pad_end[1:])
        if plane_idle:
            depth, height, width = self.input_size
            return dataclasses.replace(self, input_size=(depth, height * width), filter_size=(self.filter_size[0], 1),
                                       stride=(self.stride[0], 1), dilation=(self.dilation[0], 1),
                                       pad_begin=(self.pad_begin[0], 0), pad_end=(self.pad_end[0], 0))
        return None

    @property
    def canonical(self) -> ConvProblem:
        """The form kernels are selected for: :attr:`planar` where there is one (its 2D kernels run the
        problem over the same bytes, and the 2D families include every 3D one), else the problem itself."""
        return self.planar or self

    def kernel_problem(self, kernel_ndim: int) -> ConvProblem | None:
        """The problem a ``kernel_ndim``-D kernel runs for this one: itself, its :attr:`planar` form (a 2D
        kernel on a 3D problem), or ``None`` when a kernel of that rank cannot run it."""
        if kernel_ndim == self.ndim:
            return self
        if kernel_ndim == 2:
            return self.planar
        return None

    # ---- identity and serialisation ------------------------------------------------------
    @property
    def key(self) -> str:
        """Canonical key: every field that defines the problem, in a fixed order."""
        def dims(values: tuple[int, ...]) -> str:
            return "x".join(str(v) for v in values)

        return (f"{self.direction.value}|{self.dtype.value}|{self.ndim}d|n{self.batch}|g{self.groups}"
                f"|c{self.in_channels}|k{self.out_channels}|in{dims(self.input_size)}|f{dims(self.filter_size)}"
                f"|s{dims(self.stride)}|d{dims(self.dilation)}|pb{dims(self.pad_begin)}|pe{dims(self.pad_end)}")

    @classmethod
    def from_key(cls, key: str) -> ConvProblem:
        """The problem a :attr:`key` names (its inverse; the problem's own rules are checked too)."""
        parts = key.strip().split("|")
        prefixes = ("n", "g", "c", "k", "in", "f", "s", "d", "pb", "pe")
        if len(parts) != 3 + len(prefixes) or not parts[2].endswith("d"):
            raise ProblemError("key", "direction|dtype|<ndim>d|n..|g..|c..|k..|in..|f..|s..|d..|pb..|pe.., "
                                      f"as ConvProblem.key writes it; got {key!r}")
        values = []
        for prefix, part in zip(prefixes, parts[3:]):
            body = part[len(prefix):]
            if not part.startswith(prefix) or not body:
                raise ProblemError("key", f"field {prefix!r} expected where {part!r} stands in {key!r}")
            try:
                values.append(tuple(int(v) for v in body.split("x")))
            except ValueError:
                raise ProblemError("key", f"{part!r}: sizes are integers joined by 'x'") from None
        (batch,), (groups,), (in_channels,), (out_channels,) = (v if len(v) == 1 else (None,) for v in values[:4])
        if None in (batch, groups, in_channels, out_channels):
            raise ProblemError("key", f"n, g, c and k take one integer each in {key!r}")
        input_size, filter_size, stride, dilation, pad_begin, pad_end = values[4:]
        problem = cls(direction=parts[0], dtype=parts[1], batch=batch, groups=groups, in_channels=in_channels,
                      out_channels=out_channels, input_size=input_size, filter_size=filter_size, stride=stride,
                      dilation=dilation, pad_begin=pad_begin, pad_end=pad_end)
        if problem.key != key.strip():
            raise ProblemError("key", f"{key!r} is not canonical; it reads as {problem.key!r}")
        return problem

    @property
    def shape_key(self) -> str:
        """The key without direction and dtype: the same convolution in every direction."""
        return self.key.split("|", 2)[2]

    def with_direction(self, direction: Direction | str) -> ConvProblem:
        return dataclasses.replace(self, direction=Direction.parse(direction))

    def with_dtype(self, dtype: DType | str) -> ConvProblem:
        return dataclasses.replace(self, dtype=DType.parse(dtype))

    def to_dict(self) -> dict[str, Any]:
        return {
            "direction": self.direction.value,
            "dtype": self.dtype.value,
            "batch": self.batch,
            "groups": self.groups,
            "in_channels": self.in_channels,
            "out_channels": self.out_channels,
            "input_size": list(self.input_size),
            "filter_size": list(self.filter_size),
            "stride": list(self.stride),
            "dilation": list(self.dilation),
            "pad_begin": list(self.pad_begin),
            "pad_end": list(self.pad_end),
            "layout": self.layout.value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConvProblem:
        """Build from :meth:`to_dict` output. Unknown keys are refused; ``stride``, ``dilation``,
        pads and ``layout`` may be left out (1, 1, 0, nhwgc)."""
        if not isinstance(data, Mapping):
            raise ProblemError("problem", f"must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ProblemError(unknown[0], f"is not a problem field (fields: {sorted(known)})")
        for required in ("direction", "dtype", "batch", "groups", "in_channels", "out_channels",
                         "input_size", "filter_size"):
            if required not in data:
                raise ProblemError(required, "is required")
        ndim = len(_as_dims(data["input_size"], "input_size"))
        values = dict(data)
        values.setdefault("stride", [1] * ndim)
        values.setdefault("dilation", [1] * ndim)
        values.setdefault("pad_begin", [0] * ndim)
        values.setdefault("pad_end", [0] * ndim)
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ConvProblem:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ProblemError("problem", f"is not valid JSON: {error}") from None
        return cls.from_dict(data)

    @classmethod
    def from_suite_entry(cls, entry: Mapping[str, Any], direction: Direction | str,
                         dtype: DType | str = DType.BF16) -> ConvProblem:
        """Build from an entry of ``shared/bench/dev_suite.json`` (keys N, G, C, K, input, filter…)."""
        return cls(direction=direction, dtype=dtype, batch=entry["N"], groups=entry["G"],
                   in_channels=entry["C"], out_channels=entry["K"], input_size=entry["input"],
                   filter_size=entry["filter"], stride=entry["stride"], dilation=entry["dilation"],
                   pad_begin=entry["pad_begin"], pad_end=entry["pad_end"])
