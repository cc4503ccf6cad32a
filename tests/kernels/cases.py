"""Small problems and kernel configs shared by the interpreter and GPU kernel tests."""

from __future__ import annotations

import dataclasses
import itertools

from tiledispatch.native.configs import Family, KernelConfig
from tiledispatch.native.problem import ConvProblem, Direction, DType

# (label, problem fields without direction/dtype); odd channel counts, strides, dilations and
# asymmetric pads on purpose. Batches are large enough that backward-weight split-K 4 has a step for every
# split (forward / backward-data split 4 leaves some splits of the short reductions without one: on purpose).
SHAPES_2D = {
    "grouped_odd": dict(batch=6, groups=3, in_channels=6, out_channels=9, input_size=(5, 6), filter_size=(3, 2),
                        stride=(2, 1), dilation=(1, 2), pad_begin=(1, 0), pad_end=(0, 2)),
    "stride3": dict(batch=6, groups=2, in_channels=4, out_channels=6, input_size=(8, 7), filter_size=(3, 3),
                    stride=(3, 2), dilation=(1, 1), pad_begin=(1, 2), pad_end=(2, 0)),
    "depthwise": dict(batch=2, groups=8, in_channels=8, out_channels=8, input_size=(6, 5), filter_size=(3, 3),
                      stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1), pad_end=(1, 1)),
    "dw_multiplier": dict(batch=6, groups=5, in_channels=5, out_channels=10, input_size=(5, 7), filter_size=(5, 3),
                          stride=(2, 2), dilation=(1, 1), pad_begin=(2, 1), pad_end=(2, 1)),
    # Depthwise with 12 channels (a partial 8-channel block), stride, dilation and asymmetric pads;
    # 3 output lines per image, so 2-line blocks cross images.
    "depthwise_odd": dict(batch=3, groups=12, in_channels=12, out_channels=12, input_size=(7, 9), filter_size=(3, 5),
                          stride=(2, 1), dilation=(1, 2), pad_begin=(1, 3), pad_end=(0, 2)),
    "depthwise_7x7": dict(batch=3, groups=12, in_channels=12, out_channels=12, input_size=(9, 11),
                          filter_size=(7, 7), stride=(2, 2), dilation=(1, 1), pad_begin=(3, 2), pad_end=(3, 4)),
    "aligned_1x1": dict(batch=4, groups=2, in_channels=32, out_channels=16, input_size=(4, 5), filter_size=(1, 1),
                        stride=(1, 1), dilation=(1, 1), pad_begin=(0, 0), pad_end=(0, 0)),
    # Channel padding (pad_channels): C/G 13 and K/G 10 padded to 16 (1.97x the work, under the 2x limit), strided,
    # dilated, asymmetric pads.
    "padded_grouped": dict(batch=6, groups=2, in_channels=26, out_channels=20, input_size=(5, 6), filter_size=(3, 2),
                           stride=(2, 1), dilation=(1, 2), pad_begin=(1, 0), pad_end=(0, 2)),
    # Group padding (pad_channels on C/G = 1): 13 depthwise channels padded to 16 groups, strided, dilated,
    # asymmetric pads, a filter 5 wide (the tap rows of 8); a multiplier (K/G 2) on 7 groups padded to 8.
    "padded_depthwise": dict(batch=3, groups=13, in_channels=13, out_channels=13, input_size=(7, 9),
                             filter_size=(3, 5), stride=(2, 1), dilation=(1, 2), pad_begin=(1, 3), pad_end=(0, 2)),
    "padded_multiplier": dict(batch=3, groups=7, in_channels=7, out_channels=14, input_size=(8, 9),
                              filter_size=(3, 3), stride=(1, 2), dilation=(1, 1), pad_begin=(1, 1), pad_end=(2, 0)),
    # Channel padding (pad_channels): C/G 19 and K/G 8 (only the input runs and the weight are padded), 1x1.
    "odd_1x1": dict(batch=3, groups=2, in_channels=38, out_channels=16, input_size=(4, 5), filter_size=(1, 1),
                    stride=(1, 1), dilation=(1, 1), pad_begin=(0, 0), pad_end=(0, 0)),
    # 4 channels per group: only the merged runs are 8-aligned (gmerge v8); 6 groups leave a
    # partial last block when 4 are merged.
    "small_groups": dict(batch=6, groups=6, in_channels=24, out_channels=24, input_size=(5, 6), filter_size=(3, 3),
                         stride=(2, 1), dilation=(1, 1), pad_begin=(1, 1), pad_end=(0, 1)),
    # Stride 1 (tma), 16 input and 32 output channels per group (the reduction of either data
    # direction splits into 16-channel blocks), dilation and asymmetric pads.
    "stride1_grouped": dict(batch=2, groups=2, in_channels=32, out_channels=64, input_size=(5, 6),
                            filter_size=(3, 2), stride=(1, 1), dilation=(1, 2), pad_begin=(1, 0), pad_end=(0, 2)),
    # dwroll: 24 channels (a partial 16-channel block), strided and dilated columns, 5 filter rows
    # (forward and backward-weight; backward-data needs stride 1).
    "dwroll_strided": dict(batch=3, groups=24, in_channels=24, out_channels=24, input_size=(9, 11),
                           filter_size=(5, 3), stride=(1, 2), dilation=(1, 2), pad_begin=(2, 3), pad_end=(1, 0)),
    # Stride 1 with a top pad past the filter (backward-data's flipped pad is negative), a 7x5 filter
    # with dilated columns, 4 rows per image (a row chunk shorter than the filter).
    "dwroll_stride1": dict(batch=2, groups=16, in_channels=16, out_channels=16, input_size=(4, 13),
                           filter_size=(7, 5), stride=(1, 1), dilation=(1, 2), pad_begin=(8, 1), pad_end=(0, 4)),
    # gwalk: 4 channels per group (merged runs 8-aligned from merge 2), 6 groups (merge 4 leaves a partial
    # last block), asymmetric pads, output 4 wide (several images per program).
    "walk_grouped": dict(batch=3, groups=6, in_channels=24, out_channels=24, input_size=(7, 5), filter_size=(3, 3),
                         stride=(1, 1), dilation=(1, 1), pad_begin=(1, 0), pad_end=(2, 1)),
    # gwalk: C/G 8, K/G 16, output 19 wide (two column tiles of 16), 5 output rows (a partial row block).
    "walk_wide": dict(batch=2, groups=2, in_channels=16, out_channels=32, input_size=(5, 19), filter_size=(3, 3),
                      stride=(1, 1), dilation=(1, 1), pad_begin=(1, 1), pad_end=(1, 1)),
    # gwalk backward-weight walking one row: strides and dilations differing per axis, asymmetric pads.
    "walk_strided": dict(batch=3, groups=6, in_channels=24, out_channels=24, input_size=(9, 11), filter_size=(3, 3),
                         stride=(2, 1), dilation=(1, 3), pad_begin=(0, 2), pad_end=(1, 3)),
    # dwrow: a 7x7 filter with dilated rows and strided columns, asymmetric pads, 16 channels.
    "dwrow_7x7": dict(batch=3, groups=16, in_channels=16, out_channels=16, input_size=(13, 11), filter_size=(7, 7),
                      stride=(1, 2), dilation=(2, 1), pad_begin=(3, 2), pad_end=(4, 4)),
    # dwrun: 12 channels (no 8-aligned vector), a 7x5 filter, asymmetric pads (the top one past the filter's
    # half), 13 output columns (a partial strip and a partial run).
    "dwrun_7x5": dict(batch=3, groups=12, in_channels=12, out_channels=12, input_size=(9, 13), filter_size=(7, 5),
                      stride=(1, 1), dilation=(1, 1), pad_begin=(4, 1), pad_end=(2, 3)),
    # No padding: the forward tma kernel reads the input in place (no padded copy).
    "stride1_valid": dict(batch=2, groups=1, in_channels=32, out_channels=16, input_size=(4, 5), filter_size=(2, 2),
                          stride=(1, 1), dilation=(1, 1), pad_begin=(0, 0), pad_end=(0, 0)),
}
SHAPES_3D = {
    "grouped_odd": dict(batch=3, groups=2, in_channels=6, out_channels=10, input_size=(3, 4, 5),
                        filter_size=(2, 3, 3), stride=(1, 2, 1), dilation=(2, 1, 1), pad_begin=(1, 1, 0),
                        pad_end=(1, 0, 1)),
    "depthwise": dict(batch=2, groups=8, in_channels=8, out_channels=8, input_size=(4, 4, 5), filter_size=(3, 3, 3),
                      stride=(2, 1, 1), dilation=(1, 1, 1), pad_begin=(1, 1, 1), pad_end=(1, 1, 1)),
    "aligned_1x1": dict(batch=3, groups=2, in_channels=16, out_channels=16, input_size=(2, 3, 4),
                        filter_size=(1, 1, 1), stride=(1, 1, 1), dilation=(1, 1, 1), pad_begin=(0, 0, 0),
                        pad_end=(0, 0, 0)),
    "small_groups": dict(batch=3, groups=6, in_channels=24, out_channels=24, input_size=(3, 4, 5),
                         filter_size=(3, 3, 3), stride=(1, 1, 2), dilation=(1, 1, 1), pad_begin=(1, 1, 1),
                         pad_end=(1, 1, 0)),
    # Depthwise multiplier 6 (direct group_m 4: a full j chunk and a partial one) on 9 groups (2 blocks of the small
    # direct tile, the last partial), strided, dilated, asymmetric pads.
    "padded_grouped": dict(batch=4, groups=1, in_channels=13, out_channels=10, input_size=(3, 4, 5),
                           filter_size=(2, 3, 3), stride=(1, 2, 1), dilation=(2, 1, 1), pad_begin=(1, 1, 0),
                           pad_end=(0, 1, 2)),
    # Group padding: 5 depthwise channels padded to 8 groups (1.6x the work), strided depth, asymmetric pads.
    "padded_depthwise": dict(batch=2, groups=5, in_channels=5, out_channels=5, input_size=(4, 5, 6),
                             filter_size=(3, 3, 3), stride=(2, 1, 1), dilation=(1, 1, 2), pad_begin=(1, 1, 2),
                             pad_end=(1, 0, 1)),
    "dw_multiplier": dict(batch=2, groups=9, in_channels=9, out_channels=54, input_size=(3, 7, 5),
                          filter_size=(2, 3, 3), stride=(1, 2, 1), dilation=(2, 1, 1), pad_begin=(1, 1, 0),
                          pad_end=(0, 1, 2)),
    "dwroll": dict(batch=2, groups=16, in_channels=16, out_channels=16, input_size=(3, 5, 6), filter_size=(3, 3, 3),
                   stride=(1, 1, 1), dilation=(2, 1, 2), pad_begin=(1, 1, 2), pad_end=(2, 1, 0)),
    # dwrun: depth strided and dilated (rows and columns at stride 1), 12 channels, asymmetric pads.
    "dwrun": dict(batch=2, groups=12, in_channels=12, out_channels=12, input_size=(5, 4, 6), filter_size=(3, 3, 3),
                  stride=(2, 1, 1), dilation=(2, 1, 1), pad_begin=(1, 1, 0), pad_end=(2, 1, 2)),
    "stride1_grouped": dict(batch=2, groups=2, in_channels=32, out_channels=32, input_size=(3, 4, 5),
                            filter_size=(2, 3, 3), stride=(1, 1, 1), dilation=(2, 1, 1), pad_begin=(1, 1, 0),
                            pad_end=(1, 0, 1)),
    # Planar (ConvProblem.planar), for the 2D kernels: a 1-deep filter over 3 depths (dilated depth: idle),
    # depthwise, 16 channels (N·D = 6 images); odd channels (what the 3D vec-1 direct kernels ran slowly) with
    # asymmetric pads; a 3x1x1 temporal filter, grouped with odd counts, depth stride 2, asymmetric depth pads.
    "planar_spatial_depthwise": dict(batch=2, groups=16, in_channels=16, out_channels=16, input_size=(3, 7, 9),
                                     filter_size=(1, 3, 3), stride=(1, 1, 1), dilation=(2, 1, 1),
                                     pad_begin=(0, 1, 1), pad_end=(0, 1, 1)),
    "planar_spatial_odd": dict(batch=3, groups=5, in_channels=5, out_channels=5, input_size=(2, 6, 7),
                               filter_size=(1, 3, 3), stride=(1, 1, 1), dilation=(1, 1, 1), pad_begin=(0, 1, 0),
                               pad_end=(0, 0, 1)),
    "planar_temporal_grouped": dict(batch=2, groups=2, in_channels=6, out_channels=4, input_size=(7, 3, 4),
                                    filter_size=(3, 1, 1), stride=(2, 1, 1), dilation=(1, 1, 1), pad_begin=(1, 0, 0),
                                    pad_end=(0, 0, 0)),
}

