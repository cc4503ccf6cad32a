"""Artifact format 2: a LightGBM regressor (µs) and a LambdaRank ranker (order) in one folder,
trained on the committed H200 measurements, reproducible byte for byte, loaded, and served with the
ranker's order."""

from __future__ import annotations

import json
import shlex
import shutil

import numpy as np
import pytest

from tests.models.conftest import FIXTURE, RAW
from tiledispatch.models import metrics, predictor, train
from tiledispatch.models.dataset import ProblemRows
from tiledispatch.models.forest import Forest
from tiledispatch.models.predictor import RANKER_FILE, REGRESSOR_FILE, ModelLoadError, load, load_all, rank

lgb = pytest.importorskip("lightgbm")

#: Small trees and three folds: the whole training (CV of both models and both fits) takes ~2 s.
FAST = ["--max-trees", "15", "--num-leaves", "15", "--max-depth", "5", "--folds", "3"]


def _train(out, *extra: str):
    args = ["--data", str(RAW / "synthetic"), "--direction", "bwd_data", "--dtype", "bf16", "--out", str(out),
            "--version", "1", *FAST, *extra]
    assert train.main(args) == 0
    return out / "lgbm-sm_90-bf16-bwd_data" / "1"


@pytest.fixture(scope="module")
def ranker_artifact(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("ranker"), "--objective", "lambdarank")


@pytest.fixture(scope="module")
def bwd_data_problems(frame):
    from tiledispatch.models.dataset import problem_rows

    return problem_rows(frame, direction="bwd_data", dtype="bf16")


def _copy(folder, tmp_path):
    target = tmp_path / "models" / "lgbm-test" / "1"
    shutil.copytree(folder, target)
    return target


# ---- training ----------------------------------------------------------------------------------

def test_the_artifact_holds_both_models_and_says_so(ranker_artifact):
    assert {p.name for p in ranker_artifact.iterdir()} == {REGRESSOR_FILE, RANKER_FILE, "feature_spec.json",
                                                          "train_manifest.json"}
    assert not list(ranker_artifact.parents[1].glob(".staging-*"))  # published by the staging swap
    spec = json.loads((ranker_artifact / "feature_spec.json").read_text())
    assert (spec["kind"], spec["artifact_format"], spec["target"]) == ("trained", 2, "log_us")
    assert spec["ranker"]["file"] == RANKER_FILE and spec["ranker"]["grades"] == 100
    assert spec["ranker"]["num_trees"] == lgb.Booster(model_file=str(ranker_artifact / RANKER_FILE)).num_trees()
    manifest = json.loads((ranker_artifact / "train_manifest.json").read_text())
    assert manifest["artifact_format"] == 2 and manifest["settings"]["objective"] == "lambdarank"
    assert manifest["ranker"]["cv"]["early_stopping_metric"] == "ndcg@1"
    assert 0 < manifest["ranker"]["cv"]["overall"]["mean"] <= 1 and 0 < manifest["cv"]["overall"]["mean"] <= 1
    assert "--objective lambdarank" in manifest["command"]


def test_the_manifest_command_rebuilds_both_models_byte_for_byte(ranker_artifact, tmp_path):
    command = shlex.split(json.loads((ranker_artifact / "train_manifest.json").read_text())["command"])
    args = command[command.index("tiledispatch.models.train") + 1:]
    args[args.index("--out") + 1] = str(tmp_path)
    assert train.main(args) == 0
    rebuilt = tmp_path / ranker_artifact.parent.name / ranker_artifact.name
    for name in (REGRESSOR_FILE, RANKER_FILE):
        assert (rebuilt / name).read_bytes() == (ranker_artifact / name).read_bytes(), name


def test_the_regressor_of_a_ranker_artifact_is_the_plain_regressor(ranker_artifact, tmp_path):
    """--objective lambdarank adds a model; it changes nothing about the regressor."""
    plain = _train(tmp_path)
    assert (plain / REGRESSOR_FILE).read_bytes() == (ranker_artifact / REGRESSOR_FILE).read_bytes()
    assert not (plain / RANKER_FILE).exists()
    assert json.loads((plain / "feature_spec.json").read_text())["artifact_format"] == 1


