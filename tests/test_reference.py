"""The float64 CPU reference against PyTorch's CPU convolution (float64) and autograd."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import small_problems
from tiledispatch.native import reference
from tiledispatch.native.problem import ConvProblem

torch = pytest.importorskip("torch")
F = torch.nn.functional

TOLERANCE = 1e-10


# ---- layout conversion and the PyTorch oracle ------------------------------------------------
def x_to_torch(p: ConvProblem, x: np.ndarray):
    """NHWGC (N, *S, G, C/G) -> NCHW (N, C, *S); channel index g*(C/G) + c, as torch's groups expect."""
    t = torch.from_numpy(x).reshape(p.batch, *p.input_size, p.in_channels)
    return t.movedim(-1, 1).contiguous()


def w_to_torch(p: ConvProblem, w: np.ndarray):
    """GKYXC (G, K/G, *F, C/G) -> (K, C/G, *F)."""
    t = torch.from_numpy(w).reshape(p.out_channels, *p.filter_size, p.c_per_group)
    return t.movedim(-1, 1).contiguous()


def y_to_torch(p: ConvProblem, y: np.ndarray):
    """NHWGK (N, *O, G, K/G) -> (N, K, *O)."""
    t = torch.from_numpy(y).reshape(p.batch, *p.output_size, p.out_channels)
    return t.movedim(-1, 1).contiguous()


def x_from_torch(p: ConvProblem, t) -> np.ndarray:
    return t.movedim(1, -1).reshape(p.input_shape).numpy()


def w_from_torch(p: ConvProblem, t) -> np.ndarray:
    return t.movedim(1, -1).reshape(p.weight_shape).numpy()


def y_from_torch(p: ConvProblem, t) -> np.ndarray:
    return t.movedim(1, -1).reshape(p.output_shape).numpy()


def torch_conv(p: ConvProblem, x, w):
    pads = []
    for pb, pe in zip(reversed(p.pad_begin), reversed(p.pad_end)):  # F.pad: last dim first
        pads += [pb, pe]
    conv = F.conv2d if p.ndim == 2 else F.conv3d
    return conv(F.pad(x, pads), w, stride=p.stride, dilation=p.dilation, padding=0, groups=p.groups)


def torch_oracle(p: ConvProblem, x: np.ndarray, w: np.ndarray, dy: np.ndarray):
    """(Y, dX, dW) from PyTorch: the forward conv and its autograd gradients for grad_output dY."""
    xt = x_to_torch(p, x).requires_grad_(True)
    wt = w_to_torch(p, w).requires_grad_(True)
    yt = torch_conv(p, xt, wt)
    assert tuple(yt.shape) == (p.batch, p.out_channels, *p.output_size)
    dxt, dwt = torch.autograd.grad(yt, (xt, wt), grad_outputs=y_to_torch(p, dy))
    return y_from_torch(p, yt.detach()), x_from_torch(p, dxt), w_from_torch(p, dwt)


def random_operands(p: ConvProblem, seed: int):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(p.input_shape), rng.standard_normal(p.weight_shape),
            rng.standard_normal(p.output_shape))


DIRECTIONS = [pytest.param("fwd", id="fwd"), pytest.param("bwd_data", id="bwd_data"),
              pytest.param("bwd_weight", id="bwd_weight")]


def check_against_torch(p: ConvProblem, direction: str, seed: int) -> None:
    x, w, dy = random_operands(p, seed)
    y_ref, dx_ref, dw_ref = torch_oracle(p, x, w, dy)
    p = p.with_direction(direction)
    if direction == "fwd":
        out, expected, operands = reference.forward(p, x, w), y_ref, (x, w)
    elif direction == "bwd_data":
        out, expected, operands = reference.backward_data(p, dy, w), dx_ref, (dy, w)
    else:
        out, expected, operands = reference.backward_weight(p, x, dy), dw_ref, (x, dy)
    assert out.shape == p.operand_shapes[2] and out.dtype == np.float64
    error = reference.relative_error(out, expected)
    assert error <= TOLERANCE, f"{direction} {p.key}: relative error {error:.3g}"
    # the runner contract dispatches on the problem's direction, with the operands in contract order
    assert np.array_equal(reference.run_reference(p, *operands), out)


