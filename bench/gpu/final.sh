#!/usr/bin/env bash
# A GPU sitting's steps: registry, GPU tests, dev suite + report, PyTorch tests and end-to-end
# benchmark, then heuristic data in rounds until the deadline. Runs from a private copy of the tree
# (each device call re-syncs the working tree); results and the registry stay in $WORK (/tmp), which
# survives between calls while the machine is held. A process left running in the background ends
# with the device call that started it (seen on the H200, 2026-11-22), so give each call a foreground
# share of the steps that fits its 10 minutes, and pack results with bench/gpu/snapshot.sh:
#   STEPS="build test dev report" DEADLINE_S=540 bash bench/gpu/final.sh; bash bench/gpu/snapshot.sh 0
#   STEPS="torch e2e" DEADLINE_S=540 bash bench/gpu/final.sh; bash bench/gpu/snapshot.sh 0
#   STEPS="collect" DEADLINE_S=560 bash bench/gpu/final.sh; bash bench/gpu/snapshot.sh 0
set -uo pipefail
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-1500}
WORK=${WORK:-/tmp/tdwork}
STEPS=${STEPS:-build test dev report torch e2e collect}
left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }
# REPO/REG let two copies run at once, one per GPU (CUDA_VISIBLE_DEVICES), sharing one registry.
REPO=${REPO:-/tmp/repo}
rm -rf "$REPO" && cp -r "$PWD" "$REPO" && cd "$REPO" || exit 1
for pair in native:native models:models server:server client:client v1:proto/tiledispatch/v1; do
  ln -sfn "$PWD/${pair#*:}" "tiledispatch/${pair%%:*}"
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TILEDISPATCH_SHARED_DIR=${TILEDISPATCH_SHARED_DIR:-$PWD/.shared}
REG=${REG:-$WORK/registry}
export TILEDISPATCH_REGISTRY_DIR="$REG" TILEDISPATCH_TEST_REGISTRY="$REG"
mkdir -p "$WORK/logs"
rm -f "$WORK/DONE"
td() { python3 -m tiledispatch.cli "$@"; }
bounded() { local limit=$1; shift; [ "$(left)" -gt 30 ] || return 1; timeout "$(( limit < $(left) - 10 ? limit : $(left) - 10 ))" "$@"; }
for step in $STEPS; do
  echo "=== $step at +$(( $(date +%s) - START ))s, $(left)s left"
  case $step in
    build) { nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
             python3 -c "import torch, triton; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'triton', triton.__version__)"; } > "$WORK/logs/env.txt" 2>&1
           bounded 200 python3 -m tiledispatch.cli registry build --rule-set default --arch sm_90 --workers "$(nproc)" \
             --cache-dir "$REG" --allow-failures > "$WORK/logs/build_default.txt" 2>&1
           grep -v "^\s*\[" "$WORK/logs/build_default.txt" | tail -2; grep "spills:" "$WORK/logs/build_default.txt" | head -5
           cp "$REG/manifest-sm_90.json" "$WORK/logs/registry_manifest_default.json" ;;
    test) # shellcheck disable=SC2086
          bounded 300 python3 -m pytest -q -m gpu -p no:cacheprovider ${GPU_TESTS:-tests/kernels/test_gpu.py tests/service/test_gpu_server.py} \
            > "$WORK/logs/gpu_tests.txt" 2>&1; tail -3 "$WORK/logs/gpu_tests.txt" ;;
    dev) bounded 420 python3 -m tiledispatch.cli bench --problems "$TILEDISPATCH_SHARED_DIR/bench/dev_suite.json" \
           --cache-dir "$REG" --out "$WORK/dev_suite" > "$WORK/logs/bench_dev.txt" 2>&1; tail -2 "$WORK/logs/bench_dev.txt" ;;
    report) python3 bench/report.py "$WORK/dev_suite" --out "$WORK/report_dev_suite" \
              --title "Dev suite: tiledispatch vs cuDNN (bf16)" 2>&1 | tail -1
            sed -n '/## Targets/,/## Per class/p' "$WORK/report_dev_suite/report.md" ;;
    torch) bounded 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/integrations/test_torch_gpu.py \
             > "$WORK/logs/torch_gpu_tests.txt" 2>&1; tail -3 "$WORK/logs/torch_gpu_tests.txt" ;;
    e2e) bounded 330 python3 bench/torch_e2e.py --steps 5 --rounds 3 --warmup 2 --out-dir "$WORK/torch_e2e" \
           > "$WORK/logs/torch_e2e.txt" 2>&1; tail -3 "$WORK/logs/torch_e2e.txt" ;;
    collect) VALID_STEP=${VALID_STEP:-60} VALID_MAX=${VALID_MAX:-100} TRAIN_STEP=${TRAIN_STEP:-150} ROUNDS=${ROUNDS:-10} \
               bounded 100000 bash bench/gpu/collect.sh > "$WORK/logs/collect.txt" 2>&1; tail -4 "$WORK/logs/collect.txt" ;;
  esac
done
echo "=== done at +$(( $(date +%s) - START ))s"
touch "$WORK/DONE"
