"""bench/report.py on a hand-made run (no GPU): the best kernel per problem-direction, the targets, and the section
listing where cuDNN is faster."""

from __future__ import annotations

import pandas as pd

from bench.report import losses, per_problem, targets, write_report

MANIFEST = {"gpu_name": "Test GPU", "gpu_sms": 1, "driver": "0", "cuda": "0", "torch": "0", "cudnn": "0",
            "triton": "0", "rule_set": "default", "git_commit": "0" * 40, "date": "2026-11-29",
            "ceilings": {"matmul_tflops": 1.0, "copy_gbs": 1.0, "fma_tflops": 1.0},
            "timing": {"graph_us": "graph replay", "inputs": "rotated"}}


def _row(key: str, klass: str, kernel: str, graph_us: float | None, status: str = "ok", bound_us: float = 10.0):
    return {"problem_key": key, "direction": key.split("|", 1)[0], "problem_class": klass, "kernel": kernel,
            "family": "cudnn" if kernel.startswith("cudnn") else kernel.split("_")[4], "status": status,
            "graph_us": graph_us, "event_median_us": 2 * graph_us if graph_us else None, "bound_us": bound_us,
            "fma_bound_us": bound_us, "tflops": 1.0, "relative_error": 0.001}


def _rows() -> pd.DataFrame:
    won, lost, far, alone = ("fwd|bf16|2d|a", "bwd_data|bf16|2d|b", "bwd_weight|bf16|2d|c", "fwd|bf16|2d|d")
    return pd.DataFrame([
        _row(won, "2d_grouped", "gconv_fwd_bf16_2d_halo_x", 5.0),
        _row(won, "2d_grouped", "gconv_fwd_bf16_2d_igemm_y", 8.0),
        _row(won, "2d_grouped", "cudnn", 10.0),
        _row(lost, "2d_grouped", "gconv_bwd_data_bf16_2d_igemm_y", 30.0, bound_us=25.0),
        _row(lost, "2d_grouped", "gconv_bwd_data_bf16_2d_gmerge_z", 1.0, status="wrong"),  # never the best
        _row(lost, "2d_grouped", "cudnn", 24.0),
        _row(far, "2d_depthwise", "gconv_bwd_weight_bf16_2d_dwrun_w", 40.0, bound_us=30.0),
        _row(far, "2d_depthwise", "cudnn", 10.0),
        _row(alone, "2d_dense", "gconv_fwd_bf16_2d_igemm_y", 3.0),  # no cuDNN time: neither a win nor a loss
    ])


def test_the_best_correct_kernel_is_compared_with_cudnn():
    table = per_problem(_rows()).set_index("problem_key")
    assert table.loc["fwd|bf16|2d|a", "best_kernel"] == "gconv_fwd_bf16_2d_halo_x"
    assert table.loc["fwd|bf16|2d|a", "speedup"] == 2.0
    assert table.loc["bwd_data|bf16|2d|b", "best_us"] == 30.0  # the wrong 1 µs row does not count
    assert table.loc["bwd_data|bf16|2d|b", "speedup"] == 0.8
    assert pd.isna(table.loc["fwd|bf16|2d|d", "speedup"])


def test_losses_are_the_problems_cudnn_runs_faster_lowest_speedup_first():
    lost = losses(per_problem(_rows()))
    assert list(lost["problem_key"]) == ["bwd_weight|bf16|2d|c", "bwd_data|bf16|2d|b"]
    assert list(lost["speedup"]) == [0.25, 0.8]


def test_targets_follow_the_classes():
    verdicts = {name: (value, verdict) for name, value, _, verdict in targets(per_problem(_rows()))}
    assert verdicts["2D grouped+depthwise geomean speedup, fwd"] == (2.0, "met")
    assert verdicts["2D grouped+depthwise geomean speedup, bwd_weight"] == (0.25, "missed")
    assert verdicts["3D depthwise geomean speedup (all directions)"][1] == "no data"
    # bound >= 20 us: b (25 / 30) and c (30 / 40)
    assert verdicts["median fraction of roofline, bound >= 20 us"][0] == (25 / 30 + 30 / 40) / 2


def test_report_lists_the_losses_in_their_own_section(tmp_path):
    write_report(_rows(), [MANIFEST], tmp_path, "test")
    text = (tmp_path / "report.md").read_text()
    section = text.split("## Where cuDNN is faster", 1)[1].split("## Per problem", 1)[0]
    assert "2 of 3 problem-directions with a cuDNN time (1 of them where cuDNN takes ≥ 20 µs)" in section
    assert section.index("`2d|c`") < section.index("`2d|b`")
    assert "`2d|a`" not in section
    assert (tmp_path / "speedup_roofline.png").stat().st_size > 0


def test_report_says_so_when_cudnn_is_never_faster(tmp_path):
    rows = _rows()
    rows = rows[rows["problem_key"] == "fwd|bf16|2d|a"]
    write_report(rows, [MANIFEST], tmp_path, "test")
    assert "Nowhere: on all 1 problem-directions" in (tmp_path / "report.md").read_text()
