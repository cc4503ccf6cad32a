"""Crawl torchvision's model zoo for grouped-convolution problems (DESIGN §6 source b).

Every classification, video, detection and segmentation model that ``torchvision.models``
lists is built on the ``meta`` device (no weights, no memory, nothing downloaded), every
``nn.Conv2d``/``nn.Conv3d`` gets a forward pre-hook, and one representative input is pushed
through. Each hooked call gives one convolution *shape*; it becomes a problem per batch size of
the task's documented list (:data:`BATCHES`). Transposed convolutions are not crawled.

Representative inputs (one per model, batch 1):

* classification: ``crop_size`` of the model's default weights' preset (224 for most, 299 for
  Inception, up to 600 for EfficientNet-B7), square;
* video: 16 frames at the default weights' ``crop_size`` (112 for R3D/MC3/R(2+1)D, 224 else);
* segmentation: 520 × 520 (the presets' ``resize_size``);
* detection: a 480 × 640 image resized the way the model's ``GeneralizedRCNNTransform`` would
  (``min_size``/``max_size``, padded to ``size_divisible``), or the fixed SSD sizes; only the
  backbone, the FPN and the dense heads are run (region proposal and NMS need real data), and
  the region-of-interest heads (box head of the v2 models, mask and keypoint heads) are run on
  pooled features with ``ROI_BATCHES`` regions instead of the image batch.

A problem whose largest tensor has more than :data:`MAX_ELEMENTS` elements, or whose batch
exceeds :data:`MAX_BATCH`, is dropped (and counted). MViT's attention-pooling convolutions run on
``batch × heads`` rows; that factor is recorded per shape and multiplies the batch.
Padding: ``padding="same"`` becomes ``d·(f−1)//2`` before and the rest after (PyTorch's rule);
non-zero padding modes (reflect, replicate, circular) pad outside the convolution, so the
problem sees the padded input and zero conv padding.

Problems are deduplicated by their forward bf16 key; each keeps the sorted list of models it
occurs in, and its *group* (for splitting) is ``torchvision:<first model>``. The file lists
forward problems only: ``tiledispatch bench --problems FILE --directions ...`` expands each entry
to every direction asked for, so the same file serves all three directions.

CLI: ``python -m tiledispatch.models.sources.torchvision_crawler --out models/data/problems/torchvision.json``
(needs the ``crawl`` extra: ``pip install --no-deps torchvision==<the version built for the local torch>``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiledispatch.native.problem import ConvProblem, ProblemError

TASKS = ("classification", "video", "detection", "segmentation")

#: Image (or clip) batch sizes per task. Problems span batch 1–256 overall (DESIGN §6).
BATCHES: dict[str, tuple[int, ...]] = {
    "classification": (1, 2, 8, 32, 64, 128, 256),
    "video": (1, 2, 4, 8, 16, 32),
    "detection": (1, 2, 4, 8, 16),
    "segmentation": (1, 2, 4, 8, 16, 32),
}

#: Region counts used as the batch of region-of-interest heads (mask, keypoint, conv box head).
ROI_BATCHES = (16, 64, 256)

#: Largest tensor kept (elements): 2^30 elements = 2 GiB in bf16.
MAX_ELEMENTS = 1 << 30

#: Largest convolution batch kept (DESIGN §6: batch 1–256).
MAX_BATCH = 256

VIDEO_FRAMES = 16
SEGMENTATION_SIZE = 520
DETECTION_IMAGE = (480, 640)  # H, W of the notional image before the model's own resize


@dataclass(frozen=True)
class ConvShape:
    """One convolution call without its batch: everything ``ConvProblem`` needs but ``N``."""

    groups: int
    in_channels: int
    out_channels: int
    input_size: tuple[int, ...]
    filter_size: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    pad_begin: tuple[int, ...]
    pad_end: tuple[int, ...]
    roi: bool = False  # batch is a region count (ROI heads), not the image batch
    per_item: int = 1  # calls per image: MViT's pooling convs run on batch × heads

    def problem(self, batch: int) -> ConvProblem:
        return ConvProblem(direction="fwd", dtype="bf16", batch=batch * self.per_item, groups=self.groups,
                           in_channels=self.in_channels, out_channels=self.out_channels,
                           input_size=self.input_size, filter_size=self.filter_size, stride=self.stride,
                           dilation=self.dilation, pad_begin=self.pad_begin, pad_end=self.pad_end)


@dataclass
class ModelResult:
    name: str
    task: str
    input_shape: tuple[int, ...]
    shapes: list[ConvShape] = field(default_factory=list)
    error: str = ""


# ---- torchvision import ------------------------------------------------------------------------

_STUB_LIBRARY: Any = None


def import_torchvision() -> Any:
    """Import torchvision; tolerate a compiled extension that cannot load.

    The only torchvision wheel built for a given torch may be a CUDA build whose ``_C`` library
    does not load against the CPU torch; ``torchvision/__init__`` then fails registering fake
    kernels for ``torchvision::nms``/``qnms``. Declaring those two schemas first lets the
    pure-Python model code import; the crawler never calls these operators.
    """
    global _STUB_LIBRARY
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
    import torch

    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _STUB_LIBRARY = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        if not torch._C._dispatch_has_kernel(f"torchvision::{op}") and not hasattr(torch.ops.torchvision, op):
            _STUB_LIBRARY.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    return importlib.import_module("torchvision")


# ---- hooks -------------------------------------------------------------------------------------

def _pads(module: Any, spatial: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(input size seen by the convolution, pad_begin, pad_end) for one Conv module call."""
    ndim = len(spatial)
    filt, dil = tuple(module.kernel_size), tuple(module.dilation)
    padding = module.padding
    if isinstance(padding, str):
        if padding == "valid":
            begin = end = (0,) * ndim
        else:  # "same": PyTorch puts the odd pixel at the end
            total = [d * (f - 1) for f, d in zip(filt, dil)]
            begin = tuple(t // 2 for t in total)
            end = tuple(t - t // 2 for t in total)
    else:
        begin = end = tuple(int(p) for p in padding)
    if module.padding_mode != "zeros":
        spatial = tuple(s + b + e for s, b, e in zip(spatial, begin, end))
        begin = end = (0,) * ndim
    return spatial, begin, end


def _shape_of(module: Any, x: Any, roi: bool) -> ConvShape:
    """The call's shape; with an input of batch 1, ``x.shape[0]`` is the calls-per-image factor."""
    spatial, begin, end = _pads(module, tuple(int(s) for s in x.shape[2:]))
    return ConvShape(groups=int(module.groups), in_channels=int(module.in_channels),
                     out_channels=int(module.out_channels), input_size=spatial,
                     filter_size=tuple(int(f) for f in module.kernel_size),
                     stride=tuple(int(s) for s in module.stride), dilation=tuple(int(d) for d in module.dilation),
                     pad_begin=begin, pad_end=end, roi=roi, per_item=1 if roi else int(x.shape[0]))


class _Recorder:
    """Forward pre-hooks on every Conv2d/Conv3d of a module; ``roi`` marks calls made on regions."""

    def __init__(self, torch: Any, model: Any):
        self.shapes: list[ConvShape] = []
        self.roi = False
        self._handles = [m.register_forward_pre_hook(self._hook) for m in model.modules()
                         if isinstance(m, (torch.nn.Conv2d, torch.nn.Conv3d))]

    def _hook(self, module: Any, args: tuple[Any, ...]) -> None:
        self.shapes.append(_shape_of(module, args[0], self.roi))

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


# ---- per-task drivers ----------------------------------------------------------------------------

def _crop_size(tv: Any, name: str, default: int) -> int:
    try:
        weights = tv.models.get_model_weights(name).DEFAULT
        crop = weights.transforms().crop_size
        return int(crop[0])
    except Exception:  # noqa: BLE001 - any model without a preset uses the default
        return default


def _detection_size(transform: Any) -> tuple[int, int]:
    fixed = getattr(transform, "fixed_size", None)
    if fixed:
        return int(fixed[0]), int(fixed[1])
    height, width = DETECTION_IMAGE
    min_size, max_size = float(transform.min_size[-1]), float(transform.max_size)
    scale = min(min_size / min(height, width), max_size / max(height, width))
    h, w = int(math.floor(height * scale)), int(math.floor(width * scale))
    div = int(getattr(transform, "size_divisible", 32))
    return -(-h // div) * div, -(-w // div) * div


def _run_detection(torch: Any, model: Any, recorder: _Recorder) -> tuple[int, ...]:
    h, w = _detection_size(model.transform)
    x = torch.empty(1, 3, h, w, device="meta")
    feats = model.backbone(x)
    levels = list(feats.values()) if isinstance(feats, dict) else [feats]
    if hasattr(model, "rpn"):  # Faster / Mask / Keypoint R-CNN
        model.rpn.head(levels)
        channels = model.backbone.out_channels
        recorder.roi = True
        heads = model.roi_heads
        box_size = heads.box_roi_pool.output_size
        box_size = box_size if isinstance(box_size, (list, tuple)) else (box_size, box_size)
        heads.box_head(torch.empty(1, channels, *box_size, device="meta"))
        for head, predictor, pool in (("mask_head", "mask_predictor", "mask_roi_pool"),
                                      ("keypoint_head", "keypoint_predictor", "keypoint_roi_pool")):
            if getattr(heads, head, None) is not None:
                size = getattr(heads, pool).output_size
                size = size if isinstance(size, (list, tuple)) else (size, size)
                out = getattr(heads, head)(torch.empty(1, channels, *size, device="meta"))
                getattr(heads, predictor)(out)
        recorder.roi = False
    else:  # RetinaNet, FCOS, SSD, SSDlite: dense heads over every level
        model.head(levels)
    return (1, 3, h, w)


@contextlib.contextmanager
def _parameters_on_meta(torch: Any) -> Iterator[None]:
    """Build on the CPU but move each parameter and buffer to ``meta`` as it is registered, for
    builders that compute sizes with tensors (RegNet) and so cannot run under ``torch.device("meta")``."""
    module_cls = torch.nn.Module
    old_param, old_buffer = module_cls.register_parameter, module_cls.register_buffer

    def register_parameter(self: Any, name: str, param: Any) -> None:
        old_param(self, name, param)
        if param is not None:
            self._parameters[name] = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    def register_buffer(self: Any, name: str, tensor: Any, persistent: bool = True) -> None:
        old_buffer(self, name, tensor, persistent)
        if tensor is not None:
            self._buffers[name] = tensor.to("meta")

    module_cls.register_parameter, module_cls.register_buffer = register_parameter, register_buffer
    try:
        yield
    finally:
        module_cls.register_parameter, module_cls.register_buffer = old_param, old_buffer


def _build(torch: Any, tv: Any, name: str, kwargs: dict[str, Any]) -> Any:
    try:
        with torch.device("meta"):
            return tv.models.get_model(name, **kwargs)
    except NotImplementedError:  # "Cannot copy out of meta tensor": sizes computed with tensors
        with _parameters_on_meta(torch):
            return tv.models.get_model(name, **kwargs)


def crawl_model(tv: Any, name: str, task: str) -> ModelResult:
    """Build one model on the meta device and record its convolution shapes."""
    import torch

    kwargs: dict[str, Any] = {"weights": None}
    if task in ("detection", "segmentation"):
        kwargs["weights_backbone"] = None
    result = ModelResult(name=name, task=task, input_shape=())
    try:
        model = _build(torch, tv, name, kwargs)
        model.eval()
        recorder = _Recorder(torch, model)
        try:
            with torch.no_grad():
                if task == "classification":
                    side = int(getattr(model, "image_size", 0)) or _crop_size(tv, name, 224)
                    result.input_shape = (1, 3, side, side)
                    model(torch.empty(*result.input_shape, device="meta"))
                elif task == "video":
                    side = _crop_size(tv, name, 112)
                    result.input_shape = (1, 3, VIDEO_FRAMES, side, side)
                    model(torch.empty(*result.input_shape, device="meta"))
                elif task == "segmentation":
                    result.input_shape = (1, 3, SEGMENTATION_SIZE, SEGMENTATION_SIZE)
                    model(torch.empty(*result.input_shape, device="meta"))
                else:
                    result.input_shape = _run_detection(torch, model, recorder)
        finally:
            recorder.close()
        result.shapes = recorder.shapes
    except Exception as error:  # noqa: BLE001 - one model failing must not stop the crawl
        result.error = f"{type(error).__name__}: {error}"[:300]
    return result


def model_names(tv: Any, task: str) -> list[str]:
    module = {"classification": tv.models, "video": tv.models.video, "detection": tv.models.detection,
              "segmentation": tv.models.segmentation}[task]
    return sorted(tv.models.list_models(module=module))


# ---- expansion to problems -----------------------------------------------------------------------

@dataclass
class CrawlOutput:
    problems: list[dict[str, Any]]
    meta: list[dict[str, Any]]
    source: dict[str, Any]


def expand(results: Iterable[ModelResult]) -> CrawlOutput:
    """Shapes × batch lists → deduplicated forward bf16 problems with their models."""
    by_key: dict[str, dict[str, Any]] = {}
    dropped = 0
    models_meta: list[dict[str, Any]] = []
    for result in results:
        models_meta.append({"model": result.name, "task": result.task, "input": list(result.input_shape),
                            "convs": len(result.shapes), "distinct_shapes": len(set(result.shapes)),
                            **({"error": result.error} if result.error else {})})
        for shape in sorted(set(result.shapes), key=repr):
            for batch in ROI_BATCHES if shape.roi else BATCHES[result.task]:
                try:
                    problem = shape.problem(batch)
                except ProblemError:
                    dropped += 1
                    continue
                if (problem.batch > MAX_BATCH or
                        max(problem.input_elements, problem.weight_elements, problem.output_elements) > MAX_ELEMENTS):
                    dropped += 1
                    continue
                entry = by_key.setdefault(problem.key, {"problem": problem, "models": set(), "tasks": set(),
                                                        "roi": shape.roi})
                entry["models"].add(result.name)
                entry["tasks"].add(result.task)
    ordered = sorted(by_key.values(), key=lambda e: (sorted(e["models"])[0], e["problem"].key))
    problems = [e["problem"].to_dict() for e in ordered]
    meta = [{"group": f"torchvision:{sorted(e['models'])[0]}", "models": sorted(e["models"]),
             "tasks": sorted(e["tasks"]), "class": e["problem"].class_label, **({"roi": True} if e["roi"] else {})}
            for e in ordered]
    source = {"dropped_too_large": dropped, "models": models_meta}
    return CrawlOutput(problems=problems, meta=meta, source=source)


def crawl(tasks: Iterable[str] = TASKS, only: Iterable[str] | None = None,
          progress: Callable[[str], None] | None = None) -> CrawlOutput:
    import torch

    tv = import_torchvision()
    warnings.filterwarnings("ignore", category=FutureWarning, module="torchvision")
    wanted = set(only) if only else None
    results = []
    for task in tasks:
        for name in model_names(tv, task):
            if wanted is not None and name not in wanted:
                continue
            result = crawl_model(tv, name, task)
            if progress:
                progress(f"{task:15s} {name:40s} {len(result.shapes):4d} convs {result.error}")
            results.append(result)
    out = expand(results)
    out.source.update({
        "source": "torchvision", "torchvision": tv.__version__, "torch": torch.__version__,
        "device": "meta", "batches": {k: list(v) for k, v in BATCHES.items()}, "roi_batches": list(ROI_BATCHES),
        "max_elements": MAX_ELEMENTS, "max_batch": MAX_BATCH, "video_frames": VIDEO_FRAMES,
        "segmentation_size": SEGMENTATION_SIZE,
        "detection_image": list(DETECTION_IMAGE), "directions": "every entry is a forward problem; "
        "`tiledispatch bench --problems` expands it to each direction requested",
    })
    return out


def write(out: CrawlOutput, path: Path) -> None:
    """``{"source": {...}, "problems": [problem dicts], "meta": [per-problem group/models]}``.

    ``problems`` is what ``native.bench.load_problems`` reads; ``meta[i]`` describes ``problems[i]``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"source": out.source, "problems": out.problems, "meta": out.meta}
    path.write_text(json.dumps(document, separators=(",", ":"), sort_keys=True) + "\n")


def load(path: Path | str) -> tuple[list[ConvProblem], list[dict[str, Any]], dict[str, Any]]:
    """(forward problems, per-problem meta, source) from a file written by :func:`write`."""
    document = json.loads(Path(path).read_text())
    problems = [ConvProblem.from_dict(p) for p in document["problems"]]
    return problems, document["meta"], document["source"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("models/data/problems/torchvision.json"))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--models", nargs="*", help="only these model names (for testing)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    out = crawl(args.tasks, args.models, None if args.quiet else lambda line: print(line, file=sys.stderr))
    write(out, args.out)
    failed = [m for m in out.source["models"] if "error" in m]
    print(f"{len(out.problems)} problems from {len(out.source['models']) - len(failed)} models "
          f"({len(failed)} failed, {out.source['dropped_too_large']} dropped as too large) -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