# Which shapes each family is exercised on (each must be supported by the family).
FAMILY_SHAPES = {
    Family.IGEMM: ("grouped_odd", "stride3", "depthwise", "padded_grouped"),
    Family.GMERGE: ("grouped_odd", "dw_multiplier", "depthwise", "small_groups"),
    Family.GEMM1X1: ("aligned_1x1", "odd_1x1"),
    Family.DIRECT: ("depthwise", "dw_multiplier", "grouped_odd", "stride3", "depthwise_odd", "depthwise_7x7",
                    "padded_depthwise", "padded_multiplier"),
    Family.TMA: ("stride1_grouped", "stride1_valid"),
    Family.DWROLL: ("depthwise", "dwroll_strided", "dwroll_stride1", "dwroll"),
    Family.GWALK: ("depthwise", "walk_grouped", "walk_wide", "walk_strided"),
    Family.DWROW: ("depthwise", "dwrow_7x7", "dwroll_strided", "dwroll_stride1", "dwroll", "dw_multiplier",
                   "depthwise_odd", "planar_spatial_odd", "padded_depthwise"),
    Family.DWRUN: ("depthwise", "dwrun_7x5", "dwrun"),
}


#: Families whose forward and backward-data kernels split the reduction (split_k > 1) too.
SPLIT_DATA_FAMILIES = (Family.IGEMM, Family.GMERGE, Family.GEMM1X1)