def test_the_ranker_has_its_own_tree_cap_and_the_regressor_is_untouched(ranker_artifact, tmp_path):
    """--ranker-max-trees lets the ranker's folds run past --max-trees (15 in FAST: its folds stop at 14, 3, 7 under
    that cap and run to 30, 17, 31 under 60); the regressor is the one trained without the flag, byte for byte."""
    capped = json.loads((ranker_artifact / "train_manifest.json").read_text())["ranker"]
    wider = _train(tmp_path, "--objective", "lambdarank", "--ranker-max-trees", "60")
    manifest = json.loads((wider / "train_manifest.json").read_text())
    assert max(capped["cv"]["best_iterations"]) <= 15 < max(manifest["ranker"]["cv"]["best_iterations"]) <= 60
    assert manifest["ranker"]["trees"] > capped["trees"]
    assert manifest["settings"]["ranker_max_trees"] == 60 and "--ranker-max-trees 60" in manifest["command"]
    assert (wider / REGRESSOR_FILE).read_bytes() == (ranker_artifact / REGRESSOR_FILE).read_bytes()
    assert max(manifest["cv"]["best_iterations"]) <= 15


def test_a_negative_ranker_tree_cap_is_refused():
    with pytest.raises(ValueError, match="ranker_max_trees: must be >= 0"):
        train.TrainSettings(ranker_max_trees=-1)


def test_relevance_grades_are_efficiency_in_percent(fwd_problems):
    rows = ProblemRows(problem=fwd_problems[0].problem, configs=[], time_us=np.array([10.0, 11.0, 20.0, 1000.0, 9.0]),
                       timed=np.array([True, True, True, True, False]))
    m = train.Matrix(x=np.zeros((5, 1)), y=np.log(rows.time_us), offsets=np.array([0, 5]), problems=[rows])
    # 10/11 = 0.909 -> 91; 10/1000 -> 1; an untimed estimate below the oracle is clipped to the best grade.
    np.testing.assert_array_equal(train.relevance(m, 100), [100, 91, 50, 1, 100])
    gain = train.TrainSettings().label_gain()
    assert len(gain) == 101 and gain[0] == 0 and gain[100] == 1 and gain[50] == pytest.approx(0.25)


@pytest.mark.parametrize("field, value, rule", [("objective", "pairwise", "is not one of"),
                                                ("rank_grades", 0, "must be >= 1"),
                                                ("rank_gain_power", 0.0, "must be > 0"),
                                                ("rank_eval_at", 0, "must be >= 1")])
def test_settings_refuse_what_cannot_train(field, value, rule):
    with pytest.raises(ValueError, match=f"^{field}: .*{rule}"):
        train.TrainSettings(**{field: value})


def test_every_objective_writes_a_format_the_loader_knows():
    formats = {train.TrainSettings(objective=o).artifact_format for o in train.OBJECTIVES}
    assert formats == set(predictor.ARTIFACT_FORMATS)
    with pytest.raises(SystemExit):
        train.main(["--data", str(RAW / "synthetic"), "--direction", "fwd", "--objective", "pairwise"])


# ---- loading -----------------------------------------------------------------------------------

def test_both_kinds_load(ranker_artifact):
    old = load(FIXTURE)  # format 1 (no artifact_format in its spec): the regressor orders
    assert (old.artifact_format, old.ranker, old.ranked_by, old.kind) == (1, None, "predicted_us", "trained")
    new = load(ranker_artifact)
    assert (new.artifact_format, new.ranked_by, new.kind) == (2, "ranker", "trained")
    assert "LambdaRank ranker" in new.description
    booster = lgb.Booster(model_file=str(ranker_artifact / RANKER_FILE))
    assert new.ranker.num_trees == booster.num_trees()


def test_the_numpy_forest_serves_the_ranker_exactly(ranker_artifact, bwd_data_problems):
    model = load(ranker_artifact)
    booster = lgb.Booster(model_file=str(ranker_artifact / RANKER_FILE))
    x = np.concatenate([model.features(pr.problem, pr.configs) for pr in bwd_data_problems[:40]])
    np.testing.assert_allclose(model.ranker.predict(x), booster.predict(x, num_threads=1), rtol=0, atol=1e-10)
    assert Forest.from_dump(booster.dump_model()).num_trees == model.ranker.num_trees


