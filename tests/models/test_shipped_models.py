"""The models shipped under models/artifacts: trained on committed measured data, reproducible
bit for bit from it by the command their manifest records, and served by the server's model store."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tiledispatch.native.problem import ConvProblem, Direction, DType

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "models" / "artifacts"
SHIPPED = sorted(p for p in ARTIFACTS.glob("*/*") if (p / "model.txt").exists())

pytest.importorskip("lightgbm")


def test_there_are_shipped_models_for_every_direction():
    directions = {json.loads((p / "train_manifest.json").read_text())["direction"] for p in SHIPPED}
    assert directions == {"fwd", "bwd_data", "bwd_weight"}


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_manifest_names_measured_data_on_a_gpu(folder):
    manifest = json.loads((folder / "train_manifest.json").read_text())
    assert manifest["gpus"] and all("H200" in g or "H100" in g for g in manifest["gpus"])
    for dataset in manifest["datasets"]:
        data = ROOT / dataset["path"]
        assert (data / "manifest.json").exists() and list(data.glob("rows-*.parquet")), dataset["path"]
    assert (folder / "feature_spec.json").exists()


def test_the_recorded_command_reproduces_the_forward_model_bit_for_bit(tmp_path, monkeypatch):
    """Every model file of the newest forward artifact (format 2: the regressor and the ranker)."""
    from tiledispatch.models import train
    from tiledispatch.models.predictor import ARTIFACT_FORMATS

    folder = max((p for p in SHIPPED if p.parent.name.endswith("-fwd")), key=lambda p: int(p.name))  # the newest
    command = shlex.split(json.loads((folder / "train_manifest.json").read_text())["command"])
    args = command[command.index("tiledispatch.models.train") + 1:]
    out = args.index("--out")
    args[out + 1] = str(tmp_path)
    monkeypatch.chdir(ROOT)
    assert train.main(args) in (0, None)
    artifact_format = json.loads((folder / "feature_spec.json").read_text()).get("artifact_format", 1)
    for name in ARTIFACT_FORMATS[artifact_format]:
        rebuilt = tmp_path / folder.parent.name / folder.name / name
        assert rebuilt.read_bytes() == (folder / name).read_bytes(), name


@pytest.mark.parametrize("dtype", [DType.BF16, DType.FP16], ids=lambda d: d.value)
def test_the_server_serves_the_shipped_models(dtype, shipped_model_store):
    store = shipped_model_store  # ModelStore.load(ARTIFACTS, sm_90), once for both dtypes
    for direction in Direction:
        model = store.choose(dtype, direction)
        assert model is not None and model.kind == "trained" and model.covers("sm_90", dtype, direction), direction
        problem = ConvProblem(direction=direction, dtype=dtype, batch=8, groups=32, in_channels=128,
                              out_channels=128, input_size=(28, 28), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1),
                              pad_begin=(1, 1),
                              pad_end=(1, 1))
        from tiledispatch.native.rules import rule_set_configs
        from tiledispatch.native.support import is_supported

        configs = [c for c in rule_set_configs("default") if is_supported(problem, c)]
        predicted = model.predict_us(problem, configs)
        assert len(predicted) == len(configs) and (predicted > 0).all()


@pytest.mark.parametrize("direction", list(Direction), ids=lambda d: d.value)
def test_the_served_fp16_model_ranks_every_family_and_kernel_the_served_bf16_one_does(direction, shipped_model_store):
    """fp16 selection gets the same kernels as bf16 (session 37: fp16 models trained on the bf16 rows with
    --also-dtype bf16; session 6's ranked five families). A kernel the fp16 record lacks is never picked for fp16."""
    bf16, fp16 = (shipped_model_store.choose(dtype, direction) for dtype in (DType.BF16, DType.FP16))
    assert fp16.seen_families >= bf16.seen_families
    assert fp16.seen_kernels == {name.replace("_bf16_", "_fp16_") for name in bf16.seen_kernels}
