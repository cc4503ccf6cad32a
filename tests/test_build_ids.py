"""Build ids follow a kernel's code, not its name, and not the line its jit functions start on."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("triton")

from tiledispatch.native.build_ids import build_ids  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FORWARD = "gconv_fwd_bf16_2d_dwroll_64x32x3_w4_s1_gm1_sk1_mg1_v8_i32"  # _dwroll_data_kernel
WEIGHT = "gconv_bwd_weight_bf16_2d_dwroll_32x32x3_w4_s2_gm1_sk64_mg1_v8_i32"  # not


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for folder in ("native", "tiledispatch"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_a_shifted_file_keeps_its_ids_and_an_edited_kernel_changes_only_its_own(tmp_path):
    here = build_ids([FORWARD, WEIGHT])
    root = _checkout(tmp_path)
    source = root / "native" / "kernels" / "dwroll.py"
    text = source.read_text()
    source.write_text("\n\n\n" + text)  # every jit function now starts three lines later
    assert build_ids([FORWARD, WEIGHT], checkout=root) == here
    marker = "    acc = _zeros_tuple(F_H, BLOCK_W, BLOCK_N)\n    for s in range(0, rows_here + F_H - 1):"
    assert marker in text
    source.write_text(text.replace(marker, "    ROWS = ROWS + 0\n" + marker, 1))
    edited = build_ids([FORWARD, WEIGHT], checkout=root)
    assert edited[FORWARD] != here[FORWARD] and edited[WEIGHT] == here[WEIGHT]


def test_a_divisibility_promise_is_part_of_the_build():
    # Same source, constexprs, signature, warps and stages: only vec 2's even-channel promise differs.
    single = "gconv_fwd_bf16_2d_dwrun_8x32x3_w2_s2_gm4_sk1_mg1_v1_i32"
    pair = "gconv_fwd_bf16_2d_dwrun_8x32x3_w2_s2_gm4_sk1_mg1_v2_i32"
    ids = build_ids([single, pair])
    assert ids[single] != ids[pair]
