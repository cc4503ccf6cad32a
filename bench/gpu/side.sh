#!/usr/bin/env bash
# Work for one GPU beside a collection (collect_gpus.sh's FIRST_ON_LAST_GPU): the GPU tests of the tree,
# then PyTorch end-to-end cases, each case its own torch_e2e.py run and folder, all under $WORK/side.
#   E2E_CASES="mvit_v2_s:16 r3d_18:8"          model:batch, timed (cuDNN, ours, fastest)
#   PROFILE_CASES="convnext_tiny:32"             model:batch, timed and profiled (torch_e2e.py --profile)
#   GPU_TESTS="tests/kernels/test_gpu.py …"      pytest files run with -m gpu (empty: none)
# Runs from the tree final.sh prepared (/tmp/repo), with the registry in $WORK/registry.
set -uo pipefail
WORK=${WORK:-/tmp/tdwork}
SIDE="$WORK/side"
mkdir -p "$SIDE"
cd /tmp/repo || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Tests and the PyTorch runs compile kernels beyond the rule set into their registry: give them a copy,
# so the collection's registry holds exactly the rule set (bench measures only the rule set's kernels anyway).
rm -rf "$WORK/registry_side" && cp -r "$WORK/registry" "$WORK/registry_side"
export TILEDISPATCH_REGISTRY_DIR="$WORK/registry_side" TILEDISPATCH_TEST_REGISTRY="$WORK/registry_side"
if [ -n "${GPU_TESTS:-}" ]; then
  # shellcheck disable=SC2086
  python3 -m pytest -q -m gpu -p no:cacheprovider $GPU_TESTS > "$SIDE/gpu_tests.txt" 2>&1
  tail -n 3 "$SIDE/gpu_tests.txt"
fi
e2e() {  # model:batch [--profile]
  local model=${1%%:*} batch=${1##*:}
  python3 bench/torch_e2e.py --models "$model" --batches "$batch" --steps 5 --rounds 3 --warmup 2 ${2:-} \
    --out-dir "$SIDE/e2e_${model}_b$batch" > "$SIDE/e2e_${model}_b$batch.txt" 2>&1
  tail -n 2 "$SIDE/e2e_${model}_b$batch.txt"
}
for case in ${E2E_CASES:-}; do e2e "$case"; done
for case in ${PROFILE_CASES:-}; do e2e "$case" --profile; done
