"""Test session set-up.

Without a GPU, Triton kernels run in its interpreter, which must be switched on before triton is
first imported: that is why this happens here, at conftest import, and nowhere in the package.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

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


@pytest.fixture(scope="session")
def shipped_model_store():
    """The server's ModelStore of every shipped model (models/artifacts, all versions) for sm_90, loaded once a
    test process (63 folders: about 11 s on the 2-core CI machine). Its users only choose, find and predict."""
    from tiledispatch.native.arch import get_arch
    from tiledispatch.server.predictors import ModelStore

    return ModelStore.load(Path(__file__).resolve().parents[1] / "models" / "artifacts", get_arch("sm_90"))

