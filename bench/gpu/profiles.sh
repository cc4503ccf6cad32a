#!/usr/bin/env bash
# Nsight Compute profiles of the kernels that decide the missed targets (issue 3): one text report per
# (kernel, problem) in $WORK/ncu/, the full section set of the main program's second launch (the
# first call warms caches and loads the binary; packing/reduce/weight-transposition programs are filtered out
# by name; the main programs are the igemm, direct, gwalk, dwroll, dwrun and halo kernels).
# Needs the registry (REGISTRY, default $WORK/registry) and runs from the tree in REPO (default /tmp/repo, as
# final.sh prepares it).
#   bash bench/gpu/profiles.sh            # PROFILES overrides the list: "kernel@problem-key ..."
set -uo pipefail
WORK=${WORK:-/tmp/tdwork}
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)}
[ -x "$NCU" ] || { echo "profiles: no ncu on this machine"; exit 1; }
cd "${REPO:-/tmp/repo}" || exit 1
mkdir -p "$WORK/ncu"
DW3="bf16|2d|n32|g144|c144|k144|in56x56|f3x3|s1x1|d1x1|pb1x1|pe1x1"
DW7="bf16|2d|n32|g96|c96|k96|in56x56|f7x7|s1x1|d1x1|pb3x3|pe3x3"
RX="bf16|2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1"
G8="bf16|2d|n32|g8|c448|k448|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1"
DIL2="bf16|2d|n8|g8|c256|k256|in64x64|f3x3|s1x1|d2x2|pb2x2|pe2x2"
C1024="bf16|2d|n32|g32|c1024|k1024|in7x7|f3x3|s1x1|d1x1|pb1x1|pe1x1"
# The dev suite's best kernels (session 29's report of record) on the layers that decide the missed targets.
PROFILES=${PROFILES:-"
gconv_fwd_bf16_2d_dwrun_4x16x7_w2_s2_gm4_sk1_mg1_v1_i32@fwd|$DW7
gconv_fwd_bf16_2d_dwrun_4x32x3_w2_s4_gm8_sk1_mg1_v4_i32@fwd|$DW3
gconv_fwd_bf16_2d_halo_64x32x32_w4_s1_gm14_sk1_mg4_v8_i32@fwd|$RX
gconv_fwd_bf16_2d_halo_64x64x64_w4_s1_gm28_sk1_mg1_v8_i32@fwd|$G8
gconv_fwd_bf16_2d_igemm_128x32x32_w4_s3_gm8_sk1_mg1_v8_i32@fwd|$DIL2
gconv_bwd_weight_bf16_2d_gmerge_64x64x64_w4_s4_gm8_sk16_mg2_v8_i32@bwd_weight|$DIL2
gconv_bwd_weight_bf16_2d_gwalk_32x32x64_w4_s1_gm4_sk8_mg1_v8_i32@bwd_weight|$C1024
gconv_bwd_weight_bf16_2d_dwrun_4x16x7_w4_s2_gm8_sk64_mg1_v1_i32@bwd_weight|$DW7
"}
index=0
for entry in $PROFILES; do
  kernel=${entry%%@*}; problem=${entry#*@}; index=$((index + 1))
  if [ "$kernel" = cudnn ]; then  # cuDNN's own kernels: every launch of the first timed call (NVTX range "profile")
    select=(--nvtx --nvtx-include "profile/" --launch-count "${CUDNN_LAUNCHES:-3}")
  else
    select=(-k "regex:^_(igemm|direct)_(fwd|bwd_data|bwd_weight)|^_gwalk|^_dwroll_|^_dwrun_|^_halo_kernel" --launch-skip 1 --launch-count 1)
  fi
  timeout "${PROFILE_TIMEOUT:-120}" "$NCU" --clock-control none --set full --import-source no "${select[@]}" \
    python3 bench/profile_kernel.py --registry "${REGISTRY:-$WORK/registry}" --kernel "$kernel" --problem "$problem" \
    > "$WORK/ncu/$(printf %02d $index)_$kernel.txt" 2>&1
  echo "profile $index $kernel ${problem%%|*}: $(grep -E "^\s+Duration" "$WORK/ncu/$(printf %02d $index)_$kernel.txt" | tr -s ' ' | paste -sd' ')"
done
