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


# ---- families a model never saw are not ranked by it ------------------------------------------------

ARTIFACTS = FIXTURE.parents[4] / "models" / "artifacts"
EARLIER_FAMILIES = {"igemm", "gmerge", "gemm1x1", "direct"}


def _depthwise(direction: Direction):
    from tiledispatch.native.problem import ConvProblem

    return ConvProblem(direction, "bf16", 16, 96, 96, 96, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))


def _candidates(problem):
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import is_supported

    return [c for c in rule_set_configs("default", "sm_90", directions=[problem.direction], dtypes=["bf16"],
                                        ndims=[problem.ndim]) if is_supported(problem, c)]


@pytest.mark.parametrize("folder", [FIXTURE, ARTIFACTS / "lgbm-sm_90-bf16-fwd" / "5",
                                    ARTIFACTS / "lgbm-sm_90-bf16-bwd_data" / "5",
                                    ARTIFACTS / "lgbm-sm_90-bf16-bwd_weight" / "4"],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_model_without_k_dwroll_never_ranks_dwroll_candidates(folder):
    from tiledispatch.models.predictor import rank

    model = load(folder)
    assert "k_dwroll" not in model.feature_names and "families" not in model.manifest
    assert model.seen_families == EARLIER_FAMILIES  # the one-hots it has: exactly its training rows' families
    problem = _depthwise(model.directions[0])
    configs = _candidates(problem)
    dwroll = [i for i, c in enumerate(configs) if c.family.value == "dwroll"]
    # dwroll, gwalk; and channel-padded kernels (newer than these artifacts, which record no kernels)
    unseen = [i for i, c in enumerate(configs) if c.family.value not in EARLIER_FAMILIES or c.pad_channels]
    assert dwroll and set(dwroll) <= set(unseen) and len(unseen) < len(configs)
    ranking = rank(model, problem, configs)
    assert not {configs[i].family.value for i in ranking.order} - EARLIER_FAMILIES
    assert ranking.unranked.tolist() == unseen
    assert sorted(ranking.order.tolist() + unseen) == list(range(len(configs)))
    assert ranking.predicted_us.shape == (len(configs),) and np.isfinite(ranking.predicted_us).all()
    # The others rank as they would without the unseen families' candidates.
    others = [c for c in configs if c.family.value in EARLIER_FAMILIES and not c.pad_channels]
    alone = rank(model, problem, others)
    assert [configs[i].name for i in ranking.order] == [others[i].name for i in alone.order]
    assert alone.unranked.size == 0


def test_when_no_candidate_is_of_a_seen_family_all_are_ranked():
    from tiledispatch.models.predictor import rank

    model = load(ARTIFACTS / "lgbm-sm_90-bf16-fwd" / "5")
    problem = _depthwise(Direction.FORWARD)
    configs = [c for c in _candidates(problem) if c.family.value == "dwroll"]
    ranking = rank(model, problem, configs)
    assert sorted(ranking.order.tolist()) == list(range(len(configs))) and ranking.unranked.size == 0
    np.testing.assert_array_equal(ranking.order, np.argsort(-ranking.score, kind="stable"))


def test_the_manifests_record_of_training_families_decides_when_present(tmp_path):
    from tiledispatch.models.predictor import rank

    folder = _copy(tmp_path)
    problem = _depthwise(Direction.FORWARD)
    configs = _candidates(problem)
    for families in (["igemm"], sorted(EARLIER_FAMILIES | {"dwroll"})):
        manifest = json.loads((folder / "train_manifest.json").read_text())
        (folder / "train_manifest.json").write_text(json.dumps({**manifest, "families": families}))
        model = load(folder)
        assert model.seen_families == set(families)
        ranking = rank(model, problem, configs)
        assert {configs[i].family.value for i in ranking.order} == set(families) & {c.family.value for c in configs}


#: Shipped artifacts trained before the dwroll family existed (schema 1/2), per direction.
PRE_DWROLL_MODELS = {Direction.FORWARD: ("lgbm-sm_90-bf16-fwd", "5"),
                     Direction.BACKWARD_DATA: ("lgbm-sm_90-bf16-bwd_data", "5"),
                     Direction.BACKWARD_WEIGHT: ("lgbm-sm_90-bf16-bwd_weight", "4")}


def test_select_through_the_service_leaves_dwroll_to_a_model_that_saw_it(tmp_path, shipped_model_store):
    """The server's Select ranks with ``models.predictor.rank``: a model trained before dwroll (pinned)
    leaves it out; asked for dwroll only, it ranks it (never an empty answer); the newest shipped models,
    trained with dwroll rows, and the analytic model rank it."""
    from tiledispatch.native.arch import get_arch
    from tiledispatch.native.configs import Family
    from tiledispatch.server.catalog import Catalog
    from tiledispatch.server.metrics import Metrics
    from tiledispatch.server.selection import Policy, Selector, SelectQuery, Source
    from tiledispatch.server.tuning_db import TuningDB

    spec = get_arch("sm_90")
    db = TuningDB(tmp_path / "t.sqlite")
    try:
        selector = Selector(Catalog.load(None, spec), shipped_model_store, db, spec.name, Metrics())
        for direction in Direction:
            problem = _depthwise(direction)
            pinned = PRE_DWROLL_MODELS[direction]
            selection = selector.select(SelectQuery(problem, top_k=0, model=pinned))
            assert selection.source is Source.MODEL and (selection.model_name, selection.model_version) == pinned
            families = {c.config.family.value for c in selection.candidates}
            assert "dwroll" not in families and families <= EARLIER_FAMILIES
            newest = selector.select(SelectQuery(problem, top_k=0))
            assert newest.source is Source.MODEL and "dwroll" in {c.config.family.value for c in newest.candidates}
            only = selector.select(SelectQuery(problem, top_k=0, families=frozenset({Family.DWROLL}), model=pinned))
            assert only.source is Source.MODEL and only.candidates
            assert {c.config.family.value for c in only.candidates} == {"dwroll"}
            analytic = selector.select(SelectQuery(problem, top_k=0, policy=Policy.ANALYTIC_ONLY))
            assert "dwroll" in {c.config.family.value for c in analytic.candidates}
    finally:
        db.close()


def test_the_manifests_record_of_training_kernels_leaves_the_others_out(tmp_path):
    """A model ranks only the kernels its manifest lists (those of its training rows), like unseen
    families; with none of the candidates listed it ranks them all."""
    from tiledispatch.models.predictor import rank

    folder = _copy(tmp_path)
    problem = _depthwise(Direction.FORWARD)
    configs = [c for c in _candidates(problem) if c.family.value in EARLIER_FAMILIES]
    known = [c.name for c in configs[::3]]
    manifest = json.loads((folder / "train_manifest.json").read_text())
    (folder / "train_manifest.json").write_text(json.dumps({**manifest, "kernels": known}))
    model = load(folder)
    ranking = rank(model, problem, configs)
    assert sorted(configs[i].name for i in ranking.order) == sorted(known)
    assert sorted(ranking.unranked.tolist()) == [i for i, c in enumerate(configs) if c.name not in known]
    unknown = [c for c in configs if c.name not in known]
    assert sorted(rank(model, problem, unknown).order.tolist()) == list(range(len(unknown)))


@pytest.mark.parametrize("name", ["lgbm-sm_90-fp16-fwd/2", "lgbm-sm_90-fp16-bwd_data/2", "lgbm-sm_90-bf16-fwd/7",
                                  "lgbm-sm_90-bf16-bwd_data/7"])
def test_shipped_models_leave_the_split_k_data_kernels_unranked(name):
    """Forward / backward-data split-K kernels came after every shipped model: one with a kernel record
    (bf16 7) lacks them there, one without (fp16 2: it would put them first on batch-1 problems) leaves them
    out by their split_k. Asked to rank only them, a model ranks them all (never an empty answer)."""
    from tiledispatch.models.predictor import rank
    from tiledispatch.native.problem import ConvProblem
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import is_supported

    model = load(ARTIFACTS / name)
    dtype, direction = model.dtypes[0], model.directions[0]
    assert bool(model.seen_kernels) == name.startswith("lgbm-sm_90-bf16")
    problem = ConvProblem(direction, dtype, 1, 1, 256, 256, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    configs = [c for c in rule_set_configs("default", "sm_90", directions=[direction], dtypes=[dtype], ndims=[2])
               if is_supported(problem, c)]
    split = [i for i, c in enumerate(configs) if c.split_k > 1]
    assert split and len(split) < len(configs)
    ranking = rank(model, problem, configs)
    assert set(split) <= set(ranking.unranked.tolist())
    assert all(configs[i].split_k == 1 for i in ranking.order)
    only = rank(model, problem, [configs[i] for i in split])
    assert sorted(only.order.tolist()) == list(range(len(split))) and only.unranked.size == 0


@pytest.mark.parametrize("name", ["lgbm-sm_90-bf16-fwd/8", "lgbm-sm_90-bf16-bwd_data/8"])
def test_models_trained_on_the_split_k_rows_rank_the_split_k_data_kernels(name):
    """bf16 forward / backward-data version 8 were trained with the split-K completion rows (h200_s11): they
    rank every split-K kernel, and on the dev suite's batch-1 dense 3x3 layer (c256, 14x14), where a split
    kernel is 1.6-2.5x faster than any unsplit one on the H200 (bench/results/2026-11-26_h200_s10/dev_suite),
    a split kernel comes first. (Kernels added to ``default`` after them, such as the forward stage siblings,
    stay unranked by these versions.)"""
    from tiledispatch.models.predictor import rank
    from tiledispatch.native.problem import ConvProblem
    from tiledispatch.native.rules import rule_set_configs
    from tiledispatch.native.support import is_supported

    model = load(ARTIFACTS / name)
    dtype, direction = model.dtypes[0], model.directions[0]
    problem = ConvProblem(direction, dtype, 1, 1, 256, 256, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    configs = [c for c in rule_set_configs("default", "sm_90", directions=[direction], dtypes=[dtype], ndims=[2])
               if is_supported(problem, c)]
    ranking = rank(model, problem, configs)
    split = {i for i, c in enumerate(configs) if c.split_k > 1}
    assert split and not split & set(ranking.unranked.tolist())
    assert configs[ranking.order[0]].split_k > 1
