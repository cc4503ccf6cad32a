"""Selection policy: tuning database → trained model → analytic, the cache, pins and filters."""

from __future__ import annotations

import numpy as np
import pytest

from tiledispatch.native.arch import get_arch
from tiledispatch.native.configs import Family
from tiledispatch.native.problem import ConvProblem, Direction, DType
from tiledispatch.native.support import is_supported
from tiledispatch.server.catalog import Catalog
from tiledispatch.server.errors import FailedPrecondition, InvalidArgument, NotFound, Unimplemented
from tiledispatch.server.metrics import Metrics
from tiledispatch.server.predictors import ModelStore, version_key
from tiledispatch.server.selection import Policy, Selector, SelectQuery, Source
from tiledispatch.server.tuning_db import MeasurementRow, TuningDB

from .conftest import TINY

SPEC = get_arch("sm_90")


class StubModel:
    """A 'trained' model: predicts a fixed order (reverse name order) so its answers are recognisable."""

    kind = "trained"

    def __init__(self, name: str, version: str, dtype: DType = DType.BF16, direction: Direction = Direction.FORWARD):
        self.name, self.version = name, version
        self._dtype, self._direction = dtype, direction

    def covers(self, arch, dtype, direction):
        return arch == "sm_90" and dtype is self._dtype and direction is self._direction

    def predict_us(self, problem, configs):
        names = [c.name for c in configs]
        order = sorted(range(len(names)), key=lambda i: names[i], reverse=True)
        out = np.empty(len(names))
        out[order] = np.arange(len(names)) + 1.0
        return out


@pytest.fixture
def parts(tmp_path):
    db = TuningDB(tmp_path / "t.sqlite")
    catalog = Catalog.load(None, SPEC)
    models = ModelStore.load(tmp_path / "no-models", SPEC)
    selector = Selector(catalog, models, db, SPEC.name, Metrics(), cache_size=8)
    yield selector, db, models
    db.close()


def problem(**changes) -> ConvProblem:
    return ConvProblem(**{**TINY, **changes})


def test_analytic_fallback(parts):
    selector, _, _ = parts
    selection = selector.select(SelectQuery(problem()))
    assert selection.source is Source.ANALYTIC
    assert (selection.model_name, selection.model_version) == ("analytic", "1")
    times = [c.predicted_us for c in selection.candidates]
    assert times == sorted(times) and len(selection.candidates) > 5
    assert all(c.measured_us is None for c in selection.candidates)


def test_exact_hit_in_tuning_db_wins(parts):
    selector, db, _ = parts
    p = problem()
    ranked = selector.select(SelectQuery(p)).candidates
    slow, fast = ranked[0].config.name, ranked[-1].config.name
    db.record([MeasurementRow(p.key, p.to_json(), name, "sm_90", "h200", "gpu", t, t, None, "ok", 0.0, "", "test")
               for name, t in ((slow, 50.0), (fast, 5.0))])
    selector.invalidate()
    selection = selector.select(SelectQuery(p))
    assert selection.source is Source.TUNING_DB
    assert [c.config.name for c in selection.candidates[:2]] == [fast, slow]
    assert [c.measured_us for c in selection.candidates[:2]] == [5.0, 50.0]
    assert selection.candidates[2].measured_us is None  # the unmeasured rest follows, by prediction
    assert selector.select(SelectQuery(p, policy=Policy.ANALYTIC_ONLY)).source is Source.ANALYTIC
    assert selector.select(SelectQuery(p, policy=Policy.TUNING_DB_ONLY)).best.config.name == fast
    with pytest.raises(NotFound):
        selector.select(SelectQuery(problem(batch=3), policy=Policy.TUNING_DB_ONLY))


class StubRankerModel(StubModel):
    """A two-model artifact: predicted µs in reverse name order, but a ranker preferring name order."""

    def rank(self, problem, configs):
        from tiledispatch.models.predictor import Ranking

        names = [c.name for c in configs]
        score = -np.argsort(np.argsort(names, kind="stable"), kind="stable").astype(np.float64)
        return Ranking.of(self.predict_us(problem, configs), ranker_score=score)


def test_a_ranker_orders_the_candidates_and_the_regressor_gives_their_times(parts):
    selector, _, models = parts
    models.trained.append(StubRankerModel("gbm", "2"))
    selection = selector.select(SelectQuery(problem()))
    names = [c.config.name for c in selection.candidates]
    assert names == sorted(names)  # the ranker's order, not the predicted µs' (reverse name order)
    times = [c.predicted_us for c in selection.candidates]
    assert times == sorted(times, reverse=True)  # each candidate keeps its regressor time