def problem(direction: Direction, dtype: DType, ndim: int, label: str) -> ConvProblem:
    shapes = SHAPES_2D if ndim == 2 else SHAPES_3D
    return ConvProblem(direction=direction, dtype=dtype, **shapes[label])


def small_config(direction: Direction, dtype: DType, ndim: int, family: Family, *, num_warps: int = 4,
                 split_k: int = 1, merge: int = 2, vec: int = 1, index64: bool = False,
                 taps_w: int = 1, stages: int = 1, wide: bool = False, rows: int = 2,
                 held: int = 1, multiplier: int = 1, scalar: bool = False, pad: bool = False) -> KernelConfig:
    """Small tiles, so tiny problems still cover several tiles and the masked edges. ``taps_w``: the
    direct block_k (4/8: the depthwise tap-row programs) or the dwroll filter height; ``wide``: a dwroll
    tile of 16 elements per thread (2D 3x3: the walk with tap-major weights instead of held ones), a
    gwalk tile of 64x64 channels (weights loaded per tap instead of held); ``rows``: gwalk's output rows;
    ``held``: the output rows a dwroll forward / backward-data program holds (group_m; 1 = the rolling walk);
    ``multiplier``: a direct forward kernel's group_m (2 / 4: the depthwise-multiplier binary); ``scalar``: dwrow's
    scalar binary (vec 1: any channel count, depthwise multipliers);
    dwrun: ``taps_w`` its filter height, ``wide`` 4 runs of 5 columns instead of 2 of 3."""
    if family is Family.GWALK and direction is Direction.BACKWARD_WEIGHT:  # wide: 32x32 channels, 32 lanes
        side = 32 if wide else 16  # stages 2, 3: the TMA walk
        return KernelConfig(direction, dtype, ndim, family, side, side, side, num_warps, stages, rows, split_k, merge,
                            8, index64)
    if family is Family.GWALK:
        side = 64 if wide else 16
        return KernelConfig(direction, dtype, ndim, family, 32 if wide else 16, side, side, num_warps, 1, rows, 1,
                            merge, 8, index64)
    if family is Family.DWROLL:  # one warp: 4 elements per thread of an 8x16 tile (16 of 16x32)
        block_w, block_n = (16, 32) if wide else (8, 16)
        return KernelConfig(direction, dtype, ndim, family, block_w, block_n, taps_w, 1, stages, held, split_k, 1, 8,
                            index64)
    if family is Family.DWROW:  # taps_w: the filter columns unrolled
        block_w, block_n = (16, 32) if wide else (8, 16)
        return KernelConfig(direction, dtype, ndim, family, block_w, block_n, taps_w, 1, stages, 1, split_k, 1,
                            1 if scalar else 8, index64, pad)
    if family is Family.DWRUN:  # one warp: 2 runs of 3 columns x 16 channels (4 runs of 5 x 8 channels); vec 2
        run, runs, block_n = (5, 4, 8) if wide else (3, 2, 16)  # or 4: that many channels a thread, vec x the channels
        lanes = vec if vec in (2, 4) else 1
        return KernelConfig(direction, dtype, ndim, family, run, block_n * lanes, taps_w, 1, stages, runs, split_k, 1,
                            lanes, index64)
    if family is Family.DIRECT:
        return KernelConfig(direction, dtype, ndim, family, 16, 8, taps_w, num_warps, 1, multiplier, split_k, 1,
                            8 if pad else vec, index64, pad)
    return KernelConfig(direction, dtype, ndim, family, 32, 16, 16, num_warps, 2, 8, split_k,
                        merge if family is Family.GMERGE else 1, 8 if pad else vec, index64, pad)


