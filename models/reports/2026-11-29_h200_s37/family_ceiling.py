"""The most a model that ranks only some kernel families can reach on measured data.

For each problem of a benchmark folder (bf16 rows, ``default``'s kernels), the best time among the kernels that
session 6's fp16 models (fwd/2, bwd_data/2, bwd_weight/3) can rank, over the best time of all kernels. They rank the
families they were trained on, and ``models/predictor.py`` leaves forward / backward-data split-K and channel-padded
kernels unranked for them (``TrainedPredictor.rankable``).

Run from the repository root: python models/reports/2026-11-29_h200_s37/family_ceiling.py
"""

from __future__ import annotations

import numpy as np

from tiledispatch.models.dataset import problem_rows, read_rows
from tiledispatch.models.predictor import load
from tiledispatch.native.rules import rule_set_names

SESSION6_FP16 = {"fwd": "lgbm-sm_90-fp16-fwd/2", "bwd_data": "lgbm-sm_90-fp16-bwd_data/2",
                 "bwd_weight": "lgbm-sm_90-fp16-bwd_weight/3"}
DATA = {
    "dev s33": ["bench/results/2026-11-29_h200_s33/raw/dev_suite_call2"],
    "synthetic s34": ["bench/results/2026-11-29_h200_s34/raw/synthetic_calls1-3"],
}


def main() -> None:
    names = rule_set_names("default")
    for label, folders in DATA.items():
        frame, _ = read_rows(folders)
        for direction, artifact in SESSION6_FP16.items():
            model = load(f"models/artifacts/{artifact}")
            ratios = []
            for pr in problem_rows(frame, direction=direction, dtype="bf16", kernels=names):
                times = np.where(pr.timed, pr.time_us, np.inf)
                ok = model.rankable(pr.configs)  # the predictor's own rule: seen families, no split-K data / padded
                if np.isfinite(times).any():
                    ratios.append(times.min() / times[ok].min())
            r = np.array(ratios)
            print(f"{label:14s} {direction:10s} problems {r.size:4d}  best rankable / best: mean {r.mean():.3f} "
                  f"median {np.median(r):.3f} P10 {np.percentile(r, 10):.3f}  below 0.9: {(r < 0.9).sum()}")


if __name__ == "__main__":
    main()