def test_trained_model_chosen_by_dtype_direction_and_newest_version(parts):
    selector, _, models = parts
    models.trained.extend([StubModel("gbm", "1.9"), StubModel("gbm", "1.10"),
                           StubModel("gbm", "3", dtype=DType.FP16)])
    selection = selector.select(SelectQuery(problem()))
    assert selection.source is Source.MODEL and (selection.model_name, selection.model_version) == ("gbm", "1.10")
    names = [c.config.name for c in selection.candidates]
    assert names == sorted(names, reverse=True)
    # bwd_data has no trained model: analytic.
    assert selector.select(SelectQuery(problem(direction="bwd_data"))).source is Source.ANALYTIC
    with pytest.raises(NotFound) as caught:
        selector.select(SelectQuery(problem(direction="bwd_data"), policy=Policy.MODEL_ONLY))
    assert caught.value.field == "model"
    pinned = selector.select(SelectQuery(problem(), model=("gbm", "1.9")))
    assert pinned.model_version == "1.9"
    with pytest.raises(NotFound):
        selector.select(SelectQuery(problem(), model=("gbm", "7")))
    with pytest.raises(FailedPrecondition):
        selector.select(SelectQuery(problem(), model=("gbm", "3")))  # fp16 model, bf16 problem
    assert selector.select(SelectQuery(problem(), model=("analytic", ""))).source is Source.ANALYTIC
    with pytest.raises(InvalidArgument):
        selector.select(SelectQuery(problem(), policy=Policy.ANALYTIC_ONLY, model=("gbm", "")))


def test_version_key_orders_numerically():
    assert sorted(["1.10", "1.9", "2", "v10", "v9"], key=version_key) == ["1.9", "1.10", "2", "v9", "v10"]


def test_cache_hits_and_invalidation(parts):
    selector, _, _ = parts
    query = SelectQuery(problem(), top_k=3)
    assert not selector.select(query).cached
    assert selector.select(SelectQuery(problem(), top_k=7)).cached  # top_k is cut from the cached ranking
    assert not selector.select(SelectQuery(problem(), families=frozenset({Family.DIRECT}))).cached
    selector.invalidate()
    assert not selector.select(query).cached
    for batch in range(1, 12):  # LRU of 8: the first entries fall out
        selector.select(SelectQuery(problem(batch=batch)))
    assert not selector.select(SelectQuery(problem(batch=1))).cached


def test_select_cached_answers_hits_only_and_counts_them_once(parts):
    """The servicer answers a hit on the event loop through ``select_cached``; a miss goes on to
    ``select`` in a thread, which counts the miss, so ``select_cached`` must not count it too."""
    selector, _, _ = parts
    metrics = selector.metrics
    query = SelectQuery(problem(), top_k=3)
    assert selector.select_cached(query) is None
    assert (metrics._hits, metrics._lookups) == (0, 0)
    first = selector.select(query)
    assert (metrics._hits, metrics._lookups) == (0, 1)
    again = selector.select_cached(query)
    assert again is not None and again.cached and again.candidates == first.candidates
    assert (metrics._hits, metrics._lookups) == (1, 2)
    assert selector.select_cached(SelectQuery(problem(), top_k=3, policy=Policy.AUTOTUNE)) is None
    assert selector.select_cached(SelectQuery(problem(batch=5))) is None
    assert (metrics._hits, metrics._lookups) == (1, 2)


def test_family_filter_and_unimplemented(parts):
    selector, _, _ = parts
    only = selector.select(SelectQuery(problem(), families=frozenset({Family.DIRECT})))
    assert {c.config.family for c in only.candidates} == {Family.DIRECT}
    with pytest.raises(Unimplemented) as caught:  # C/G = 2: no 1x1 kernel for a 3x2 filter
        selector.select(SelectQuery(problem(), families=frozenset({Family.GEMM1X1})))
    assert "gemm1x1" in caught.value.message


def test_quarantined_kernels_are_not_selected(parts):
    selector, _, _ = parts
    best = selector.select(SelectQuery(problem())).best.config.name
    selector.catalog.quarantine(best, "crashed")
    selector.invalidate()
    assert best not in [c.config.name for c in selector.select(SelectQuery(problem())).candidates]


def test_autotune_needs_a_gpu(parts):
    selector, _, _ = parts
    with pytest.raises(FailedPrecondition) as caught:
        selector.select(SelectQuery(problem(), policy=Policy.AUTOTUNE))
    assert caught.value.field == "policy"


def test_negative_top_k(parts):
    selector, _, _ = parts
    with pytest.raises(InvalidArgument) as caught:
        selector.select(SelectQuery(problem(), top_k=-1))
    assert caught.value.field == "top_k"


class StubNarrowModel(StubModel):
    """A trained model that ranks only the direct family (as a model that never saw the others would)."""

    def rank(self, problem, configs):
        from tiledispatch.models.predictor import Ranking

        seen = np.array([c.family is Family.DIRECT for c in configs])
        return Ranking.of(self.predict_us(problem, configs), ranked=seen)


