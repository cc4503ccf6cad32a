"""The split-K reduce (``native/kernels/split_reduce.py``) under the Triton interpreter: the sum of every
split row against a float64 reference, for split counts that are and are not powers of two and element
counts that do not fill the last program; bitwise the same on a second run; the grid covers every
element; nothing past the workspace's ``SPLIT_K`` rows of ``ELEMENTS`` is read, nothing past ``ELEMENTS``
written."""

from __future__ import annotations

import pytest
import torch

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.base import cdiv
from tiledispatch.native.kernels.split_reduce import (
    MIN_BLOCK,
    TILE_ELEMENTS,
    _split_reduce_kernel,
    reduce_block,
    split_reduce_launch,
    split_reduce_program,
)
from tiledispatch.native.problem import Direction, DType

pytestmark = pytest.mark.interpreter


def _config(split_k: int, dtype: DType = DType.FP32) -> KernelConfig:
    return KernelConfig(direction=Direction.BACKWARD_WEIGHT, dtype=dtype, ndim=2, family=Family.DWROLL, block_m=32,
                        block_n=32, block_k=3, num_warps=4, num_stages=2, split_k=split_k, vec=8)


def _reduce(workspace: torch.Tensor, out: torch.Tensor, config: KernelConfig, elements: int) -> None:
    program = split_reduce_program(config)
    launch = split_reduce_launch(config, workspace, out, elements)
    _split_reduce_kernel[launch.grid](*launch.args, **program.constexprs)


@pytest.mark.parametrize("split_k", [2, 16, 64, 128])
@pytest.mark.parametrize("elements", [1, 17, 1729])
@pytest.mark.parametrize("dtype", [DType.FP32, DType.FP16])
def test_sum_of_splits(split_k, elements, dtype):
    generator = torch.Generator().manual_seed(split_k * 1000 + elements)
    config = _config(split_k, dtype)
    partials = torch.randn(split_k, elements, generator=generator)
    # NaN past the partials: a read of it shows in the sum.
    workspace = torch.full((split_k * elements + 4096,), float("nan"), dtype=torch.float32)
    workspace[:split_k * elements] = partials.reshape(-1)
    torch_dtype = torch.float32 if dtype is DType.FP32 else torch.float16
    out = torch.full((elements + 8,), float("nan"), dtype=torch_dtype)  # poisoned, with a tail that must stay
    _reduce(workspace, out, config, elements)
    reference = partials.double().sum(dim=0)
    tolerance = 1e-5 if dtype is DType.FP32 else 2e-3
    error = (out[:elements].double() - reference).norm() / reference.norm()
    assert error < tolerance, f"relative error {error:.2e}"
    assert torch.isnan(out[elements:]).all(), "the reduce wrote past ELEMENTS"
    again = torch.full_like(out, float("nan"))
    _reduce(workspace, again, config, elements)
    assert torch.equal(out[:elements], again[:elements]), "two runs differ: the reduction is not deterministic"


@pytest.mark.parametrize("split_k", [2, 4, 8, 16, 32, 64, 128, 256, 512])
def test_block_keeps_the_tile_and_covers_every_element(split_k):
    block = reduce_block(split_k)
    assert block & (block - 1) == 0 and block >= MIN_BLOCK
    assert split_k * block == max(TILE_ELEMENTS, split_k * MIN_BLOCK)
    launch = split_reduce_launch(_config(split_k), None, None, 10_001)
    assert launch.grid == (cdiv(10_001, block), 1, 1)
    assert launch.grid[0] * block >= 10_001
