"""models.compare: several model versions scored side by side on the same validation problems."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tiledispatch.models import metrics
from tiledispatch.models.compare import compare, main, paired

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "models" / "data" / "measured" / "h200_s3" / "validation_fwd"
FWD = ROOT / "models" / "artifacts" / "lgbm-sm_90-bf16-fwd"

pytest.importorskip("pandas")


def _picks(efficiencies):
    return [metrics.Pick(e, e == 1.0, True) for e in efficiencies]


def test_paired_bootstrap_is_deterministic_and_brackets_the_gain():
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 1.0, 60)
    b = np.minimum(1.0, a + rng.normal(0.05, 0.05, 60))
    first, second = paired(_picks(a), _picks(b)), paired(_picks(a), _picks(b))
    assert first == second
    assert first["ci95"][0] < first["gain_mean"] < first["ci95"][1]
    assert first["gain_mean"] == pytest.approx(float(np.mean(b - a)))
    assert first["wins"] + first["losses"] + first["ties"] == 60
    same = paired(_picks(a), _picks(a))
    assert same["gain_mean"] == 0 and same["ci95"] == [0.0, 0.0] and same["ties"] == 60
    with pytest.raises(ValueError):
        paired(_picks(a), _picks(a[:10]))


def test_compare_scores_both_orders_of_a_ranker_artifact_like_validate(tmp_path):
    from tiledispatch.models.analytic import AnalyticPredictor
    from tiledispatch.models.dataset import problem_rows, read_rows
    from tiledispatch.models.predictor import load
    from tiledispatch.models.validate import evaluate
    from tiledispatch.native.problem import Direction

    result = compare([DATA], [FWD / "1", FWD / "3"], Direction.FORWARD)
    names = list(result["selectors"])
    assert names == ["lgbm-sm_90-bf16-fwd/1", "lgbm-sm_90-bf16-fwd/3 ranker order",
                     "lgbm-sm_90-bf16-fwd/3 regressor order"]
    assert result["baseline"] == names[0] and set(result["paired_vs_baseline"]) == set(names[1:])
    assert result["problems"] == 40 == len(result["problem_keys"])
    frame, _ = read_rows([DATA])
    served = evaluate(problem_rows(frame, direction="fwd", dtype="bf16"), load(FWD / "3"),
                      AnalyticPredictor("sm_90"), "fwd", {})
    assert result["selectors"][names[1]]["overall"] == metrics.summarize(served.trained)
    assert result["selectors"][names[2]]["overall"] == metrics.summarize(served.trained_regressor_order)
    out = tmp_path / "fwd.json"
    assert main(["--data", str(DATA), "--direction", "fwd", "--models", str(FWD / "3"), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["command"].startswith("python -m tiledispatch.models.compare --data")
    with pytest.raises(ValueError, match="not a bwd_data"):
        compare([DATA], [FWD / "3"], Direction.BACKWARD_DATA)
