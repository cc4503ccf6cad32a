#!/usr/bin/env bash
# Session 10 device calls (GPU machine, repo root): $1 = tests | dev | torch. Writes $OUT/results.tar.gz.
# Each builds the default registry first (16 workers; a warm machine's second build does nothing).
#   tests:   every kernel GPU test; completion of the backward-weight validation folders with the new dwroll kernels;
#            the PyTorch e2e models' depthwise layers, backward-weight (every kernel + cuDNN).
#   dev:     the dev suite (every kernel + cuDNN) and its report.
#   torch:   registry build, the PyTorch integration's GPU tests, the e2e benchmark eager + CUDA graphs.
# TILEDISPATCH_GIT_COMMIT must name the commit the tree is (the copied .git is stale).
set -uo pipefail
export PYTHONUNBUFFERED=1
WORK=/tmp/tdwork; REG=$WORK/registry; mkdir -p "$WORK/logs"
for pair in native:native models:models server:server client:client v1:proto/tiledispatch/v1; do
  ln -sfn "$PWD/${pair#*:}" "tiledispatch/${pair%%:*}"
done
export PYTHONPATH=$PWD TILEDISPATCH_SHARED_DIR=$PWD/.shared
# An executable, not a function, so that `timeout` can run it.
printf '#!/bin/sh\nexec python3 -m tiledispatch.cli "$@"\n' > /tmp/td && chmod +x /tmp/td && export PATH=/tmp:$PATH
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'triton', triton.__version__)"; echo "commit $TILEDISPATCH_GIT_COMMIT"; } | tee "$WORK/logs/env.txt"
start=$(date +%s)
( time td registry build --rule-set default --arch sm_90 --workers "$(nproc)" --cache-dir "$REG" --allow-failures ) > "$WORK/logs/build_default.txt" 2>&1
grep -v "^\s*\[" "$WORK/logs/build_default.txt" | tail -6
case ${1:?tests, dev or torch} in
  tests|tests-data)
    [ "$1" = tests ] && TILEDISPATCH_TEST_REGISTRY="$REG" timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu.py > "$WORK/logs/gpu_tests_kernels.txt" 2>&1
    tail -3 "$WORK/logs/gpu_tests_kernels.txt"
    M=models/data/measured  # the validation folders read together (h200/ is an older measurement of the same list)
    timeout 60 td bench --problems models/data/problems/validation_bwd_weight.json --direction bwd_weight --complete \
      $M/h200_s3/validation_bwd_weight $M/h200_s4/validation_bwd_weight $M/h200_s6/complete_validation_bwd_weight \
      $M/h200_s6/complete_prefetch_validation_bwd_weight --families dwroll --training --cache-dir "$REG" \
      --out "$WORK/complete_lean_validation_bwd_weight" > "$WORK/logs/complete_validation.txt" 2>&1; echo "validation completion rc $?"
    timeout 90 td bench --problems bench/problems/e2e_depthwise_n32_bwd_weight.json --direction bwd_weight --cache-dir "$REG" --out "$WORK/e2e_shapes_bwd_weight" > "$WORK/logs/bench_e2e_shapes.txt" 2>&1; echo "e2e shapes rc $?"
    ;;
  dev)
    timeout $(( ${DEADLINE_S:-560} - ($(date +%s) - ${T0:-$start}) )) td bench --problems "$TILEDISPATCH_SHARED_DIR/bench/dev_suite.json" --cache-dir "$REG" --out "$WORK/dev_suite" > "$WORK/logs/bench_dev.txt" 2>&1; echo "dev rc $?"; tail -2 "$WORK/logs/bench_dev.txt"
    python3 bench/report.py "$WORK/dev_suite" --out "$WORK/report_dev_suite" --title "Dev suite: tiledispatch vs cuDNN (bf16)" 2>&1 | tail -2
    grep -A9 "^## Targets" "$WORK/report_dev_suite/report.md"
    ;;
  torch)
    TILEDISPATCH_REGISTRY_DIR="$REG" timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/integrations/test_torch_gpu.py -k "${TORCH_TESTS:-captured}" > "$WORK/logs/gpu_tests_torch.txt" 2>&1; tail -3 "$WORK/logs/gpu_tests_torch.txt"
    TILEDISPATCH_REGISTRY_DIR="$REG" timeout $(( ${DEADLINE_S:-560} - ($(date +%s) - ${T0:-$start}) )) python3 bench/torch_e2e.py --cuda-graph --models ${MODELS:-mobilenet_v2,convnext_tiny,resnext50_32x4d} --batches ${BATCHES:-32,128} --steps 10 --rounds ${ROUNDS:-5} --warmup ${WARMUP:-3} --out-dir "$WORK/torch_e2e" > "$WORK/logs/torch_e2e.txt" 2>&1; echo "e2e rc $?"; grep -E "batch|speedup|CUDA graphs" "$WORK/logs/torch_e2e.txt" | tail -20
    ;;
esac
tar -czf "$OUT/results.tar.gz" -C "$WORK" --exclude=registry . 2>/dev/null
echo "elapsed $(( $(date +%s) - start )) s"
