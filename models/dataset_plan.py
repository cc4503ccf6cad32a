"""The data-collection plan: which problems are measured for training and which for validation.

Sources (DESIGN §6): the seeded synthetic sampler (``native.sampler``, distribution in
``models/data/README.md``) and the torchvision crawl (``models/data/problems/torchvision.json``).

Split, by problem *group*, so that no validation problem (nor the same convolution at another
batch size or in another direction) is ever trained on:

* torchvision: whole architecture families are held out. A model's family is its name without
  size suffixes (``resnet50`` → ``resnet``, ``efficientnet_v2_s`` → ``efficientnet_v2``,
  ``regnet_y_8gf`` → ``regnet``). Per task, families are ranked by ``sha256(seed|family)`` and the
  first ``ceil(holdout × families)`` (at least one) are held out. A problem that occurs in any
  held-out model is a validation problem;
* synthetic: the group is the convolution without batch, direction and dtype (its *shape*); a
  group is held out when ``sha256(seed|group)`` falls below ``holdout``;
* then every training problem whose shape also occurs among the validation problems is dropped
  (a held-out shape is unseen at every batch).

Order: the most valuable problems first, because collection measures a prefix. Problems are put
into strata ``(class, batch bucket, source)`` (class = ``2d_dense`` … ``3d_depthwise_multiplier``,
batch buckets 1 | 2–8 | 9–64 | 65–256) and the list takes one problem from each stratum in turn
(round-robin). Inside a stratum, problems are interleaved over their groups (one model or shape
after another, in seeded-hash order), so a short prefix already spans every class, both
dimensionalities, the batch range and many architectures.

Output, per split and direction: ``models/data/problems/{train,validation}_{dir}.json`` (and
``…_{dir}_fp16.json`` for the fp16 subset), each ``{"source": …, "problems": [ConvProblem dicts],
"meta": [{"group", "source", "class", …}]}``: the format ``tiledispatch bench --problems`` reads
(it expands entries to the ``--direction`` given: pass the file's direction).

CLI: ``python -m tiledispatch.models.dataset_plan`` (defaults reproduce the committed files).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.sampler import sample_problems

DEFAULT_DIR = Path("models/data/problems")
BATCH_BUCKETS = ((1, 1), (2, 8), (9, 64), (65, 256))
#: Largest forward problem planned (GFLOP): keeps one kernel's timing short on the GPU.
MAX_GFLOP = 500.0


@dataclass(frozen=True)
class PlanSettings:
    seed: int = 2026
    synthetic: int = 6000            # synthetic shapes drawn (seeded, stratified)
    synthetic_seed: int = 11
    holdout_torchvision: float = 0.2  # fraction of architecture families held out per task
    holdout_synthetic: float = 0.15   # fraction of synthetic shape groups held out
    max_train: int = 3000             # problems written per training list (a prefix is measured)
    max_validation: int = 1000
    max_train_fp16: int = 800
    max_validation_fp16: int = 300
    max_gflop: float = MAX_GFLOP


@dataclass(frozen=True)
class Item:
    """One planned problem (forward, bf16; directions and dtype are applied when written)."""

    problem: ConvProblem
    source: str   # "synthetic" | "torchvision"
    group: str    # split unit: "torchvision:<model>" or "synthetic:<shape>"
    models: tuple[str, ...] = ()


def unit_hash(seed: int, text: str) -> float:
    """A seeded, platform-independent hash of ``text`` in [0, 1)."""
    digest = hashlib.sha256(f"{seed}|{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def model_family(name: str) -> str:
    """``resnet50`` → ``resnet``; ``efficientnet_v2_s`` → ``efficientnet_v2``; ``deeplabv3_x`` → ``deeplabv3``."""
    parts = name.split("_")
    head = re.sub(r"(?<!v)\d+$", "", parts[0]) or parts[0]
    if len(parts) > 1 and re.fullmatch(r"v\d", parts[1]):
        head += "_" + parts[1]
    return head


def shape_of(problem: ConvProblem) -> str:
    """The convolution without direction, dtype and batch: ``2d|g1|c64|k64|in56x56|…``."""
    return "|".join(part for part in problem.shape_key.split("|") if not part.startswith("n"))


def batch_bucket(batch: int) -> int:
    return next(i for i, (low, high) in enumerate(BATCH_BUCKETS) if low <= batch <= high)


# ---- sources -----------------------------------------------------------------------------------

def torchvision_items(path: Path) -> tuple[list[Item], dict[str, str]]:
    """Items from the crawl file, and each model's task."""
    document = json.loads(Path(path).read_text())
    tasks = {m["model"]: m["task"] for m in document["source"]["models"]}
    items = [Item(ConvProblem.from_dict(p), "torchvision", m["group"], tuple(m["models"]))
             for p, m in zip(document["problems"], document["meta"])]
    return items, tasks