def prob(batch, groups, c, k, input_size, filter_size, stride=None, dilation=None, pad_begin=None, pad_end=None):
    nd = len(input_size)
    return ConvProblem(direction="fwd", dtype="fp32", batch=batch, groups=groups, in_channels=c, out_channels=k,
                       input_size=input_size, filter_size=filter_size, stride=stride or [1] * nd,
                       dilation=dilation or [1] * nd, pad_begin=pad_begin or [0] * nd, pad_end=pad_end or [0] * nd)


CASES = {
    "2d_dense": prob(2, 1, 5, 7, [7, 6], [3, 3], pad_begin=[1, 1], pad_end=[1, 1]),
    "2d_dense_1x1": prob(2, 1, 8, 4, [5, 5], [1, 1]),
    "2d_grouped_odd": prob(2, 3, 9, 6, [7, 8], [3, 3], pad_begin=[1, 1], pad_end=[1, 1]),
    "2d_grouped_strided": prob(2, 3, 9, 6, [9, 8], [3, 2], stride=[2, 3]),
    "2d_grouped_dilated": prob(1, 3, 9, 6, [9, 9], [3, 3], dilation=[2, 3], pad_begin=[2, 1], pad_end=[1, 3]),
    "2d_asym_pad": prob(2, 2, 6, 10, [6, 7], [3, 5], pad_begin=[2, 0], pad_end=[0, 3]),
    "2d_stride_dil_pad": prob(2, 3, 6, 9, [10, 9], [3, 2], stride=[3, 2], dilation=[2, 3], pad_begin=[1, 2],
                              pad_end=[3, 0]),
    "2d_stride_leaves_tail": prob(1, 1, 2, 3, [8, 9], [2, 2], stride=[3, 3]),  # last input rows unread
    "2d_depthwise": prob(2, 8, 8, 8, [6, 7], [3, 3], pad_begin=[1, 1], pad_end=[1, 1]),
    "2d_depthwise_nonsquare": prob(1, 5, 5, 5, [9, 6], [7, 1], stride=[2, 1], pad_begin=[3, 0], pad_end=[3, 0]),
    "2d_dw_multiplier": prob(2, 5, 5, 15, [7, 6], [5, 3], stride=[2, 2], pad_begin=[2, 1], pad_end=[2, 1]),
    "2d_filter_equals_padded_input": prob(1, 2, 4, 2, [3, 2], [5, 4], pad_begin=[1, 2], pad_end=[1, 0]),
    "3d_dense": prob(2, 1, 3, 4, [4, 5, 5], [3, 3, 3], pad_begin=[1, 1, 1], pad_end=[1, 1, 1]),
    "3d_grouped_odd": prob(1, 3, 9, 6, [4, 6, 5], [2, 3, 3], stride=[1, 2, 1], dilation=[2, 1, 1],
                           pad_begin=[1, 1, 0], pad_end=[1, 0, 1]),
    "3d_depthwise": prob(2, 6, 6, 6, [5, 4, 6], [3, 3, 3], stride=[2, 1, 2], pad_begin=[1, 1, 1],
                         pad_end=[0, 1, 2]),
    "3d_dw_multiplier": prob(1, 3, 3, 6, [5, 5, 4], [1, 3, 3], dilation=[1, 2, 1], pad_begin=[0, 2, 1],
                             pad_end=[0, 1, 1]),
}


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("name", CASES)
def test_reference_matches_torch(name, direction):
    check_against_torch(CASES[name], direction, seed=zlib.crc32(name.encode()))


RANDOM = settings(max_examples=30, deadline=None)


@RANDOM
@given(small_problems(), st.integers(0, 2**32 - 1))
def test_forward_matches_torch_on_random_problems(p, seed):
    check_against_torch(p, "fwd", seed)