def cases(ndims=(2, 3)):
    """(problem label, family, config kwargs) for every family × direction × ndim worth testing."""
    out = []
    for ndim in ndims:
        available = SHAPES_2D if ndim == 2 else SHAPES_3D
        for family, labels in FAMILY_SHAPES.items():
            if family is Family.GWALK and ndim != 2:
                continue  # gwalk kernels are 2D
            for label in labels:
                if label not in available:
                    continue
                for direction in family.directions:
                    if family is Family.DWROLL and direction is Direction.BACKWARD_DATA \
                            and any(s != 1 for s in available[label]["stride"]):
                        continue  # backward-data dwroll kernels need stride 1
                    if family is Family.DWRUN and direction is not Direction.BACKWARD_WEIGHT and ndim == 3:
                        continue  # dwrun's forward / backward-data kernels are 2D
                    if label == "dw_multiplier" and ndim == 3 and direction is not Direction.FORWARD \
                            and family is not Family.DWROW:
                        continue  # the 3D shape is the forward multiplier binary's (2D covers the backward directions)
                    if label == "walk_strided" and direction is not Direction.BACKWARD_WEIGHT:
                        continue  # only backward-weight walks of one row take strides and dilations
                    variants = [dict()]
                    if family is Family.DWROLL:
                        height = available[label]["filter_size"][-2]
                        variants = [dict(taps_w=height), dict(taps_w=height, stages=2)]  # plain, loads ahead
                        if ndim == 2 and height == 3 and direction is not Direction.BACKWARD_WEIGHT:
                            # 8x16 holds the weights (dwroll_tiling.hoists_weights); 16x32 does not
                            variants += [dict(v, wide=True) for v in variants]
                        if direction is not Direction.BACKWARD_WEIGHT:  # held rows: 2, and 4 on the wide tile
                            variants += [dict(taps_w=height, held=2), dict(taps_w=height, held=4, wide=True)]
                    if family is Family.DWROW:  # exactly the filter's width and wider (masked columns)
                        width = available[label]["filter_size"][-1]
                        variants = [dict(taps_w=width), dict(taps_w=7, stages=2, wide=True)]
                        shape = available[label]
                        if label == "padded_depthwise":  # the v8 binary on 8-aligned padded groups
                            variants = [dict(v, pad=True) for v in variants]
                        elif shape["out_channels"] != shape["in_channels"] or shape["in_channels"] % 8:
                            variants = [dict(v, scalar=True) for v in variants]  # only the scalar binary runs it
                        elif label == "depthwise":  # the scalar binary on aligned channels too (K/G = 1)
                            variants.append(dict(taps_w=width, stages=2, scalar=True))
                    if family is Family.DWRUN:  # the filter's height; plain, loading a step ahead, channel pairs
                        height = available[label]["filter_size"][-2]
                        variants = [dict(taps_w=height), dict(taps_w=height, stages=2, wide=True),
                                    dict(taps_w=height, stages=2, vec=2)]
                        if direction is not Direction.BACKWARD_WEIGHT:  # rows through shared memory; 4 channels
                            variants += [dict(taps_w=height, stages=3, vec=2), dict(taps_w=height, stages=4, vec=4)]
                    if family in (Family.GEMM1X1, Family.TMA):
                        variants = [dict(pad=True) if label == "odd_1x1" else dict(vec=8)]
                    if family is Family.IGEMM and label == "grouped_odd":
                        variants.append(dict(index64=True))
                    if label == "padded_grouped":  # every operand padded (C/G and K/G unaligned)
                        variants = [dict(pad=True)]
                    if family is Family.GWALK:  # merged runs 8-aligned; 1, 2 and 4 rows; held and loaded weights
                        variants = {"depthwise": [dict(merge=8, rows=4)],
                                    "walk_grouped": [dict(merge=2, rows=1), dict(merge=4, rows=2),
                                                     dict(merge=4, rows=4, wide=True)],
                                    "walk_wide": [dict(merge=1, rows=4), dict(merge=2, rows=2, wide=True)],
                                    "walk_strided": [dict(merge=4, rows=1), dict(merge=2, rows=1, wide=True)]}[label]
                        if direction is Direction.BACKWARD_WEIGHT:  # the TMA walks (stride 1): 1-4 rows, 2-3 stages
                            variants += {"walk_grouped": [dict(merge=2, rows=4, stages=2),
                                                          dict(merge=2, rows=1, stages=2),
                                                          dict(merge=4, rows=2, stages=3, wide=True)],
                                         "walk_wide": [dict(merge=1, rows=4, stages=2),
                                                       dict(merge=2, rows=2, stages=3, wide=True)]}.get(label, [])
                    if family is Family.GMERGE and label == "dw_multiplier":
                        variants = [dict(merge=4)]  # 5 groups: the last block is partial
                    if family is Family.GMERGE and label == "small_groups":
                        variants = [dict(merge=2, vec=8), dict(merge=4, vec=8)]
                    if family is Family.DIRECT and label.startswith("depthwise"):
                        # tap rows: 4 columns unrolled where the filter is narrow enough, and 8
                        variants += [dict(taps_w=8)] + ([dict(taps_w=4)] if label == "depthwise" else [])
                    if family is Family.DIRECT and label.startswith("padded_"):  # the v8 binaries on padded groups
                        variants = [dict(pad=True)] + ([dict(pad=True, taps_w=8)] if label == "padded_depthwise" else
                                                       [dict(pad=True, multiplier=2)] if direction is Direction.FORWARD
                                                       else [])
                    if family is Family.DIRECT and label == "dw_multiplier" and direction is Direction.FORWARD:
                        # the multiplier binary (3D K/G = 6: two j chunks)
                        variants += [dict(multiplier=2), dict(multiplier=4), dict(multiplier=4, index64=True)]
                    if direction is Direction.BACKWARD_WEIGHT or family in SPLIT_DATA_FAMILIES:
                        variants += [dict(v, split_k=4) for v in variants]
                    if family is Family.DWROW and label == "dwroll_strided":  # far more splits than items: zeros
                        variants.append(dict(taps_w=5, stages=2, split_k=128))
                    if family is Family.DWRUN and direction is Direction.BACKWARD_WEIGHT and label == "dwrun_7x5":
                        # far more splits than items: zeros
                        variants.append(dict(taps_w=7, stages=2, split_k=128))
                    if family is Family.DWROLL and direction is Direction.BACKWARD_WEIGHT and label == "dwroll_stride1":
                        # default's largest split: far more splits than work items, so most are empty (zeros)
                        variants.append(dict(taps_w=available[label]["filter_size"][-2], stages=2, split_k=128))
                    for variant in variants:
                        out.append((ndim, label, family, direction, variant))
    return out