def synthetic_items(count: int, seed: int) -> list[Item]:
    return [Item(p, "synthetic", f"synthetic:{shape_of(p)}") for p in sample_problems(count, seed=seed)]


# ---- split -------------------------------------------------------------------------------------

def held_out_families(tasks: dict[str, str], fraction: float, seed: int) -> set[str]:
    """Per task, the ``ceil(fraction × families)`` families (at least one) first in hash order."""
    by_task: dict[str, set[str]] = defaultdict(set)
    for model, task in tasks.items():
        by_task[task].add(model_family(model))
    out: set[str] = set()
    for families in by_task.values():
        ranked = sorted(families, key=lambda f: (unit_hash(seed, f), f))
        out.update(ranked[:max(1, math.ceil(fraction * len(ranked)))] if fraction > 0 else [])
    return out


def split(items: Sequence[Item], held_families: set[str], synthetic_fraction: float,
          seed: int) -> tuple[list[Item], list[Item]]:
    """(training, validation): see the module docstring."""
    validation, rest = [], []
    for item in items:
        if item.source == "torchvision":
            held = any(model_family(m) in held_families for m in item.models)
        else:
            held = unit_hash(seed, item.group) < synthetic_fraction
        (validation if held else rest).append(item)
    unseen = {shape_of(i.problem) for i in validation}
    training = [i for i in rest if shape_of(i.problem) not in unseen]
    return training, validation


# ---- order -------------------------------------------------------------------------------------

def _interleave(queues: Sequence[Sequence[Item]]) -> list[Item]:
    out: list[Item] = []
    for rank in range(max((len(q) for q in queues), default=0)):
        out.extend(q[rank] for q in queues if rank < len(q))
    return out


def stratified_order(items: Iterable[Item], seed: int) -> list[Item]:
    """Round-robin over strata (class, batch bucket, source); inside each, round-robin over groups."""
    strata: dict[tuple, dict[str, list[Item]]] = defaultdict(lambda: defaultdict(list))
    for item in items:
        p = item.problem
        strata[(p.class_label, batch_bucket(p.batch), item.source)][item.group].append(item)
    queues = []
    for key in sorted(strata, key=lambda k: (unit_hash(seed, repr(k)), k)):
        groups = strata[key]
        ordered_groups = sorted(groups, key=lambda g: (unit_hash(seed, g), g))
        queues.append(_interleave([sorted(groups[g], key=lambda i: (unit_hash(seed, i.problem.key), i.problem.key))
                                   for g in ordered_groups]))
    return _interleave(queues)


# ---- plan and files ----------------------------------------------------------------------------

@dataclass
class Plan:
    training: list[Item]
    validation: list[Item]
    held_families: list[str]
    settings: PlanSettings
    dropped_too_large: int


