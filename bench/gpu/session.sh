#!/usr/bin/env bash
# One device session: build the default registry, run the GPU tests, run the tile-engine benchmark
# (dev suite + synthetic problems) and write reports. Everything lands in $OUT/results.tar.gz.
# Usage (on the GPU machine, repo root): bash bench/gpu/session.sh [steps...]
#   steps: env build test dev synth probe collect torch report (default: env build test dev synth report)
#   collect: COLLECT="problems.json:out_name:extra flags;..." measures each list into $WORK/data/out_name
set -uo pipefail
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/tdwork}
mkdir -p "$OUT" "$WORK/logs"
STEPS=${*:-env build test dev synth report}
export PYTHONUNBUFFERED=1
export TILEDISPATCH_SHARED_DIR=${TILEDISPATCH_SHARED_DIR:-$PWD/.shared}
PY=${PY:-python3}

# The GPU image has no network and this tree is a throw-away copy: make the package importable
# from the repo root by linking the mapped folders into tiledispatch/ (what pip's mapping does).
for pair in native:native models:models server:server client:client v1:proto/tiledispatch/v1; do
  ln -sfn "$PWD/${pair#*:}" "tiledispatch/${pair%%:*}"
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
REG="$WORK/registry"
td() { "$PY" -m tiledispatch.cli "$@"; }

for step in $STEPS; do
  echo "=== step $step $(date -u +%H:%M:%S)"
  case $step in
    env)
      { nvidia-smi; "$PY" -c "import torch, triton, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'triton', triton.__version__, 'numpy', numpy.__version__); print(torch.cuda.get_device_name(0))"; "$PY" -m pip list 2>/dev/null | grep -i -E "grpc|protobuf|lightgbm|pandas|pyarrow|matplotlib"; nproc; } 2>&1 | tee "$WORK/logs/env.txt"
      ;;
    build)
      time td registry build --rule-set default --arch sm_90 --workers "$(nproc)" --cache-dir "$REG" --allow-failures 2>&1 | tee "$WORK/logs/build_default.txt" | grep -v "^\s*\[" | tail -40
      cp "$REG/manifest-sm_90.json" "$WORK/logs/registry_manifest_default.json"
      ;;
    test)
      TILEDISPATCH_TEST_REGISTRY="$REG" "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu.py tests/service/test_gpu_server.py --timeout=900 2>&1 | tee "$WORK/logs/gpu_tests.txt" | tail -25
      ;;
    dev)
      td bench --problems "$TILEDISPATCH_SHARED_DIR/bench/dev_suite.json" --cache-dir "$REG" --out "$WORK/dev_suite" 2>&1 | tee "$WORK/logs/bench_dev.txt" | tail -15
      ;;
    synth)
      td bench --synthetic "${SYNTH_COUNT:-100}" --seed 7 --oracle-only --cache-dir "$REG" --out "$WORK/synthetic" 2>&1 | tee "$WORK/logs/bench_synth.txt" | tail -15
      ;;
    probe)
      td bench --synthetic 8 --seed 11 --training --max-kernels 48 --cache-dir "$REG" --out "$WORK/probe" 2>&1 | tee "$WORK/logs/bench_probe.txt" | tail -6
      ;;
    collect)
      IFS=';' read -ra lists <<< "${COLLECT:-}"
      for item in "${lists[@]}"; do
        IFS=':' read -r file name flags <<< "$item"
        # shellcheck disable=SC2086
        td bench --problems "$file" --direction "${COLLECT_DIRECTIONS:-fwd}" --dtype "${COLLECT_DTYPE:-bf16}" \
          --cache-dir "$REG" --out "$WORK/data/$name" $flags 2>&1 | tee -a "$WORK/logs/collect_$name.txt" | grep -E "^\[|bench:" | tail -3
      done
      ;;
    torch)
      # PyTorch integration: torchvision models swapped to our kernels (correctness, then speed vs cuDNN).
      TILEDISPATCH_REGISTRY_DIR="$REG" "$PY" -m pytest -q -s -m gpu -p no:cacheprovider tests/integrations/test_torch_gpu.py --timeout=1800 2>&1 | tee "$WORK/logs/torch_gpu_tests.txt" | tail -40
      TILEDISPATCH_REGISTRY_DIR="$REG" "$PY" bench/torch_e2e.py --out-dir "$WORK/torch_e2e" 2>&1 | tee "$WORK/logs/torch_e2e.txt" | tail -30
      ;;
    report)
      [ -d "$WORK/dev_suite" ] && "$PY" bench/report.py "$WORK/dev_suite" --out "$WORK/report_dev_suite" --title "Dev suite: tiledispatch vs cuDNN (bf16)" 2>&1 | tail -3
      [ -d "$WORK/synthetic" ] && "$PY" bench/report.py "$WORK/synthetic" --out "$WORK/report_synthetic" --title "Synthetic problems: tiledispatch vs cuDNN (bf16)" 2>&1 | tail -3
      ;;
  esac
done
tar -czf "$OUT/results.tar.gz" -C "$WORK" --exclude=registry --exclude=pkg . 2>/dev/null
ls -la "$OUT"