def case_id(case) -> str:
    ndim, label, family, direction, variant = case
    extra = "-".join(f"{k}{int(v)}" for k, v in sorted(variant.items()))
    return f"{direction.value}-{ndim}d-{family.value}-{label}" + (f"-{extra}" if extra else "")


def with_dtype(config: KernelConfig, dtype: DType) -> KernelConfig:
    return dataclasses.replace(config, dtype=dtype)


def gpu_config(direction: Direction, dtype: DType, ndim: int, family: Family, num_warps: int, *,
               split_k: int = 1, vec: int = 1) -> KernelConfig:
    """Realistic tiles for the GPU tests: a 4-warp and an 8-warp shape per family."""
    if family is Family.DIRECT:
        block_m, block_n = (64, 32) if num_warps == 4 else (128, 32)
        return KernelConfig(direction, dtype, ndim, family, block_m, block_n, 1, num_warps, 1, 1, split_k, 1, vec)
    # Unaligned (v1) tiles stay small and unpipelined, as in the default rule set (no spills).
    if vec == 1:
        block_m, block_n, block_k, stages = (64, 32, 32, 2) if num_warps == 4 else (128, 64, 32, 2)
    elif family is Family.GMERGE:
        block_m, block_n, block_k, stages = (64, 32, 32, 4) if num_warps == 4 else (128, 64, 32, 4)
    else:
        block_m, block_n, block_k, stages = (64, 64, 32, 4) if num_warps == 4 else (128, 128, 64, 3)
    return KernelConfig(direction, dtype, ndim, family, block_m, block_n, block_k, num_warps, stages, 8, split_k,
                        4 if family is Family.GMERGE else 1, vec)


#: dwroll GPU-test tiles by filter height (forward / backward-data, backward-weight), each plain and
#: with loads one row ahead: spill-free on sm_90.
DWROLL_GPU_TILES = {
    # 3x3: in 2D the 8-element tiles hold the weights (dwroll_tiling.hoists_weights), 64x32 does not
    False: {3: ((16, 64, 4), (32, 64, 8), (64, 32, 4)), 5: ((16, 64, 4), (32, 64, 8)), 7: ((16, 64, 4), (32, 64, 8))},
    True: {3: ((16, 64, 4), (32, 64, 8)), 5: ((16, 32, 4), (32, 32, 8)), 7: ((16, 16, 4), (32, 16, 8))},
}
#: gwalk GPU-test tiles ((block_m, block_n, block_k, warps), rows, merge): default's tiles (spill-free on sm_90),
#: at 1, 2 and 4 rows, merging 1-4 groups.
#: halo GPU-test tiles ((block_m, block_n, block_k), rows walked, merge): default's three channel tiles, short and
#: long walks, walks of 7 and 14 rows, and a 128-row tile (two streams of 64 columns, or four of 32).
HALO_GPU_TILES = (((64, 32, 32), 8, 4), ((64, 16, 16), 4, 2), ((64, 64, 64), 16, 1), ((128, 32, 32), 4, 2),
                  ((64, 32, 32), 7, 2), ((64, 16, 16), 14, 1))
GWALK_GPU_TILES = (((64, 32, 32, 4), 4, 4), ((128, 32, 32, 8), 2, 1), ((64, 16, 16, 4), 1, 2),
                   ((128, 16, 16, 4), 4, 1))
#: gwalk backward-weight GPU-test tiles ((block_m, block_n, block_k, warps), rows, merge, split_k): default's three
#: (4 rows) unsplit and split up to 64 (most splits empty on the small random problems: they write zeros), and
#: default's 1-row walks (any stride and dilation).
GWALK_WEIGHT_GPU_TILES = (((16, 16, 64, 4), 4, 2, 1), ((32, 32, 64, 4), 4, 1, 16), ((32, 32, 128, 8), 4, 2, 64),
                          ((16, 16, 64, 4), 1, 2, 32), ((32, 32, 64, 4), 1, 1, 8))
#: The TMA-fed backward-weight walks ((block_m, block_n, block_k, warps), rows, merge, split_k, stages): default's
#: (16x16, 64 lanes, 2 and 4 rows, 2 stages), 3 stages, a 32x32 tile, a one-row walk and 32 lanes.
GWALK_WEIGHT_TMA_GPU_TILES = (((16, 16, 64, 4), 4, 2, 16, 2), ((16, 16, 64, 4), 2, 4, 1, 2),
                              ((16, 16, 64, 4), 4, 1, 64, 3), ((32, 32, 64, 4), 2, 2, 8, 2),
                              ((16, 16, 64, 4), 1, 2, 4, 2), ((16, 16, 32, 4), 4, 2, 32, 2))
#: Forward / backward-data dwroll tiles holding their output rows ((block_w, block_n, warps), rows held, filter
#: height): default's two 7x7 tiles, and a 3x3 pair at 2 and 8 rows (3D runs them too).
DWROLL_GPU_HELD = (((64, 32, 4), 4, 7), ((16, 32, 4), 4, 7), ((32, 16, 4), 2, 3), ((32, 32, 8), 8, 3))
#: dwrow GPU-test kernels (block_w, block_n, filter columns, warps, num_stages, split_k): unsplit and split up to 128,
#: plain and loading a row ahead, 4 and 8 warps, 3 to 7 columns.
DWROW_GPU_TILES = ((64, 16, 3, 4, 1, 1), (32, 32, 3, 4, 2, 16), (16, 64, 5, 4, 2, 32), (32, 16, 7, 4, 2, 64),
                   (64, 32, 7, 8, 2, 128), (64, 16, 3, 8, 1, 8))
