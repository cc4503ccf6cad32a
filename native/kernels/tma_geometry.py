"""Host-side shapes of the ``tma`` family (no Triton import: the support check uses them too).

The family convolves a zero-padded copy of its activations (see ``tma_conv.py``): X padded by the
problem's pads for forward; dY padded by ``dil·(F−1) − pad`` for backward-data."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from tiledispatch.native.kernels.base import as3d
from tiledispatch.native.problem import ConvProblem, Direction

#: Every workspace region starts 16-byte aligned (TMA base addresses must be): 8 half-precision elements.
ALIGN_ELEMENTS = 8


@dataclass(frozen=True)
class TmaGeometry:
    """Sizes of one problem's GEMM over padded positions, 3D view. ``reduction``/``outputs``: the
    channels per group of the padded operand (C/G forward, K/G backward-data) and of the result."""

    problem: ConvProblem

    @property
    def forward(self) -> bool:
        return self.problem.direction is Direction.FORWARD

    @cached_property
    def pads(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        p = self.problem
        begin, end = as3d(p.pad_begin, 0), as3d(p.pad_end, 0)
        if self.forward:
            return begin, end
        reach = tuple(d * (f - 1) for d, f in zip(as3d(p.dilation, 1), as3d(p.filter_size, 1)))
        return tuple(r - b for r, b in zip(reach, begin)), tuple(r - e for r, e in zip(reach, end))

    @property
    def source(self) -> tuple[int, ...]:
        return as3d(self.problem.input_size if self.forward else self.problem.output_size, 1)

    @property
    def out(self) -> tuple[int, ...]:
        return as3d(self.problem.output_size if self.forward else self.problem.input_size, 1)

    @property
    def padded(self) -> tuple[int, ...]:
        begin, end = self.pads
        return tuple(s + b + e for s, b, e in zip(self.source, begin, end))

    @property
    def reduction(self) -> int:
        return self.problem.c_per_group if self.forward else self.problem.k_per_group

    @property
    def outputs(self) -> int:
        return self.problem.k_per_group if self.forward else self.problem.c_per_group

    @property
    def rows(self) -> int:
        return self.problem.batch * math.prod(self.padded)

    @property
    def needs_padding(self) -> bool:
        begin, end = self.pads
        return any(begin) or any(end)

    @property
    def padded_elements(self) -> int:
        """Elements of the padded copy (0 when every pad is 0: the operand is read in place)."""
        return self.rows * self.problem.groups * self.reduction if self.needs_padding else 0

    @property
    def regions(self) -> tuple[int, int]:
        """(padded activations, packed filter) elements in the problem's dtype, each 16-byte rounded."""
        flipped = self.problem.weight_elements if not self.forward else 0
        return tuple(-(-n // ALIGN_ELEMENTS) * ALIGN_ELEMENTS for n in (self.padded_elements, flipped))
