"""Version awareness: the committed fixture was trained (on the committed H200 data) with feature
schema 0, a smaller, differently ordered feature set than the engine makes now."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.models.conftest import FIXTURE
from tiledispatch.models.features import FEATURE_NAMES, FEATURE_SETS
from tiledispatch.models.predictor import ModelLoadError, load
from tiledispatch.native.problem import Direction, DType

lgb = pytest.importorskip("lightgbm")


def test_old_schema_fixture_loads_and_predicts_with_the_grown_engine(fwd_problems):
    model = load(FIXTURE)
    assert model.schema_version == 0
    assert list(model.feature_names) == list(FEATURE_SETS[0])
    assert len(model.feature_names) < len(FEATURE_NAMES)
    booster = lgb.Booster(model_file=str(FIXTURE / "model.txt"))
    for pr in fwd_problems[:20]:
        predicted = model.predict_us(pr.problem, pr.configs)
        assert predicted.shape == (len(pr.configs),) and (predicted > 0).all()
        # the index map feeds the model exactly the columns it was trained on, in its order
        engine_rows = model.engine.build(pr.problem, pr.configs)
        own = np.column_stack([engine_rows[:, model.engine.index[n]] for n in FEATURE_SETS[0]])
        np.testing.assert_allclose(np.log(predicted), booster.predict(own, num_threads=1), rtol=0, atol=1e-12)


def test_covers_by_arch_or_device_dtype_and_direction():
    model = load(FIXTURE)
    assert model.covers("sm_90", DType.BF16, Direction.FORWARD)
    assert model.covers("h200", "bf16", "fwd")
    assert not model.covers("sm_80", DType.BF16, Direction.FORWARD)
    assert not model.covers("sm_90", DType.FP16, Direction.FORWARD)
    assert not model.covers("sm_90", DType.BF16, Direction.BACKWARD_DATA)


def _copy(tmp_path):
    folder = tmp_path / "m" / "1"
    shutil.copytree(FIXTURE, folder)
    return folder


def test_a_feature_the_engine_no_longer_makes_fails_clearly(tmp_path):
    folder = _copy(tmp_path)
    spec = json.loads((folder / "feature_spec.json").read_text())
    spec["feature_names"][3] = "p_retired_feature"
    (folder / "feature_spec.json").write_text(json.dumps(spec))
    with pytest.raises(ModelLoadError, match=r"needs feature\(s\) \['p_retired_feature'\]"):
        load(folder)


def test_newer_schema_and_mismatched_model_text_are_refused(tmp_path):
    folder = _copy(tmp_path)
    spec = json.loads((folder / "feature_spec.json").read_text())
    (folder / "feature_spec.json").write_text(json.dumps({**spec, "schema_version": 99}))
    with pytest.raises(ModelLoadError, match="newer than this engine"):
        load(folder)
    names = list(reversed(spec["feature_names"]))
    (folder / "feature_spec.json").write_text(json.dumps({**spec, "feature_names": names}))
    with pytest.raises(ModelLoadError, match="feature names differ"):
        load(folder)


def test_server_model_store_loads_and_chooses_by_version(tmp_path):
    predictors = pytest.importorskip("tiledispatch.server.predictors")
    from tiledispatch.native.arch import get_arch

    root = tmp_path / "models"
    for version in ("1", "10", "2"):
        folder = root / "lgbm-test" / version
        shutil.copytree(FIXTURE, folder)
        spec = json.loads((folder / "feature_spec.json").read_text())
        (folder / "feature_spec.json").write_text(json.dumps({**spec, "name": "lgbm-test", "version": version}))
    store = predictors.ModelStore.load(root, get_arch("h200"))
    assert store.skipped == []
    chosen = store.choose(DType.BF16, Direction.FORWARD)
    assert (chosen.name, chosen.version) == ("lgbm-test", "10")
    assert store.choose(DType.BF16, Direction.BACKWARD_WEIGHT) is None
