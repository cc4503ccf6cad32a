"""problem_rows reads a 3D problem that is a 2D one (ConvProblem.planar) as selection ranks it."""

from __future__ import annotations

import pytest

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType

pd = pytest.importorskip("pandas")

PLANAR = ConvProblem(direction="fwd", dtype="bf16", batch=4, groups=24, in_channels=24, out_channels=24,
                     input_size=(5, 20, 20), filter_size=(1, 3, 3), stride=(1, 1, 1), dilation=(1, 1, 1),
                     pad_begin=(0, 1, 1), pad_end=(0, 1, 1))


def _kernel(ndim: int, family: Family, block_m: int) -> str:
    return KernelConfig(Direction.FORWARD, DType.BF16, ndim, family, block_m, 16, 1, 4, 1, 1, 1, 1, 1).name


def _frame(problem: ConvProblem, timings: dict[str, float]):
    """Rows in the benchmark's columns (a grouping test: the times are the test's, not measurements)."""
    dims = lambda v: "x".join(map(str, v))  # noqa: E731
    base = dict(problem_key=problem.key, direction=problem.direction.value, dtype=problem.dtype.value,
                batch=problem.batch, groups=problem.groups, in_channels=problem.in_channels,
                out_channels=problem.out_channels, input_size=dims(problem.input_size),
                filter_size=dims(problem.filter_size), stride=dims(problem.stride), dilation=dims(problem.dilation),
                pad_begin=dims(problem.pad_begin), pad_end=dims(problem.pad_end), status="ok")
    return pd.DataFrame([dict(base, kernel=name, graph_us=t, event_median_us=t) for name, t in timings.items()])


def test_planar_problem_rows_are_its_2d_form_and_2d_kernels():
    from tiledispatch.models.dataset import problem_rows

    two_a, two_b, three = _kernel(2, Family.DIRECT, 16), _kernel(2, Family.DIRECT, 32), _kernel(3, Family.DIRECT, 16)
    rows = problem_rows(_frame(PLANAR, {two_a: 5.0, three: 4.0, two_b: 6.0}))
    assert len(rows) == 1
    assert rows[0].problem == PLANAR.planar
    assert [c.name for c in rows[0].configs] == sorted([two_a, two_b])
    assert list(rows[0].time_us) == [5.0, 6.0]


def test_planar_problem_measured_with_3d_kernels_only_stays_3d():
    """Rows measured before 2D kernels ran planar problems: the problem and its kernels as they were."""
    from tiledispatch.models.dataset import problem_rows

    three = _kernel(3, Family.DIRECT, 16)
    rows = problem_rows(_frame(PLANAR, {three: 4.0}))
    assert rows[0].problem == PLANAR and [c.name for c in rows[0].configs] == [three]
