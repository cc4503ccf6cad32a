#!/usr/bin/env bash
# Nsight Compute profiles of the kernels that decide the missed targets (issue 3): one text report per
# (kernel, problem) in $WORK/ncu/, the full section set of the main program's second launch (the
# first call warms caches and loads the binary; packing/reduce/weight-transposition programs are filtered out
# by name; the main programs are the igemm, direct, gwalk, dwroll and dwrun kernels).
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
RX="bf16|2d|n32|g32|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1"
DENSE="bf16|2d|n32|g1|c256|k256|in28x28|f3x3|s1x1|d1x1|pb1x1|pe1x1"
SMALL="bf16|2d|n1|g1|c256|k256|in14x14|f3x3|s1x1|d1x1|pb1x1|pe1x1"
PROFILES=${PROFILES:-"
gconv_bwd_weight_bf16_2d_direct_32x32x4_w4_s1_gm1_sk32_mg1_v8_i32@bwd_weight|$DW3
gconv_fwd_bf16_2d_direct_256x16x4_w4_s1_gm1_sk1_mg1_v8_i32@fwd|$DW3
gconv_fwd_bf16_2d_gmerge_128x64x64_w4_s3_gm8_sk1_mg8_v8_i32@fwd|$RX
gconv_bwd_weight_bf16_2d_gmerge_64x64x64_w4_s3_gm8_sk16_mg8_v8_i32@bwd_weight|$RX
gconv_fwd_bf16_2d_igemm_128x128x64_w8_s3_gm8_sk1_mg1_v8_i32@fwd|$DENSE
gconv_fwd_bf16_2d_igemm_64x32x64_w4_s3_gm8_sk1_mg1_v8_i32@fwd|$SMALL
"}
index=0
for entry in $PROFILES; do
  kernel=${entry%%@*}; problem=${entry#*@}; index=$((index + 1))
  timeout 120 "$NCU" --clock-control none --set full --import-source no \
    -k "regex:^_(igemm|direct)_(fwd|bwd_data|bwd_weight)|^_gwalk|^_dwroll_|^_dwrun_" --launch-skip 1 --launch-count 1 \
    python3 bench/profile_kernel.py --registry "${REGISTRY:-$WORK/registry}" --kernel "$kernel" --problem "$problem" \
    > "$WORK/ncu/$(printf %02d $index)_$kernel.txt" 2>&1
  echo "profile $index $kernel: $(grep -E "^\s+Duration" "$WORK/ncu/$(printf %02d $index)_$kernel.txt" | head -1)"
done