def test_a_missing_ranker_fails_naming_the_file(ranker_artifact, tmp_path):
    folder = _copy(ranker_artifact, tmp_path)
    (folder / RANKER_FILE).unlink()
    with pytest.raises(ModelLoadError, match=rf"{RANKER_FILE}: missing"):
        load(folder)
    loaded, failed = load_all(tmp_path / "models")  # reported, not raised: other models keep loading
    assert loaded == [] and "ranker.txt: missing" in failed[str(folder)]


def test_load_newest_takes_one_version_a_model_and_falls_back_past_a_damaged_one(ranker_artifact, tmp_path):
    from tiledispatch.models.predictor import load_newest

    older = _copy(ranker_artifact, tmp_path)
    newer = older.parent / "10"  # "10" is newer than "9" and "1" (numbers compare as numbers)
    shutil.copytree(ranker_artifact, newer)
    shutil.copytree(ranker_artifact, older.parent / "9")
    loaded, failed = load_newest(tmp_path / "models")
    assert [m.folder.name for m in loaded] == ["10"] and failed == {}
    (newer / RANKER_FILE).unlink()
    loaded, failed = load_newest(tmp_path / "models")
    assert [m.folder.name for m in loaded] == ["9"] and "ranker.txt: missing" in failed[str(newer)]


def test_load_newest_for_a_dtype_and_direction_reads_no_other_model(ranker_artifact, tmp_path):
    from tiledispatch.models.predictor import load_newest
    from tiledispatch.native.problem import Direction, DType

    own = _copy(ranker_artifact, tmp_path)
    spec = json.loads((own / "feature_spec.json").read_text())
    other = tmp_path / "models" / "lgbm-other" / "1"
    shutil.copytree(ranker_artifact, other)
    other_direction = next(d for d in Direction if d.value != spec["direction"])
    (other / "feature_spec.json").write_text(json.dumps({**spec, "direction": other_direction.value}))
    (other / RANKER_FILE).write_text("not a model\n")  # read, it would be reported as a failure
    dtype, direction = DType.parse(spec["dtype"]), Direction.parse(spec["direction"])
    loaded, failed = load_newest(tmp_path / "models", dtype, direction)
    assert [m.folder for m in loaded] == [own] and failed == {}
    loaded, failed = load_newest(tmp_path / "models", dtype, other_direction)
    assert loaded == [] and list(failed) == [str(other)]
    loaded, failed = load_newest(tmp_path / "models", DType.FP32 if dtype is not DType.FP32 else DType.BF16)
    assert loaded == [] and failed == {}