def make_plan(torchvision_path: Path, settings: PlanSettings = PlanSettings()) -> Plan:
    tv_items, tasks = torchvision_items(torchvision_path)
    items = tv_items + synthetic_items(settings.synthetic, settings.synthetic_seed)
    small = [i for i in items if i.problem.flops <= settings.max_gflop * 1e9]
    seen: dict[str, Item] = {}
    for item in small:  # a synthetic draw identical to a crawled problem counts once (as crawled)
        seen.setdefault(item.problem.key, item)
    held = held_out_families(tasks, settings.holdout_torchvision, settings.seed)
    training, validation = split(list(seen.values()), held, settings.holdout_synthetic, settings.seed)
    return Plan(training=stratified_order(training, settings.seed),
                validation=stratified_order(validation, settings.seed ^ 1),
                held_families=sorted(held), settings=settings, dropped_too_large=len(items) - len(small))


def problem_document(items: Sequence[Item], direction: Direction, dtype: DType, source: dict[str, Any]) -> dict:
    problems = [dataclasses.replace(i.problem, direction=direction, dtype=dtype) for i in items]
    return {
        "source": source,
        "problems": [p.to_dict() for p in problems],
        "meta": [{"group": i.group, "source": i.source, "class": i.problem.class_label,
                  **({"models": list(i.models)} if i.models else {})} for i in items],
    }


def write_plan(plan: Plan, out_dir: Path, log: Callable[[str], None] = print) -> list[Path]:
    s = plan.settings
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    common = {"plan": "tiledispatch.models.dataset_plan", "settings": dataclasses.asdict(s),
              "held_out_families": plan.held_families,
              "order": "stratified round-robin over (class, batch bucket, source), then groups: measure a prefix"}
    for split_name, items, limits in (("train", plan.training, (s.max_train, s.max_train_fp16)),
                                      ("validation", plan.validation, (s.max_validation, s.max_validation_fp16))):
        for dtype, limit in zip((DType.BF16, DType.FP16), limits):
            for direction in Direction:
                suffix = "" if dtype is DType.BF16 else "_fp16"
                path = out_dir / f"{split_name}_{direction.value}{suffix}.json"
                source = {**common, "split": split_name, "direction": direction.value, "dtype": dtype.value,
                          "available": len(items), "written": min(limit, len(items)),
                          "bench": f"tiledispatch bench --problems {path} --direction {direction.value} "
                                   f"--dtype {dtype.value} --rule-set default"
                                   + (" --max-kernels 48" if split_name == "train" else "")}
                document = problem_document(items[:limit], direction, dtype, source)
                path.write_text(json.dumps(document, separators=(",", ":"), sort_keys=True) + "\n")
                written.append(path)
    log(f"plan: {len(plan.training)} training and {len(plan.validation)} validation problems per direction; "
        f"held-out families: {', '.join(plan.held_families)}; {plan.dropped_too_large} over {s.max_gflop:g} GFLOP")
    return written


def summary(items: Sequence[Item], prefix: int) -> dict[str, Any]:
    """Counts by class, source, dimensionality and batch bucket within the first ``prefix`` items."""
    head = items[:prefix]
    out: dict[str, dict[str, int]] = {"class": {}, "source": {}, "batch_bucket": {}}
    for item in head:
        for key, value in (("class", item.problem.class_label), ("source", item.source),
                           ("batch_bucket", "{}-{}".format(*BATCH_BUCKETS[batch_bucket(item.problem.batch)]))):
            out[key][value] = out[key].get(value, 0) + 1
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the training/validation problem lists.")
    parser.add_argument("--torchvision", type=Path, default=DEFAULT_DIR / "torchvision.json")
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--summary-prefix", type=int, nargs="*", default=[300, 1200])
    for field in dataclasses.fields(PlanSettings):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default), default=field.default)
    args = parser.parse_args(argv)
    settings = PlanSettings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(PlanSettings)})
    plan = make_plan(args.torchvision, settings)
    write_plan(plan, args.out)
    for name, items in (("train", plan.training), ("validation", plan.validation)):
        for prefix in args.summary_prefix:
            print(f"{name} first {prefix}: {json.dumps(summary(items, prefix))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
