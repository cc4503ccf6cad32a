"""Pruned rows carry a per-call event estimate; on a problem whose launch outlasts the kernel that estimate is
mostly host time, so ``pruned_min_device_share`` keeps a problem's pruned rows only where its fastest timed row's
device time is at least that share of its event time."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from tiledispatch.models.dataset import problem_rows  # noqa: E402
from tiledispatch.models.train import TrainSettings  # noqa: E402
from tiledispatch.native.problem import ConvProblem  # noqa: E402

SMALL = ConvProblem.from_key("fwd|bf16|2d|n1|g1|c160|k960|in24x24|f1x1|s1x1|d1x1|pb0x0|pe0x0")
LARGE = ConvProblem.from_key("fwd|bf16|2d|n32|g1|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1")
FAST, NEXT, SLOW = ("gconv_fwd_bf16_2d_gemm1x1_128x128x64_w8_s3_gm8_sk1_mg1_v8_i32",
                    "gconv_fwd_bf16_2d_igemm_64x32x32_w4_s4_gm8_sk1_mg1_v8_i32",
                    "gconv_fwd_bf16_2d_igemm_64x64x32_w4_s4_gm8_sk1_mg1_v8_i32")


def _rows(problem: ConvProblem, rows: list[tuple[str, str, float, float]]):
    """(kernel, status, graph µs, event µs) in the benchmark's columns (times are the test's, not measurements)."""
    dims = lambda v: "x".join(map(str, v))  # noqa: E731
    base = dict(problem_key=problem.key, direction=problem.direction.value, dtype=problem.dtype.value,
                batch=problem.batch, groups=problem.groups, in_channels=problem.in_channels,
                out_channels=problem.out_channels, input_size=dims(problem.input_size),
                filter_size=dims(problem.filter_size), stride=dims(problem.stride), dilation=dims(problem.dilation),
                pad_begin=dims(problem.pad_begin), pad_end=dims(problem.pad_end))
    return [dict(base, kernel=k, status=s, graph_us=g, event_median_us=e) for k, s, g, e in rows]


# A launch-bound problem (device 4.3 µs under a 28 µs event) and a device-bound one (59 µs under 61).
FRAME = pd.DataFrame(_rows(SMALL, [(FAST, "ok", 4.26, 28.1), (NEXT, "ok", 4.15, 63.5),
                                   (SLOW, "pruned", float("nan"), 57.5)])
                     + _rows(LARGE, [(FAST.replace("gemm1x1", "igemm"), "ok", 59.2, 61.0),
                                     (SLOW, "pruned", float("nan"), 140.0)]))


def _pruned(share: float) -> dict[str, list[float]]:
    return {pr.problem.key: [float(t) for t, ok in zip(pr.time_us, pr.timed) if not ok]
            for pr in problem_rows(FRAME, include_pruned=True, pruned_min_device_share=share)}


def test_every_pruned_row_by_default():
    assert _pruned(0.0) == {SMALL.key: [57.5], LARGE.key: [140.0]}


@pytest.mark.parametrize("share", [0.5, 0.9])
def test_a_launch_bound_problem_drops_its_pruned_estimates(share):
    # SMALL's fastest timed kernel (4.15 µs device) spent 63.5 µs a call: its 57.5 µs estimate is launch, not kernel.
    assert _pruned(share) == {SMALL.key: [], LARGE.key: [140.0]}


def test_timed_rows_stay_whatever_the_share():
    (small,) = [pr for pr in problem_rows(FRAME, include_pruned=True, pruned_min_device_share=1.0)
                if pr.problem == SMALL]
    assert sorted(small.time_us) == [4.15, 4.26] and small.timed.all()


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_a_share_outside_0_1_is_refused_naming_the_field(share):
    with pytest.raises(ValueError, match="pruned_min_device_share"):
        problem_rows(FRAME, include_pruned=True, pruned_min_device_share=share)
    with pytest.raises(ValueError, match="pruned_min_device_share"):
        TrainSettings(pruned_min_device_share=share)