@pytest.mark.parametrize("damage, message", [
    (lambda text: "not a model\n", r"ranker\.txt: no feature_names line"),
    # a truncated copy: LightGBM itself would abort the process (no exception to catch)
    (lambda text: text[: len(text) // 2], r"ranker\.txt: damaged or truncated"),
    (lambda text: text.replace("\nend of trees\n", "\n"), r"ranker\.txt: damaged or truncated"),
    (lambda text: text.replace("feature_names=p_", "feature_names=q_", 1), r"ranker\.txt: its feature names differ"),
])
def test_a_corrupt_ranker_fails_naming_the_file(ranker_artifact, tmp_path, damage, message):
    folder = _copy(ranker_artifact, tmp_path)
    (folder / RANKER_FILE).write_text(damage((folder / RANKER_FILE).read_text()))
    with pytest.raises(ModelLoadError, match=message):
        load(folder)


def test_swapped_model_files_and_unknown_formats_are_refused(ranker_artifact, tmp_path):
    folder = _copy(ranker_artifact, tmp_path)
    shutil.copy(folder / REGRESSOR_FILE, folder / RANKER_FILE)
    with pytest.raises(ModelLoadError, match=r"ranker\.txt: objective 'regression', expected a ranking objective"):
        load(folder)
    shutil.copy(ranker_artifact / RANKER_FILE, folder / REGRESSOR_FILE)
    with pytest.raises(ModelLoadError, match=r"model\.txt: objective 'lambdarank', expected a regression"):
        load(folder)
    shutil.copy(ranker_artifact / REGRESSOR_FILE, folder / REGRESSOR_FILE)
    shutil.copy(ranker_artifact / RANKER_FILE, folder / RANKER_FILE)
    spec = json.loads((folder / "feature_spec.json").read_text())
    for bad in (3, "2", True):
        (folder / "feature_spec.json").write_text(json.dumps({**spec, "artifact_format": bad}))
        with pytest.raises(ModelLoadError, match=r"feature_spec\.json: artifact_format .* is not one of \[1, 2\]"):
            load(folder)


# ---- ranking -----------------------------------------------------------------------------------

def test_the_ranker_orders_and_the_regressor_predicts(ranker_artifact, bwd_data_problems):
    model = load(ranker_artifact)
    booster = lgb.Booster(model_file=str(ranker_artifact / RANKER_FILE))
    disagree = 0
    for pr in bwd_data_problems:
        ranking = rank(model, pr.problem, pr.configs)
        assert ranking.by == "ranker"
        # the µs are the regressor's, in the configs' order
        np.testing.assert_array_equal(ranking.predicted_us, model.predict_us(pr.problem, pr.configs))
        # the order is the ranker's: descending score, ties in config order, over the kernels the model
        # was trained on (the others, absent from its training rows, are left unranked)
        score = booster.predict(model.features(pr.problem, pr.configs), num_threads=1)
        known = np.flatnonzero([c.name in model.seen_kernels for c in pr.configs])
        if not known.size:  # none known: all ranked
            known = np.arange(len(pr.configs))
        np.testing.assert_array_equal(ranking.order, known[np.argsort(-score[known], kind="stable")])
        assert sorted(ranking.order.tolist() + ranking.unranked.tolist()) == list(range(len(pr.configs)))
        disagree += int(ranking.order[0] != np.argmin(ranking.predicted_us))
    # Were the regressor's order used, the first pick would differ on these problems.
    assert disagree >= 5, disagree


def test_without_a_ranker_the_order_is_ascending_predicted_us(fwd_problems):
    from tiledispatch.models.analytic import AnalyticPredictor

    for model in (load(FIXTURE), AnalyticPredictor("sm_90")):
        for pr in fwd_problems[:10]:
            ranking = rank(model, pr.problem, pr.configs)
            predicted = model.predict_us(pr.problem, pr.configs)
            assert ranking.by == "predicted_us"
            np.testing.assert_array_equal(ranking.order, np.argsort(predicted, kind="stable"))
            np.testing.assert_array_equal(ranking.predicted_us, predicted)
    empty = load(FIXTURE).rank(fwd_problems[0].problem, [])
    assert isinstance(empty, predictor.Ranking) and empty.order.size == 0


def test_validation_scores_the_ranker_order_and_the_regressor_order(ranker_artifact, bwd_data_problems):
    from tiledispatch.models import validate
    from tiledispatch.models.analytic import AnalyticPredictor

    model = load(ranker_artifact)
    r = validate.evaluate(bwd_data_problems, model, AnalyticPredictor("sm_90"), "bwd_data", {})
    expected = [metrics.pick_index(pr.time_us, pr.timed, int(model.rank(pr.problem, pr.configs).order[0]))
                for pr in bwd_data_problems]
    by_regressor = [metrics.pick_from_scores(pr.time_us, pr.timed, model.predict_us(pr.problem, pr.configs))
                    for pr in bwd_data_problems]
    assert (r.trained, r.trained_regressor_order, r.ranked_by) == (expected, by_regressor, "ranker")
    result = validate.result_json(r)
    assert result["trained"]["ranked_by"] == "ranker"
    assert result["trained_regressor_order"]["overall"] == metrics.summarize(by_regressor)
    report = {"dtype": "bf16", "arch": "sm_90", "gpus": ["NVIDIA H200"], "date": "", "command": "",
              "directions": {"bwd_data": result}}
    text = validate.markdown(report)
    assert "| trained, ranker order |" in text and "| trained, regressor order |" in text
    assert "(order: LambdaRank ranker; µs: regressor)" in text


def test_a_truncated_regressor_of_an_old_artifact_is_refused_not_fatal(tmp_path):
    folder = _copy(FIXTURE, tmp_path)
    text = (folder / REGRESSOR_FILE).read_text()
    (folder / REGRESSOR_FILE).write_text(text[: len(text) // 3])
    with pytest.raises(ModelLoadError, match=r"model\.txt: damaged or truncated"):
        load(folder)