#: dwrow scalar-binary (vec 1) GPU-test kernels, as DWROW_GPU_TILES: 2-4 elements a thread (rules.py), 3 to 7 columns.
DWROW_SCALAR_GPU_TILES = ((8, 64, 3, 8, 1, 1), (8, 32, 3, 4, 2, 16), (4, 64, 5, 4, 2, 32), (8, 64, 7, 8, 2, 64),
                          (16, 64, 3, 8, 2, 128))
#: dwrun GPU-test kernels (run, runs, block_n, filter height, warps, num_stages, split_k): unsplit and split up to 128,
#: plain and loading a step ahead, 1 to 8 warps, runs of 4 to 14 columns, every filter height; under a register
#: budget (dwrun.run_register_budget): backward-weight's 4×16×7 / 4 warps and 7×16×3 / 8 warps, the data directions'
#: 14×16×3 / 4 warps and 8×16×3 / 2 warps; and session 40's one-warp tiles of default (7×7 runs of 3, backward-weight's
#: 3×3 runs of 7 on 16 and 32 channels, 7×7 runs of 7).
DWRUN_GPU_TILES = ((7, 8, 16, 7, 4, 2, 64), (7, 4, 32, 7, 4, 1, 1), (4, 8, 16, 7, 4, 2, 128), (8, 4, 32, 5, 4, 2, 16),
                   (14, 4, 32, 3, 4, 2, 32), (7, 16, 16, 3, 8, 2, 8), (8, 1, 32, 3, 1, 1, 4), (14, 8, 16, 3, 4, 1, 16),
                   (8, 4, 16, 3, 2, 2, 16), (3, 1, 32, 7, 1, 2, 1), (7, 2, 16, 3, 1, 1, 64), (7, 1, 32, 3, 1, 2, 128),
                   (7, 2, 16, 7, 1, 2, 32))
#: dwrun channel-pair (vec 2) GPU-test kernels, as DWRUN_GPU_TILES (runs · block_n = 64 × warps): 3×3, 5×5, 7×7.
DWRUN_GPU_PAIR_TILES = ((8, 4, 32, 3, 2, 2, 16), (7, 2, 64, 5, 2, 1, 1), (2, 8, 32, 7, 4, 2, 64))
#: dwrun forward / backward-data GPU-test kernels with rows through shared memory (num_stages 3, 4) and two or four
#: channels a thread (run, runs, block_n, filter height, warps, num_stages, vec; runs · block_n = 32 · vec × warps).
DWRUN_GPU_STAGED_TILES = ((4, 4, 32, 3, 2, 3, 2), (4, 4, 64, 3, 2, 4, 4), (7, 16, 16, 3, 4, 4, 2),
                          (4, 8, 64, 3, 4, 3, 4), (2, 4, 64, 5, 2, 3, 4), (2, 8, 32, 7, 4, 3, 2),
                          # session 40's one-warp 3×3 tiles of default
                          (5, 4, 32, 3, 1, 3, 4), (4, 2, 64, 3, 1, 3, 4), (2, 4, 32, 3, 1, 4, 4),
                          (3, 1, 64, 3, 1, 4, 2))
#: Backward-weight dwroll kernels beyond DWROLL_GPU_TILES: default's lean 3x3 tile at its largest split.
DWROLL_GPU_EXTRA_WEIGHT = ((64, 16, 3, 8, 2, 128),)


