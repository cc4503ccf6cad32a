"""Ranking latency of a trained model on one core: ``rank`` over every applicable candidate.

``TrainedPredictor.rank`` is the whole ranking: features once, the regressor's µs for every
candidate and, for an artifact with a LambdaRank ranker (format 2), the ranker's scores that order
them (``--call predict_us`` times the regressor alone, as reports before the ranker did).

For each problem of a problem file (and the model's direction and dtype), the candidates are the
``default`` rule set's kernels that support it (what the server's catalog hands to the model);
each problem is ranked ``--repeats`` times after a warm-up and every call is timed with
``time.perf_counter``. Threads are pinned to one (``OMP_NUM_THREADS=1`` and friends are set
before numpy loads) and the process is bound to one core where the OS allows. Reports p50/p90/p99/
max in milliseconds and the candidate counts, as JSON.

    python bench/rank_latency.py MODEL_DIR --problems models/data/problems/validation_fwd.json \
        --out models/reports/rank_latency_fwd.json
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from tiledispatch.models.predictor import load
    from tiledispatch.native.bench import load_problems
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import is_supported

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rule-set", default="default")
    parser.add_argument("--call", choices=("rank", "predict_us"), default="rank",
                        help="what is timed: the full ranking (default) or the regressor's µs alone")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    model = load(args.model)
    direction, dtype = model.directions[0].value, model.dtypes[0].value
    problems = load_problems(args.problems, [direction], dtype)[: args.limit]
    problems = [p.with_dtype(dtype) for p in problems]
    pool = rule_set_configs(args.rule_set, model.arch, directions=[direction], dtypes=[dtype])
    call = getattr(model, args.call)
    times, counts = [], []
    for problem in problems:
        candidates = [c for c in pool if is_supported(problem, c)]
        counts.append(len(candidates))
        call(problem, candidates)  # warm-up
        for _ in range(args.repeats):
            start = time.perf_counter()
            call(problem, candidates)
            times.append(time.perf_counter() - start)
    ms = np.array(times) * 1e3
    ranker = getattr(model, "ranker", None)
    report = {"model": f"{model.name}/{model.version}", "call": args.call, "trees": model.forest.num_trees,
              **({"ranker_trees": ranker.num_trees} if ranker is not None and args.call == "rank" else {}),
              "features": model.feature_count, "problems": len(problems), "calls": len(ms),
              "candidates": {"mean": float(np.mean(counts)), "max": int(np.max(counts))},
              "ms": {**{q: float(np.percentile(ms, float(q[1:]))) for q in ("p50", "p90", "p99")},
                     "max": float(ms.max())},
              "cpu": platform.processor() or platform.machine(), "threads": 1,
              "method": (f"{args.call}: FeatureEngine.build + numpy forest(s) (models/forest.py), one core, "
                         "perf_counter per call; "
                         "one untimed warm-up call per problem first (it builds the candidate list's cached config "
                         "table, about 0.1 ms for 133 candidates)")}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
