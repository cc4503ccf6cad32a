"""Fixtures of the PyTorch integration tests: a fresh runtime per test (the process-wide one is
restored afterwards)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def runtime_factory():
    """``runtime_factory(**settings)`` installs a fresh Runtime; the previous one comes back after."""
    from tiledispatch.integrations import torch_runtime

    previous = torch_runtime._RUNTIME

    def install(**settings):
        return torch_runtime.configure(**settings)

    yield install
    torch_runtime._RUNTIME = previous


@pytest.fixture
def interpreted(runtime_factory):
    """Our kernels on CPU tensors under the Triton interpreter (fp16/fp32; tiny shapes only)."""
    return runtime_factory(cpu="interpret", dtypes=(torch.float16, torch.float32))
