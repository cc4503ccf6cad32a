"""The analytic model's family codes: dwroll (5), gwalk (6) and dwrow (7) got theirs without changing a number
(analytic v1)."""

from __future__ import annotations

import pytest

from tiledispatch.models import analytic
from tiledispatch.native.configs import Family, parse_kernel_name
from tiledispatch.native.problem import ConvProblem

PROBLEMS = {
    "dense_fwd": ConvProblem("fwd", "bf16", 8, 1, 128, 256, (28, 28), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
    "grouped_bwd_data": ConvProblem("bwd_data", "bf16", 4, 32, 256, 256, (28, 28), (3, 3), (1, 1), (1, 1), (1, 1),
                                    (1, 1)),
    "dw_bwd_weight": ConvProblem("bwd_weight", "bf16", 16, 96, 96, 96, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1),
                                 (1, 1)),
    "dw_fwd": ConvProblem("fwd", "bf16", 16, 96, 96, 96, (56, 56), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
}

#: (problem, kernel, time_us, compute_us, memory_us, ctas) computed by analytic v1 before dwroll had
#: a code (it was then an unknown CUDA-core family: the same direct view).
BEFORE = [
    ("dense_fwd", "gconv_fwd_bf16_2d_igemm_128x128x64_w8_s3_gm8_sk1_mg1_v8_i32", 10.197505636284848, 7.1975056362848475,
     1.3251764705882354, 98),
    ("dense_fwd", "gconv_fwd_bf16_2d_tma_128x128x64_w8_s3_gm8_sk1_mg1_v8_i32", 13.197505636284848, 7.1975056362848475,
     2.228705882352941, 98),
    ("dense_fwd", "gconv_fwd_bf16_2d_direct_64x32x1_w4_s1_gm1_sk1_mg1_v8_i32", 114.55596608955224, 111.55596608955224,
     1.3251764705882354, 784),
    ("grouped_bwd_data", "gconv_bwd_data_bf16_2d_gmerge_64x32x32_w4_s2_gm1_sk1_mg4_v8_i32", 5.024298460205113,
     2.0242984602051135, 0.7961098039215686, 392),
    ("grouped_bwd_data", "gconv_bwd_data_bf16_2d_igemm_64x64x32_w4_s3_gm8_sk1_mg1_v1_i64", 18.5196215282392,
     15.519621528239199, 1.2303515151515152, 1568),
    ("dw_bwd_weight", "gconv_bwd_weight_bf16_2d_direct_32x32x4_w4_s1_gm1_sk8_mg1_v8_i32", 10.736423529411766,
     3.163334686567164, 4.736423529411765, 216),
    ("dw_bwd_weight", "gconv_bwd_weight_bf16_2d_igemm_32x32x64_w4_s3_gm1_sk4_mg1_v8_i32", 554.6098740546006,
     548.6098740546006, 4.729647058823529, 3456),
    ("dw_bwd_weight", "gconv_bwd_weight_bf16_2d_dwroll_16x64x3_w4_s1_gm1_sk16_mg1_v8_i32", 10.749976470588235,
     4.745002029850746, 4.749976470588235, 288),
    ("dw_fwd", "gconv_fwd_bf16_2d_direct_64x32x4_w4_s1_gm1_sk1_mg1_v8_i32", 7.722870588235295, 2.6145929552238805,
     4.722870588235295, 2352),
    ("dw_fwd", "gconv_fwd_bf16_2d_dwroll_16x64x3_w4_s1_gm1_sk1_mg1_v8_i32", 7.722870588235295, 3.55875152238806,
     4.722870588235295, 6272),
    ("dw_fwd", "gconv_fwd_bf16_2d_gemm1x1_64x64x32_w4_s3_gm8_sk1_mg1_v8_i32", 520.3207176079734, 517.3207176079734,
     4.722870588235295, 75264),
]


def test_family_codes_keep_their_meaning_and_dwroll_is_5():
    assert analytic.FAMILY_CODES == {"igemm": 0, "gmerge": 1, "gemm1x1": 2, "direct": 3, "tma": 4, "dwroll": 5,
                                     "gwalk": 6, "dwrow": 7, "dwrun": 8, "halo": 9}
    assert {f.value for f in Family} <= set(analytic.FAMILY_CODES)
    assert analytic.VERSION == "1"


def test_dwroll_takes_the_direct_cuda_core_view():
    config = parse_kernel_name("gconv_fwd_bf16_2d_dwroll_16x64x3_w4_s1_gm1_sk1_mg1_v8_i32")
    table = analytic.config_table([config])
    assert table["family"].tolist() == [5] and table["cuda_core"].tolist() == [1]


@pytest.mark.parametrize("key,kernel,time_us,compute_us,memory_us,ctas", BEFORE, ids=[row[1] for row in BEFORE])
def test_analytic_values_are_those_of_before_dwroll_had_a_code(key, kernel, time_us, compute_us, memory_us, ctas):
    b = analytic.AnalyticPredictor("sm_90").breakdown(PROBLEMS[key], analytic.config_table([parse_kernel_name(kernel)]))
    assert b["time_us"][0] == pytest.approx(time_us, rel=1e-12)
    assert b["compute_us"][0] == pytest.approx(compute_us, rel=1e-12)
    assert b["memory_us"][0] == pytest.approx(memory_us, rel=1e-12)
    assert int(b["ctas"][0]) == ctas


def test_dwrow_takes_the_direct_cuda_core_view_it_had_without_a_code(monkeypatch):
    config = parse_kernel_name("gconv_bwd_weight_bf16_2d_dwrow_32x32x3_w4_s2_gm1_sk64_mg1_v8_i32")
    problem = PROBLEMS["dw_bwd_weight"]
    assert analytic.config_table([config])["cuda_core"].tolist() == [1]
    with_code = analytic.AnalyticPredictor("sm_90").breakdown(problem, analytic.config_table([config]))
    monkeypatch.delitem(analytic.FAMILY_CODES, "dwrow")
    without = analytic.AnalyticPredictor("sm_90").breakdown(problem, analytic.config_table([config]))
    for name in ("time_us", "compute_us", "memory_us", "ctas"):
        assert with_code[name][0] == without[name][0], name


def test_gwalk_keeps_the_tensor_core_view_it_had_without_a_code(monkeypatch):
    config = parse_kernel_name("gconv_bwd_data_bf16_2d_gwalk_64x32x32_w4_s1_gm4_sk1_mg4_v8_i32")
    problem = PROBLEMS["grouped_bwd_data"]
    with_code = analytic.AnalyticPredictor("sm_90").breakdown(problem, analytic.config_table([config]))
    assert analytic.config_table([config])["cuda_core"].tolist() == [0]
    monkeypatch.delitem(analytic.FAMILY_CODES, "gwalk")
    table = analytic.config_table([config])
    assert table["family"].tolist() == [analytic.UNKNOWN_FAMILY]
    without = analytic.AnalyticPredictor("sm_90").breakdown(problem, table)
    for name in ("time_us", "compute_us", "memory_us", "ctas"):
        assert with_code[name][0] == without[name][0], name
