"""Test session set-up.

Without a GPU, Triton kernels run in its interpreter, which must be switched on before triton is
first imported: that is why this happens here, at conftest import, and nowhere in the package.
"""

from __future__ import annotations

import importlib.util
import os

import pytest


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


HAS_CUDA = _cuda_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    skip_interp = pytest.mark.skip(reason="interpreter tests run on hosts without a GPU (CI)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
        if "interpreter" in item.keywords and HAS_CUDA:
            item.add_marker(skip_interp)