@RANDOM
@given(small_problems(), st.integers(0, 2**32 - 1))
def test_backward_data_matches_torch_on_random_problems(p, seed):
    check_against_torch(p, "bwd_data", seed)


@RANDOM
@given(small_problems(), st.integers(0, 2**32 - 1))
def test_backward_weight_matches_torch_on_random_problems(p, seed):
    check_against_torch(p, "bwd_weight", seed)


def test_reference_forward_by_hand():
    """A 1-channel 2D conv small enough to work out: 3x3 input 1..9, 2x2 ones filter, pad_end 1."""
    p = prob(1, 1, 1, 1, [3, 3], [2, 2], pad_end=[1, 1])
    x = np.arange(1.0, 10.0).reshape(p.input_shape)
    w = np.ones(p.weight_shape)
    y = reference.forward(p, x, w).reshape(3, 3)
    assert y.tolist() == [[12, 16, 9], [24, 28, 15], [15, 17, 9]]


@pytest.mark.parametrize("direction", DIRECTIONS[1:])
@pytest.mark.parametrize("name", ["2d_stride_dil_pad", "3d_grouped_odd"])
def test_adjoint_identity(name, direction):
    """<forward(X, W), dY> = <X, backward_data(dY, W)> = <W, backward_weight(X, dY)>: the backward
    passes are the adjoints of the forward, independently of PyTorch."""
    p = CASES[name]
    x, w, dy = random_operands(p, 7)
    lhs = np.vdot(reference.forward(p, x, w), dy)
    if direction == "bwd_data":
        rhs = np.vdot(x, reference.backward_data(p, dy, w))
    else:
        rhs = np.vdot(w, reference.backward_weight(p, x, dy))
    assert np.isclose(lhs, rhs, rtol=1e-12, atol=0)


def test_reference_accepts_lower_precision_inputs():
    p = CASES["2d_grouped_odd"]
    x, w, _ = random_operands(p, 3)
    y32 = reference.forward(p, x.astype(np.float32), w.astype(np.float16))
    assert y32.dtype == np.float64
    expected = reference.forward(p, x.astype(np.float32).astype(np.float64), w.astype(np.float16).astype(np.float64))
    assert np.array_equal(y32, expected)


@pytest.mark.parametrize("direction, which, name", [
    ("fwd", 0, "input"), ("fwd", 1, "weight"), ("bwd_data", 0, "grad_output"), ("bwd_data", 1, "weight"),
    ("bwd_weight", 0, "input"), ("bwd_weight", 1, "grad_output"),
])
def test_reference_refuses_wrong_shapes(direction, which, name):
    p = CASES["2d_grouped_odd"].with_direction(direction)
    first, second = (np.zeros(s) for s in p.operand_shapes[:2])
    operands = [first, second]
    operands[which] = np.zeros(operands[which].shape[:-1] + (operands[which].shape[-1] + 1,))
    with pytest.raises(ValueError, match=name):
        reference.run_reference(p, *operands)


# ---- relative_error ---------------------------------------------------------------------------
def test_relative_error_values():
    ref = np.array([3.0, 4.0])
    assert reference.relative_error(ref, ref) == 0.0
    assert reference.relative_error(np.array([3.0, 5.0]), ref) == pytest.approx(1 / 5)
    assert reference.relative_error(np.zeros(2), ref) == pytest.approx(1.0)
    assert reference.relative_error(np.array([1.0, 0.0]), np.zeros(2)) == 1.0  # ‖ref‖ = 0: absolute error


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_relative_error_non_finite_output_is_inf(bad):
    ref = np.ones((2, 3))
    out = ref.copy()
    out[1, 2] = bad
    assert reference.relative_error(out, ref) == float("inf")
    assert reference.relative_error(np.full((2, 3), np.nan), ref) == float("inf")
    assert reference.relative_error(np.full(3, np.nan), np.zeros(3)) == float("inf")


def test_relative_error_refuses_shape_mismatch():
    with pytest.raises(ValueError):
        reference.relative_error(np.ones((2, 1)), np.ones((1, 2)))
