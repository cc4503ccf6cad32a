"""The backward-weight halo probe's walk (``bench/gpu/halo_weight_probe.py``): its NumPy replay of the kernel's
splits, units, streams, shifted rows and block-diagonal stores must give the float64 reference's dW on small
problems (odd batch, partial streams and row chunks, merged groups, C/G ≠ K/G, asymmetric pads). The kernel itself
runs on the GPU machine only (Gluon has no CPU interpreter)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

PROBE = Path(__file__).resolve().parents[2] / "bench" / "gpu" / "halo_weight_probe.py"


def _probe():
    spec = importlib.util.spec_from_file_location("halo_weight_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclass looks its module up there)
    spec.loader.exec_module(module)
    return module


def test_the_walk_reproduces_the_reference():
    assert _probe().emulate_check() == 0


def test_unsupported_layers_are_refused():
    from tiledispatch.native.problem import ConvProblem

    probe = _probe()
    strided = ConvProblem("bwd_weight", "bf16", 2, 4, 32, 32, (8, 8), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1))
    wide = ConvProblem("bwd_weight", "bf16", 2, 1, 128, 128, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    assert not probe.supported(strided) and not probe.supported(wide)
    # C/G 8 would merge 8 groups into 64 channels; 4 groups merge 4 (32 channels)
    four_groups = ConvProblem("bwd_weight", "bf16", 2, 4, 32, 32, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    assert probe.supported(four_groups) and probe.geometry(four_groups, probe.WeightTile(64, 4, 2, 1))["MERGE"] == 4
    # C/G 4 in one group: 4 channels, not a 16-byte run
    assert not probe.supported(ConvProblem("bwd_weight", "bf16", 2, 1, 4, 4, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1),
                                           (1, 1)))
