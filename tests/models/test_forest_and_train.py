from __future__ import annotations

import numpy as np
import pytest

from tests.models.conftest import FIXTURE, RAW
from tiledispatch.models import train
from tiledispatch.models.dataset import data_hash
from tiledispatch.models.features import FeatureEngine
from tiledispatch.models.forest import Forest

lgb = pytest.importorskip("lightgbm")


def test_numpy_forest_matches_lightgbm(fwd_problems):
    settings = train.TrainSettings(max_trees=40, num_leaves=31, max_depth=8, folds=3)
    engine = FeatureEngine("sm_90")
    m = train.build_matrix(fwd_problems, engine)
    booster = train.fit(m, settings, engine.names, 40)
    forest = Forest.from_dump(booster.dump_model())
    np.testing.assert_allclose(forest.predict(m.x), booster.predict(m.x, num_threads=1), rtol=0, atol=1e-10)
    fixture = lgb.Booster(model_file=str(FIXTURE / "model.txt"))
    x = m.x[:, : fixture.num_feature()]
    np.testing.assert_allclose(Forest.from_dump(fixture.dump_model()).predict(x), fixture.predict(x), atol=1e-10)


def test_group_folds_keep_a_group_in_one_fold():
    groups = ["a", "b", "a", "c", "d", "b", "e"]
    folds = train.group_folds(groups, 3, seed=1)
    for g in set(groups):
        assert len({f for f, h in zip(folds, groups) if h == g}) == 1
    assert set(folds) == {0, 1, 2}
    np.testing.assert_array_equal(folds, train.group_folds(groups, 3, seed=1))


def test_training_is_bit_identical_and_writes_the_artifacts(tmp_path):
    settings = train.TrainSettings(max_trees=15, num_leaves=15, max_depth=5, folds=3)
    folders = [train.train_artifact([RAW / "synthetic"], train.Direction.BACKWARD_DATA, train.DType.BF16,
                                    tmp_path / run, settings=settings, log=lambda _: None) for run in ("a", "b")]
    texts = [(f / "model.txt").read_bytes() for f in folders]
    assert texts[0] == texts[1]
    for name in ("model.txt", "feature_spec.json", "train_manifest.json"):
        assert (folders[0] / name).exists()
    import json

    manifest = json.loads((folders[0] / "train_manifest.json").read_text())
    assert manifest["gpus"] == ["NVIDIA H200"] and manifest["problems"] > 50
    assert 0 < manifest["cv"]["overall"]["mean"] <= 1
    # The families of the training rows are recorded (the predictor ranks no other with the model).
    assert manifest["families"] == ["direct", "gemm1x1", "gmerge", "igemm"]
    # and so are their kernels, by name (the predictor ranks no other kernel with the model)
    import pandas as pd

    rows = pd.concat([pd.read_parquet(s) for s in sorted((RAW / "synthetic").glob("rows-*.parquet"))])
    rows = rows[(rows.direction == "bwd_data") & (rows.dtype == "bf16") & rows.kernel.str.startswith("gconv_")]
    assert manifest["kernels"] == sorted(set(manifest["kernels"])) and len(manifest["kernels"]) > 10
    assert set(manifest["kernels"]) <= set(rows.kernel)
    # Default: the engine's newest schema (5), pinned in the recorded command.
    from tiledispatch.models.features import FEATURE_SETS, SCHEMA_VERSION
    from tiledispatch.models.predictor import load

    spec = json.loads((folders[0] / "feature_spec.json").read_text())
    assert spec["schema_version"] == SCHEMA_VERSION == 5 and spec["feature_names"] == list(FEATURE_SETS[5])
    assert manifest["command"].split("--feature-set ")[1].split()[0] == "5"
    assert load(folders[0]).seen_families == {"direct", "gemm1x1", "gmerge", "igemm"}
    assert load(folders[0]).seen_kernels == set(manifest["kernels"])


def test_data_hash_ignores_row_order(frame):
    from tiledispatch.models.dataset import problem_rows

    a = problem_rows(frame, direction="fwd", dtype="bf16")
    b = problem_rows(frame.sample(frac=1.0, random_state=0), direction="fwd", dtype="bf16")
    assert data_hash(a) == data_hash(b)
    assert data_hash(a) != data_hash(a[1:])