def gpu_configs(direction: Direction, dtype: DType, ndim: int) -> list[KernelConfig]:
    """Every family × warps (× split-K: backward-weight; 4-warp igemm / gmerge / gemm1x1 of the data
    directions, and :func:`split_data_gpu_configs`) × vec for one direction/dtype/ndim."""
    out = []
    for family in Family:
        if direction not in family.directions:
            continue
        if family is Family.DWROLL:  # each filter height, a 4-warp and an 8-warp tile
            for height, tiles in DWROLL_GPU_TILES[direction is Direction.BACKWARD_WEIGHT].items():
                for (block_w, block_n, num_warps), stages in itertools.product(tiles, (1, 2)):
                    for split_k in ((1, 16) if direction is Direction.BACKWARD_WEIGHT else (1,)):
                        out.append(KernelConfig(direction, dtype, ndim, family, block_w, block_n, height, num_warps,
                                                stages, 1, split_k, 1, 8))
            if direction is Direction.BACKWARD_WEIGHT:
                out += [KernelConfig(direction, dtype, ndim, family, block_w, block_n, height, num_warps, stages, 1,
                                     split_k, 1, 8)
                        for block_w, block_n, height, num_warps, stages, split_k in DWROLL_GPU_EXTRA_WEIGHT]
            else:
                out += [KernelConfig(direction, dtype, ndim, family, block_w, block_n, height, num_warps, 1, held, 1, 1,
                                     8) for (block_w, block_n, num_warps), held, height in DWROLL_GPU_HELD]
            continue
        if family is Family.DWROW:  # both binaries: v8 and the scalar one
            out += [KernelConfig(direction, dtype, ndim, family, block_w, block_n, width, warps, stages, 1, split_k, 1,
                                 vec) for tiles, vec in ((DWROW_GPU_TILES, 8), (DWROW_SCALAR_GPU_TILES, 1))
                    for block_w, block_n, width, warps, stages, split_k in tiles]
            continue
        if family is Family.DWRUN:  # forward / backward-data: 2D, unsplit
            if direction is Direction.BACKWARD_WEIGHT:
                out += [KernelConfig(direction, dtype, ndim, family, run, block_n, height, warps, stages, runs, split_k,
                                     1, vec) for tiles, vec in ((DWRUN_GPU_TILES, 1), (DWRUN_GPU_PAIR_TILES, 2))
                        for run, runs, block_n, height, warps, stages, split_k in tiles]
            elif ndim == 2:
                out += [KernelConfig(direction, dtype, ndim, family, run, block_n, height, warps, stages, runs, 1, 1,
                                     vec) for tiles, vec in ((DWRUN_GPU_TILES, 1), (DWRUN_GPU_PAIR_TILES, 2))
                        for run, runs, block_n, height, warps, stages, _ in tiles]
                out += [KernelConfig(direction, dtype, ndim, family, run, block_n, height, warps, stages, runs, 1, 1,
                                     vec) for run, runs, block_n, height, warps, stages, vec in DWRUN_GPU_STAGED_TILES]
            continue
        if family is Family.GWALK:  # 2D bf16/fp16: held (32x32) and loaded (64x64) weights, 4 and 8 warps
            if ndim == 2 and dtype is not DType.FP32 and direction is Direction.BACKWARD_WEIGHT:
                out += [KernelConfig(direction, dtype, ndim, family, *tile, 1, rows, split_k, merge, 8)
                        for tile, rows, merge, split_k in GWALK_WEIGHT_GPU_TILES]
                out += [KernelConfig(direction, dtype, ndim, family, *tile, stages, rows, split_k, merge, 8)
                        for tile, rows, merge, split_k, stages in GWALK_WEIGHT_TMA_GPU_TILES]
            elif ndim == 2 and dtype is not DType.FP32:
                out += [KernelConfig(direction, dtype, ndim, family, *tile, 1, rows, 1, merge, 8)
                        for tile, rows, merge in GWALK_GPU_TILES]
            continue
        if family is Family.HALO:  # 2D bf16/fp16 forward / backward-data (Gluon: GPU only)
            if ndim == 2 and dtype is not DType.FP32:
                out += [KernelConfig(direction, dtype, ndim, family, *tile, 4, 1, rows, 1, merge, 8)
                        for tile, rows, merge in HALO_GPU_TILES]
            continue
        if family is Family.TMA:  # aligned only; bf16/fp16
            if dtype is not DType.FP32:
                out += [KernelConfig(direction, dtype, ndim, family, 64, 64, 32, 4, 4, 8, 1, 1, 8),
                        KernelConfig(direction, dtype, ndim, family, 128, 128, 64, 8, 4, 8, 1, 1, 8)]
            continue
        for num_warps in (4, 8):
            # Data directions: split-K on the 4-warp tiles (the small-M case it is for).
            splits = (1, 4) if direction is Direction.BACKWARD_WEIGHT or (
                num_warps == 4 and family in SPLIT_DATA_FAMILIES) else (1,)
            for split_k in splits:
                for vec in (1, 8):
                    config = gpu_config(direction, dtype, ndim, family, num_warps, split_k=split_k, vec=vec)
                    out.append(config)
                    if vec == 8 and family in (Family.IGEMM, Family.GEMM1X1):  # the tile on channel-padded copies
                        out.append(dataclasses.replace(config, pad_channels=True))
    # The depthwise tap-row programs (direct block_k 8: filters up to 8 wide), both split-K paths.
    tile = (32, 32) if direction is Direction.BACKWARD_WEIGHT else (64, 32)
    for split_k in ((1, 8) if direction is Direction.BACKWARD_WEIGHT else (1,)):
        out.append(KernelConfig(direction, dtype, ndim, Family.DIRECT, *tile, 8, 4, 1, 1, split_k, 1, 8))
    # Group padding (pad_channels on C/G = 1): the tap-row program and the plain v8 one on padded groups; the v8
    # dwrow tiles likewise (backward-weight).
    for split_k in ((1, 8) if direction is Direction.BACKWARD_WEIGHT else (1,)):
        out += [KernelConfig(direction, dtype, ndim, Family.DIRECT, *tile, taps_w, 4, 1, 1, split_k, 1, 8, False, True)
                for taps_w in (1, 8)]
    if direction is Direction.BACKWARD_WEIGHT:
        out += [KernelConfig(direction, dtype, ndim, Family.DWROW, block_w, block_n, width, warps, stages, 1, split_k,
                             1, 8, False, True)
                for block_w, block_n, width, warps, stages, split_k in DWROW_GPU_TILES[1:4]]
    # Forward: the depthwise-multiplier binary (direct group_m = J outputs per loaded input), 4 and 8 warps.
    if direction is Direction.FORWARD:
        out += [KernelConfig(direction, dtype, ndim, Family.DIRECT, 64, 32, 1, 4, 1, 4, 1, 1, 1),
                KernelConfig(direction, dtype, ndim, Family.DIRECT, 128, 32, 1, 8, 1, 2, 1, 1, 1)]
    # Backward-weight: the 4-warp tiles that carry ``flat`` (one accumulator per split; igemm_bwd_weight.py)
    # and run it on short splits, ``main`` on long ones.
    if direction is Direction.BACKWARD_WEIGHT and dtype is not DType.FP32:
        out += [KernelConfig(direction, dtype, ndim, family, block_m, block_n, 64, 4, 3, 8, split_k, 1, 8)
                for family in (Family.IGEMM, Family.GEMM1X1) for block_m, block_n in ((64, 128), (128, 64))
                for split_k in (1, 8)]
        # gmerge at default's 64 splits (rules.GMERGE_WEIGHT_LONG_SPLIT; session 40's n143 g4 1x3 tile, and the v1
        # tile of the 3D n3 g13 layer): on the problems long enough for every split to own a step.
        out += [KernelConfig(direction, dtype, ndim, Family.GMERGE, 64, 32, 64, 4, 4, 8, 64, 4, 8),
                KernelConfig(direction, dtype, ndim, Family.GMERGE, 64, 64, 32, 4, 2, 8, 64, 8, 1)]
    # The large tensor-core tiles (fwd / bwd_data, aligned channels), and unpipelined (L1-cached) ones.
    if direction is not Direction.BACKWARD_WEIGHT:
        out += split_data_gpu_configs(direction, dtype, ndim)
        for block_m, block_n in ((128, 256), (256, 128)):
            out.append(KernelConfig(direction, dtype, ndim, Family.IGEMM, block_m, block_n, 64, 8, 3, 8, 1, 1, 8))
        if dtype is not DType.FP32:
            out += [KernelConfig(direction, dtype, ndim, Family.IGEMM, 128, 64, 32, 4, 1, 8, 1, 1, 8),
                    KernelConfig(direction, dtype, ndim, Family.GMERGE, 128, 32, 32, 4, 1, 8, 1, 4, 8)]
    return out