def test_a_measured_kernel_the_model_may_not_rank_still_wins(parts):
    selector, db, models = parts
    models.trained.append(StubNarrowModel("narrow", "1"))
    p = problem()
    selection = selector.select(SelectQuery(p))
    assert selection.source is Source.MODEL and {c.config.family for c in selection.candidates} == {Family.DIRECT}
    unseen = next(c for c in selector.catalog.candidates(p, ()) if c.family is not Family.DIRECT)
    db.record([MeasurementRow(p.key, p.to_json(), unseen.name, "sm_90", "h200", "gpu", 1.0, 1.0, None, "ok", 0.0, "",
                              "test")])
    selector.invalidate()
    selection = selector.select(SelectQuery(p))
    assert selection.source is Source.TUNING_DB and selection.best.config.name == unseen.name
    # the unmeasured rest is the model's ranking: no other unranked family is added
    assert {c.config.family for c in selection.candidates[1:]} == {Family.DIRECT}


def test_measurements_of_another_build_of_a_kernel_are_not_evidence(tmp_path):
    """A registry's kernel keeps its name when its code changes; only times of the binary in use count."""
    db = TuningDB(tmp_path / "t.sqlite")
    configs = Catalog.load(None, SPEC).configs
    catalog = Catalog(configs, "registry:test", builds={c.name: "current" for c in configs})
    selector = Selector(catalog, ModelStore.load(tmp_path / "no-models", SPEC), db, SPEC.name, Metrics(), cache_size=8)
    try:
        p = problem()
        name = selector.select(SelectQuery(p)).candidates[-1].config.name

        def measured(build: str) -> MeasurementRow:
            return MeasurementRow(p.key, p.to_json(), name, "sm_90", "h200", "gpu", 1.0, 1.0, None, "ok", 0.0, "",
                                  "test", kernel_build=build)

        db.record([measured("before-the-change")])
        selector.invalidate()
        assert selector.select(SelectQuery(p)).source is Source.ANALYTIC
        db.record([measured("current")])
        selector.invalidate()
        selection = selector.select(SelectQuery(p))
        assert selection.source is Source.TUNING_DB and selection.best.config.name == name
    finally:
        db.close()


def test_planar_3d_problem_is_selected_among_2d_kernels(parts):
    """A 3D problem with a 1-deep filter is the 2D problem over N·D images: the catalog offers the 2D
    kernels that run that (the dwrun data kernels are 2D only) and the answer's kernels are 2D, ranked on
    the 2D form."""
    selector, _, _ = parts
    depthwise = problem(groups=24, in_channels=24, out_channels=24, input_size=(5, 37, 37), filter_size=(1, 3, 3),
                        stride=(1, 1, 1), dilation=(1, 1, 1), pad_begin=(0, 1, 1), pad_end=(0, 1, 1), batch=8)
    assert depthwise.planar is not None
    candidates = selector.catalog.candidates(depthwise)
    assert candidates and {c.ndim for c in candidates} == {2}
    assert {c.family for c in candidates} >= {Family.DWRUN, Family.DIRECT}
    selection = selector.select(SelectQuery(depthwise, top_k=5))
    assert all(c.config.ndim == 2 for c in selection.candidates)
    assert selection.problem_key == depthwise.key  # answered for the problem asked
    # the 2D form's own ranking: the same kernels in the same order
    flat = selector.select(SelectQuery(depthwise.planar, top_k=5))
    assert [c.config.name for c in selection.candidates] == [c.config.name for c in flat.candidates]


def test_3d_problem_with_a_deep_filter_keeps_3d_kernels(parts):
    selector, _, _ = parts
    depthwise = problem(groups=24, in_channels=24, out_channels=24, input_size=(5, 12, 12), filter_size=(3, 3, 3),
                        stride=(1, 1, 1), dilation=(1, 1, 1), pad_begin=(1, 1, 1), pad_end=(1, 1, 1))
    assert depthwise.planar is None
    assert {c.ndim for c in selector.catalog.candidates(depthwise)} == {3}


def test_predictions_for_a_planar_problem_take_each_kernels_form(tmp_path, shipped_model_store):
    """Benchmark reports predict each measured kernel on the problem it runs: a 2D kernel on the planar form
    (the shipped trained model: its features see the input sizes, which the two forms spell differently)."""
    db = TuningDB(tmp_path / "t.sqlite")
    selector = Selector(Catalog.load(None, SPEC), shipped_model_store, db, SPEC.name, Metrics())  # models/artifacts
    depthwise = problem(groups=24, in_channels=24, out_channels=24, input_size=(5, 37, 37), filter_size=(1, 3, 3),
                        stride=(1, 1, 1), dilation=(1, 1, 1), pad_begin=(0, 1, 1), pad_end=(0, 1, 1), batch=8)
    flat = [c for c in selector.catalog.configs if c.ndim == 2 and is_supported(depthwise, c)][:4]
    deep = [c for c in selector.catalog.configs if c.ndim == 3 and is_supported(depthwise, c)][:4]
    predictor, mixed = selector.predict(depthwise, flat + deep)
    assert predictor.kind == "trained"
    _, as_planar = selector.predict(depthwise.planar, flat)
    _, as_3d = selector.predict(depthwise, deep)
    np.testing.assert_array_equal(mixed, np.concatenate([as_planar, as_3d]))
    db.close()
