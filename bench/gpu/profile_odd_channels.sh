#!/usr/bin/env bash
# One device call (repo root): Nsight Compute profiles (bench/gpu/profiles.sh) of the kernels that hold the 3D
# depthwise class of the synthetic sweep down: odd-channel multiplier 3x3x3 at stride 1x2x2 (direct, gmerge), the
# planar odd-channel problem on dwrun, and an even-channel 3D direct kernel beside them. Builds only these kernels
# (/tmp/prof_reg); writes $OUT/results.tar.gz (the ncu text reports). PROFILES=multiplier: the forward multiplier
# kernels on the two odd-channel problems instead; any other PROFILES value: those "kernel@problem-key" entries.
set -u
for pair in native:native models:models server:server client:client v1:proto/tiledispatch/v1; do ln -sfn "$PWD/${pair#*:}" "tiledispatch/${pair%%:*}"; done
export PYTHONPATH=$PWD TILEDISPATCH_SHARED_DIR=$PWD/.shared
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
M3="bf16|3d|n32|g239|c239|k717|in18x27x27|f3x3x3|s1x2x2|d1x1x1|pb1x1x1|pe1x1x1"
P="bf16|3d|n50|g23|c23|k23|in5x37x37|f1x3x3|s1x1x1|d1x1x1|pb0x1x1|pe0x1x1"
E="bf16|3d|n10|g48|c48|k48|in26x24x24|f3x5x5|s1x2x2|d1x1x1|pb1x2x2|pe1x2x2"
N3="bf16|3d|n3|g367|c367|k1468|in5x37x37|f3x3x3|s1x2x2|d1x1x2|pb1x1x2|pe1x1x2"
# PROFILES=multiplier: the forward multiplier kernels (direct group_m 4) the session-24 sweep picked on both problems.
if [ "${PROFILES:-}" = multiplier ]; then
  PROFILES="gconv_fwd_bf16_3d_direct_128x16x1_w4_s1_gm4_sk1_mg1_v1_i32@fwd|$M3
gconv_fwd_bf16_3d_direct_64x16x1_w4_s1_gm4_sk1_mg1_v1_i32@fwd|$N3"
fi
export PROFILES="${PROFILES:-gconv_fwd_bf16_3d_direct_64x32x1_w4_s1_gm1_sk1_mg1_v1_i32@fwd|$M3
gconv_fwd_bf16_3d_gmerge_128x64x32_w8_s2_gm8_sk1_mg16_v1_i32@fwd|$M3
gconv_bwd_data_bf16_3d_direct_64x32x1_w4_s1_gm1_sk1_mg1_v1_i32@bwd_data|$M3
gconv_fwd_bf16_2d_dwrun_8x16x3_w2_s2_gm4_sk1_mg1_v1_i32@fwd|$P
gconv_fwd_bf16_3d_direct_128x16x1_w4_s1_gm1_sk1_mg1_v8_i32@fwd|$E}"
# (a file with a main guard: the build's worker processes import it)
cat > /tmp/build_profiled.py <<'PY'
import os
from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.registry import build
if __name__ == "__main__":
    names = [e.split("@")[0] for e in os.environ["PROFILES"].split()]
    r = build([parse_kernel_name(n) for n in names], arch="sm_90", cache_dir="/tmp/prof_reg", workers=8)
    print({x.kernel: x.status for x in r})
PY
python3 /tmp/build_profiled.py
mkdir -p /tmp/tdwork && rm -rf /tmp/tdwork/ncu
REPO=$PWD REGISTRY=/tmp/prof_reg WORK=/tmp/tdwork bash bench/gpu/profiles.sh
cd /tmp/tdwork && tar czf $OUT/results.tar.gz ncu
