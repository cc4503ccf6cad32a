"""torchvision models used by the PyTorch-integration GPU tests and ``bench/torch_e2e.py``:
random weights (nothing is downloaded), what to swap in each, and their input shapes.

* ``resnext50_32x4d``: ResNeXt-style grouped 3×3 convs (16 of 53 convs, C/G = 4…32);
* ``mobilenet_v2``, ``convnext_tiny``: depthwise 3×3 (17 of 52) and depthwise 7×7 (18 of 22);
* ``mvit_v2_s``: the torchvision video model with depthwise 3D convs (48 of 49: attention pooling,
  3×3×3); its FLOPs are mostly attention and MLPs, so convs are a small share of its step time;
* ``r3d_18``: a 3D conv net with no grouped conv at all (torchvision has no grouped 3D CNN):
  its dense 3D convs are swapped (``include_dense``) to exercise the 3D paths, not as a target;
* ``r2plus1d_18``: dense (2+1)D convs, each a ``1×k×k`` spatial conv and a ``k×1×1`` temporal one: 3D
  problems that are 2D ones (``ConvProblem.planar``), swapped (``include_dense``) so the 2D kernels run
  3D layers through the integration; not a target either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelCase:
    name: str
    sample: tuple[int, ...]            # one input sample's shape (C, H, W) or (C, T, H, W)
    swap: dict[str, Any] = field(default_factory=dict)
    mostly_grouped: bool = True        # are its convolutions mostly grouped/depthwise (the speed target)?
    batches: tuple[int, int] = (32, 128)

    @property
    def ndim(self) -> int:
        return len(self.sample) - 1


CASES = {
    case.name: case for case in (
        ModelCase("resnext50_32x4d", (3, 224, 224), batches=(32, 128)),
        ModelCase("mobilenet_v2", (3, 224, 224), batches=(32, 128)),
        ModelCase("convnext_tiny", (3, 224, 224), batches=(32, 128)),
        ModelCase("mvit_v2_s", (3, 16, 224, 224), batches=(4, 16)),
        ModelCase("r3d_18", (3, 16, 112, 112), swap=dict(include_dense=True), mostly_grouped=False,
                  batches=(8, 32)),
        ModelCase("r2plus1d_18", (3, 16, 112, 112), swap=dict(include_dense=True), mostly_grouped=False,
                  batches=(8, 32)),
    )
}


def import_torchvision():
    """torchvision, or an ImportError saying why not (a CUDA build of torchvision on a CPU torch
    fails at import with a RuntimeError, not an ImportError)."""
    try:
        import torchvision
    except Exception as error:  # noqa: BLE001 - any failure means "not usable here"
        raise ImportError(f"torchvision is not importable: {type(error).__name__}: {error}") from error
    return torchvision


def build(name: str):
    """The model with random weights (``weights=None``)."""
    torchvision = import_torchvision()
    models = torchvision.models
    builder = getattr(models, name, None) or getattr(models.video, name)
    return builder(weights=None)


def without_dropout(model):
    """Dropout and stochastic depth off (p = 0), so two runs of a model in train mode are comparable."""
    for module in model.modules():
        kind = type(module).__name__
        if ("Dropout" in kind or "StochasticDepth" in kind) and hasattr(module, "p"):
            module.p = 0.0
    return model
