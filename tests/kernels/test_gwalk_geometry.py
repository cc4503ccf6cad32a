"""gwalk's launch geometry (``native/kernels/gwalk.py``): GEMM rows packed as images × output columns, output
rows walked per program, and backward-data's walk over dY."""

from __future__ import annotations

import pytest

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.kernels.gwalk import holds_weights, walk_geometry
from tiledispatch.native.problem import ConvProblem, Direction, DType


def _config(direction=Direction.FORWARD, block_m=64, side=32, rows=4, merge=4) -> KernelConfig:
    return KernelConfig(direction, DType.BF16, 2, Family.GWALK, block_m, side, side, 4, 1, rows, 1, merge, 8)


def _problem(direction="fwd", **overrides) -> ConvProblem:
    fields = dict(direction=direction, dtype="bf16", batch=32, groups=32, in_channels=128, out_channels=256,
                  input_size=(7, 7), filter_size=(3, 3), stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1),
                  pad_end=(1, 1))
    return ConvProblem(**{**fields, **overrides})


def test_narrow_maps_pack_several_images_into_the_gemm_rows():
    geo = walk_geometry(_problem(), _config())
    assert (geo["tile_w"], geo["images"]) == (7, 9)  # 63 of 64 rows used
    # 32 images in blocks of 9, 7 rows in blocks of 4, 1 column tile; 32 groups in blocks of 4
    assert geo["grid"] == (4 * 2 * 1, 8, 1)
    assert (geo["gc"], geo["gk"], geo["src_c"], geo["dst_c"]) == (16, 32, 128, 256)


def test_wide_maps_split_into_column_tiles():
    geo = walk_geometry(_problem(batch=2, input_size=(5, 150)), _config(block_m=128, rows=2))
    assert (geo["tile_w"], geo["images"]) == (128, 1)
    assert geo["grid"][0] == 2 * 3 * 2  # images × row blocks (5 rows by 2) × column tiles (150 by 128)


@pytest.mark.parametrize("pad_begin, pad_end", [((1, 1), (1, 1)), ((0, 2), (2, 0))])
def test_backward_data_walks_dy_into_dx_with_the_flipped_pads(pad_begin, pad_end):
    prob = _problem("bwd_data", input_size=(9, 11), pad_begin=pad_begin, pad_end=pad_end)
    geo = walk_geometry(prob, _config(Direction.BACKWARD_DATA))
    assert (geo["src_h"], geo["src_w"]) == prob.output_size and (geo["dst_h"], geo["dst_w"]) == prob.input_size
    assert (geo["pad_h"], geo["pad_w"]) == (2 - pad_begin[0], 2 - pad_begin[1])
    # the walk reduces over the K/G output channels and writes the C/G input channels
    assert (geo["gc"], geo["gk"], geo["src_c"], geo["dst_c"]) == (32, 16, 256, 128)


def test_tiles_up_to_32x32_channels_hold_their_weights():
    assert holds_weights(_config(side=16)) and holds_weights(_config(side=32))
    assert not holds_weights(_config(side=64))


# ---- backward-weight (native/kernels/gwalk_geometry.py) --------------------------------------------------------

def _weight_config(side=32, lanes=64, rows=4, split_k=16, merge=4) -> KernelConfig:
    return KernelConfig(Direction.BACKWARD_WEIGHT, DType.BF16, 2, Family.GWALK, side, side, lanes, 4, 1, rows,
                        split_k, merge, 8)


def test_backward_weight_lanes_are_input_columns_of_several_images():
    from tiledispatch.native.kernels.gwalk_geometry import weight_walk_geometry

    # 7x7 input, pads 1: the lanes run over the 7 input columns (padding columns add nothing), 9 images per tile
    geo = weight_walk_geometry(_problem("bwd_weight"), _weight_config())
    assert (geo["tile_w"], geo["images"]) == (7, 9)
    assert geo["units"] == 4 * 2 * 1  # 32 images by 9, 7 output rows by 4, one column tile
    assert geo["lanes_per_split"] == 1 * 4 * 64  # 8 units over 16 splits: at most one walk of 4 rows each
    assert geo["grid"] == (16, 8, 1)  # splits x blocks of 4 of the 32 groups
    assert (geo["gc"], geo["gk"]) == (16, 32)  # merged C/G = 4 and K/G = 8


def test_backward_weight_columns_wider_than_the_lanes_split_into_tiles():
    from tiledispatch.native.kernels.gwalk_geometry import weight_walk_geometry

    # input 150 wide, stride 1 pad 0: output 148 wide, but the lanes cover the 150 input columns
    prob = _problem("bwd_weight", batch=2, input_size=(5, 150), pad_begin=(0, 0), pad_end=(0, 0))
    geo = weight_walk_geometry(prob, _weight_config(lanes=128, rows=2, split_k=8))
    assert (geo["tile_w"], geo["images"]) == (128, 1)
    assert geo["units"] == 2 * 2 * 2  # images x output-row walks (3 rows by 2) x column tiles (150 by 128)
    assert geo["lanes_per_split"] == 1 * 2 * 128


@pytest.mark.parametrize("in_w, lanes, width", [(7, 64, 8), (14, 64, 16), (16, 64, 16), (28, 64, 32), (56, 64, 64),
                                                (150, 64, 64), (1, 32, 8), (20, 32, 32), (95, 128, 128)])
def test_tma_walks_box_the_next_power_of_two_columns(in_w, lanes, width):
    from tiledispatch.native.kernels.gwalk_geometry import tma_tile_width, tma_tile_widths

    assert tma_tile_width(in_w, lanes) == width
    assert width in tma_tile_widths(lanes)  # a compiled program exists for every width a launch can ask for


def test_tma_walk_programs_cover_each_box_width_once():
    from tiledispatch.native.kernels.gwalk_geometry import tma_tile_widths

    assert tma_tile_widths(64) == (8, 16, 32, 64)
    assert tma_tile_widths(32) == (8, 16, 32)


def test_tma_walk_geometry_pads_the_columns_to_the_box():
    import dataclasses

    from tiledispatch.native.kernels.gwalk_geometry import weight_walk_geometry

    tma = dataclasses.replace(_weight_config(), num_stages=2)
    # 7 input columns in boxes of 8 (the TMA unit zero-fills column 7), 8 images per 64 lanes
    geo = weight_walk_geometry(_problem("bwd_weight"), tma)
    assert (geo["tile_w"], geo["images"]) == (8, 8)
    assert geo["units"] == 4 * 2 * 1  # 32 images by 8, 7 output rows by 4, one column tile
    # 150 columns in boxes of 64: three column tiles, as the pointer walk's 64-lane tiles
    wide = _problem("bwd_weight", batch=2, input_size=(5, 150), pad_begin=(0, 0), pad_end=(0, 0))
    assert weight_walk_geometry(wide, tma)["units"] == 2 * 1 * 3
