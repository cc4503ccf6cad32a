from __future__ import annotations

from pathlib import Path

import pytest

from tiledispatch.models import dataset_plan as plan

TORCHVISION = Path(__file__).resolve().parents[2] / "models" / "data" / "problems" / "torchvision.json"


@pytest.mark.parametrize("name, family", [("resnet50", "resnet"), ("efficientnet_v2_s", "efficientnet_v2"),
                                          ("regnet_y_8gf", "regnet"), ("deeplabv3_resnet50", "deeplabv3"),
                                          ("mobilenet_v3_large", "mobilenet_v3"), ("r2plus1d_18", "r2plus1d")])
def test_model_family(name, family):
    assert plan.model_family(name) == family


@pytest.fixture(scope="module")
def small_plan():
    return plan.make_plan(TORCHVISION, plan.PlanSettings(synthetic=400))


def test_split_never_shares_a_shape_and_holds_out_whole_families(small_plan):
    train_shapes = {plan.shape_of(i.problem) for i in small_plan.training}
    validation_shapes = {plan.shape_of(i.problem) for i in small_plan.validation}
    assert not train_shapes & validation_shapes
    held = set(small_plan.held_families)
    assert held
    for item in small_plan.training:
        assert not any(plan.model_family(m) in held for m in item.models)
    sources = {i.source for i in small_plan.validation}
    assert sources == {"synthetic", "torchvision"}


def test_order_is_a_stratified_round_robin(small_plan):
    strata = {(i.problem.class_label, plan.batch_bucket(i.problem.batch), i.source) for i in small_plan.training}
    head = small_plan.training[: len(strata)]
    assert {(i.problem.class_label, plan.batch_bucket(i.problem.batch), i.source) for i in head} == strata


def test_plan_is_deterministic_and_bench_readable(small_plan, tmp_path):
    again = plan.make_plan(TORCHVISION, plan.PlanSettings(synthetic=400))
    assert [i.problem.key for i in again.training] == [i.problem.key for i in small_plan.training]
    from tiledispatch.native.bench import load_problems

    small = plan.Plan(small_plan.training[:30], small_plan.validation[:10], small_plan.held_families,
                      small_plan.settings, 0)
    plan.write_plan(small, tmp_path, log=lambda _: None)
    problems = load_problems(tmp_path / "validation_bwd_weight.json", ["bwd_weight"], "bf16")
    assert len(problems) == 10 and all(p.direction.value == "bwd_weight" for p in problems)
    assert load_problems(tmp_path / "train_fwd_fp16.json", ["fwd"], "fp16")[0].dtype.value == "fp16"
