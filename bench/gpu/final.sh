#!/usr/bin/env bash
# One bounded device call (< 10 min): build the registry, then the service's Run bandwidth on the GPU,
# the PyTorch integration's GPU tests and end-to-end benchmark, and data collection for whatever
# time is left. Runs from a private copy of the tree (the device tool re-syncs the working tree on
# every call). Results: $OUT/final.tar.gz. Usage: DEADLINE_S=560 bash bench/gpu/final.sh [steps]
set -uo pipefail
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-560}
OUT=${OUT:-/tmp/out}
WORK=${WORK:-/tmp/tdwork}
STEPS=${*:-build service torch e2e collect}
left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }
rm -rf /tmp/repo && cp -r "$PWD" /tmp/repo && cd /tmp/repo || exit 1
for pair in native:native models:models server:server client:client v1:proto/tiledispatch/v1; do
  ln -sfn "$PWD/${pair#*:}" "tiledispatch/${pair%%:*}"
done
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export TILEDISPATCH_REGISTRY_DIR="$WORK/registry"
mkdir -p "$WORK/logs" "$OUT"
for step in $STEPS; do
  echo "=== $step at +$(( $(date +%s) - START ))s, $(left)s left"
  case $step in
    build) python3 -m tiledispatch.cli registry build --rule-set default --arch sm_90 --workers "$(nproc)" \
             --cache-dir "$WORK/registry" --allow-failures 2>&1 | grep -v "^\s*\[" | tail -2 ;;
    service) timeout 90 python3 bench/service_perf.py --seconds 3 --out "$WORK/service_perf_h200.json" \
               > "$WORK/logs/service_perf_h200.txt" 2>&1; tail -5 "$WORK/logs/service_perf_h200.txt" ;;
    torch) timeout $(( $(left) / 3 )) python3 -m pytest -q -m gpu -p no:cacheprovider tests/integrations/test_torch_gpu.py \
             > "$WORK/logs/torch_gpu_tests.txt" 2>&1; tail -15 "$WORK/logs/torch_gpu_tests.txt" ;;
    e2e) timeout $(( $(left) / 2 )) python3 bench/torch_e2e.py --steps 5 --rounds 3 --warmup 2 --out-dir "$WORK/torch_e2e" \
           > "$WORK/logs/torch_e2e.txt" 2>&1; tail -12 "$WORK/logs/torch_e2e.txt" ;;
    collect) mkdir -p "$WORK/data"; for d in models/data/measured/h200/*/; do [ -d "$WORK/data/$(basename "$d")" ] || cp -r "$d" "$WORK/data/"; done
             for list in ${COLLECT_LISTS:-train_bwd_weight validation_fwd train_fwd validation_bwd_data train_bwd_data}; do
               direction=${list#*_}
               [ "$(left)" -gt 20 ] || break
               timeout $(( $(left) - 15 )) python3 -m tiledispatch.cli bench --problems "models/data/problems/$list.json" \
                 --direction "$direction" --dtype bf16 --cache-dir "$WORK/registry" --out "$WORK/data/$list" \
                 --training $([ "${list%%_*}" = train ] && echo --oracle-only --max-kernels 48) \
                 > "$WORK/logs/collect_$list.txt" 2>&1
               grep -E "^bench: [0-9]" "$WORK/logs/collect_$list.txt"; grep -c "rows, best" "$WORK/logs/collect_$list.txt"
             done ;;
  esac
done
tar -czf "$OUT/final.tar.gz" -C "$WORK" --exclude=registry . 2>/dev/null
ls -la "$OUT"