#: Split-K forward / backward-data GPU-test tiles: (block_m, block_n, block_k, split_k), 4 warps, 3 stages,
#: aligned (v8) — the tiles and splits of ``default`` (native/rules.py SPLIT_K_DATA_TILES).
SPLIT_DATA_GPU_TILES = ((32, 32, 64, 16), (64, 32, 64, 8), (64, 64, 64, 4))


def split_data_gpu_configs(direction: Direction, dtype: DType, ndim: int) -> list[KernelConfig]:
    """The split-K forward / backward-data kernels the GPU tests add beyond :func:`gpu_config`'s: the
    default tiles of igemm (and gemm1x1 in 2D), v8, bf16/fp16 (sm_90, triton 3.6: spill-free)."""
    if direction is Direction.BACKWARD_WEIGHT or dtype is DType.FP32:
        return []
    families = (Family.IGEMM, Family.GEMM1X1) if ndim == 2 else (Family.IGEMM,)
    return [KernelConfig(direction, dtype, ndim, family, block_m, block_n, block_k, 4, 3, 8, split_k, 1, 8)
            for family in families for block_m, block_n, block_k, split_k in SPLIT_DATA_GPU_TILES]


# Real (problem key, kernel) pairs that the H200 end-to-end run selected (bench/results/
# 2026-11-22_h200_s3/torch_e2e), one per launch structure: depthwise direct (one program), the
# depthwise tap rows (weight transposition + rows), igemm, gmerge with weight packing (pack + main)
# in both data directions, split-K backward-weight with its reduction, 2D and 3D. Shared by the
# launch-plan tests and bench/launch_overhead.py.
MODEL_CASES = [
    ("fwd_2d_depthwise_direct", "fwd|bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gconv_fwd_bf16_2d_direct_128x32x1_w4_s1_gm1_sk1_mg1_v8_i32"),
    ("fwd_2d_depthwise_taprows", "fwd|bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gconv_fwd_bf16_2d_direct_128x32x8_w4_s1_gm1_sk1_mg1_v8_i32"),
    ("fwd_2d_igemm", "fwd|bf16|2d|n32|g32|c512|k512|in28x28|f3x3|s2x2|d1x1|pb1x1|pe1x1",
     "gconv_fwd_bf16_2d_igemm_128x32x32_w4_s4_gm8_sk1_mg1_v8_i32"),
    ("fwd_2d_gmerge_pack", "fwd|bf16|2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gconv_fwd_bf16_2d_gmerge_128x64x64_w4_s3_gm8_sk1_mg16_v8_i32"),
    ("bwd_data_2d_gmerge_pack", "bwd_data|bf16|2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gconv_bwd_data_bf16_2d_gmerge_128x32x32_w4_s4_gm8_sk1_mg8_v8_i32"),
    ("bwd_data_2d_depthwise_taprows", "bwd_data|bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gconv_bwd_data_bf16_2d_direct_64x32x8_w4_s1_gm1_sk1_mg1_v8_i32"),
    ("bwd_weight_2d_gmerge_splitk", "bwd_weight|bf16|2d|n32|g32|c128|k128|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1",
     "gconv_bwd_weight_bf16_2d_gmerge_64x32x64_w4_s3_gm8_sk16_mg16_v8_i32"),
    ("bwd_weight_2d_depthwise_splitk", "bwd_weight|bf16|2d|n32|g192|c192|k192|in28x28|f3x3|s2x2|d1x1|pb1x1|pe1x1",
     "gconv_bwd_weight_bf16_2d_direct_128x16x1_w4_s1_gm1_sk32_mg1_v8_i32"),
    ("fwd_3d_depthwise_direct", "fwd|bf16|3d|n32|g96|c96|k96|in8x28x28|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1",
     "gconv_fwd_bf16_3d_direct_64x32x1_w4_s1_gm1_sk1_mg1_v8_i32"),
    ("bwd_data_3d_depthwise_direct", "bwd_data|bf16|3d|n32|g96|c96|k96|in8x7x7|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1",
     "gconv_bwd_data_bf16_3d_direct_128x16x1_w4_s1_gm1_sk1_mg1_v8_i32"),
    ("bwd_weight_3d_direct_splitk", "bwd_weight|bf16|3d|n32|g96|c96|k96|in8x14x14|f3x3x3|s1x1x1|d1x1x1|pb1x1x1|pe1x1x1",
     "gconv_bwd_weight_bf16_3d_direct_128x16x1_w4_s1_gm1_sk32_mg1_v8_i32"),
    ("bwd_weight_3d_gmerge_splitk", "bwd_weight|bf16|3d|n16|g96|c96|k96|in8x56x56|f3x3x3|s1x8x8|d1x1x1|pb1x1x1|pe1x1x1",
     "gconv_bwd_weight_bf16_3d_gmerge_64x32x64_w4_s3_gm8_sk4_mg16_v8_i32"),
]


def model_case(label: str) -> tuple[ConvProblem, KernelConfig]:
    """The problem and kernel of one :data:`MODEL_CASES` entry."""
    from tiledispatch.native.configs import parse_kernel_name

    _, key, kernel = next(c for c in MODEL_CASES if c[0] == label)
    return ConvProblem.from_key(key), parse_kernel_name(kernel)
