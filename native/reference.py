"""Float64 CPU reference for all three directions, 2D and 3D, on NHWGC / GKYXC / NHWGK arrays.

For each filter tap ``t`` the input positions it reads form a strided window of the padded input,
``i = o*stride - pad_begin + t*dilation``; every direction is a sum over taps of one per-group
contraction over that window:

* forward:          ``Y[n,o,g,k]  = Σ_t Σ_c X[n,i(o,t),g,c] · W[g,k,t,c]``
* backward_data:    ``dX[n,i,g,c] = Σ_t Σ_k dY[n,o,g,k] · W[g,k,t,c]`` over the (o, t) with i = i(o, t)
* backward_weight:  ``dW[g,k,t,c] = Σ_n Σ_o dY[n,o,g,k] · X[n,i(o,t),g,c]``
"""

from __future__ import annotations

import itertools

import numpy as np

from tiledispatch.native.problem import ConvProblem, Direction


def _check(name: str, array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name}: shape must be {list(shape)}, got {list(array.shape)}")
    return np.asarray(array, dtype=np.float64)


def _windows(problem: ConvProblem):
    """Yield (tap index tuple, slices into the padded input selecting the window of that tap)."""
    for tap in itertools.product(*(range(f) for f in problem.filter_size)):
        slices = tuple(
            slice(t * d, t * d + s * (o - 1) + 1, s)
            for t, d, s, o in zip(tap, problem.dilation, problem.stride, problem.output_size)
        )
        yield tap, slices


def _padded_shape(problem: ConvProblem) -> tuple[int, ...]:
    spatial = tuple(i + pb + pe for i, pb, pe in zip(problem.input_size, problem.pad_begin, problem.pad_end))
    return (problem.batch, *spatial, problem.groups, problem.c_per_group)


def _interior(problem: ConvProblem) -> tuple[slice, ...]:
    return (slice(None), *(slice(pb, pb + i) for pb, i in zip(problem.pad_begin, problem.input_size)))


def forward(problem: ConvProblem, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    x = _check("input", x, problem.input_shape)
    w = _check("weight", w, problem.weight_shape)
    padded = np.zeros(_padded_shape(problem))
    padded[_interior(problem)] = x
    y = np.zeros(problem.output_shape)
    for tap, window in _windows(problem):
        y += np.einsum("n...gc,gkc->n...gk", padded[(slice(None), *window)], w[(slice(None), slice(None), *tap)])
    return y


def backward_data(problem: ConvProblem, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    dy = _check("grad_output", dy, problem.output_shape)
    w = _check("weight", w, problem.weight_shape)
    padded = np.zeros(_padded_shape(problem))
    for tap, window in _windows(problem):
        padded[(slice(None), *window)] += np.einsum("n...gk,gkc->n...gc", dy, w[(slice(None), slice(None), *tap)])
    return padded[_interior(problem)].copy()


def backward_weight(problem: ConvProblem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    x = _check("input", x, problem.input_shape)
    dy = _check("grad_output", dy, problem.output_shape)
    padded = np.zeros(_padded_shape(problem))
    padded[_interior(problem)] = x
    dw = np.zeros(problem.weight_shape)
    spatial = "dhw"[-problem.ndim:]  # einsum cannot sum over an ellipsis: name the spatial axes
    for tap, window in _windows(problem):
        dw[(slice(None), slice(None), *tap)] = np.einsum(f"n{spatial}gk,n{spatial}gc->gkc", dy,
                                                         padded[(slice(None), *window)])
    return dw


def run_reference(problem: ConvProblem, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The runner contract: fwd (X, W) → Y; bwd_data (dY, W) → dX; bwd_weight (X, dY) → dW."""
    return {Direction.FORWARD: forward, Direction.BACKWARD_DATA: backward_data,
            Direction.BACKWARD_WEIGHT: backward_weight}[problem.direction](problem, first, second)


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """‖out − ref‖ / ‖ref‖ in float64; NaN anywhere gives inf (never passes)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output: shape {list(out.shape)} differs from the reference's {list(ref.shape)}")
    if not np.all(np.isfinite(out)):
        return float("inf")
    denominator = np.linalg.norm(ref)
    numerator = np.linalg.norm(out - ref)
    return float(numerator / denominator) if denominator > 0 else float(numerator)
