#!/usr/bin/env bash
# One device call (repo root): the channel-padded kernels re-timed after a change of their copy program, beside call 1's
# best unpadded kernels and cuDNN, on the 14 seed-7 synthetic problems with unaligned groups >= 16 channels wide x 3
# directions (bench/gpu/padded_retime_kernels.json names the kernels; a registry of only them). Then the kernel GPU
# tests -k padded (TESTS=0: not). Writes $OUT/results.tar.gz (the sweep, its report, logs).
set -uo pipefail
for pair in native:native models:models server:server client:client v1:proto/tiledispatch/v1; do ln -sfn "$PWD/${pair#*:}" "tiledispatch/${pair%%:*}"; done
export PYTHONPATH=$PWD TILEDISPATCH_SHARED_DIR=$PWD/.shared
WORK=/tmp/tdwork; mkdir -p "$WORK/logs"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c "import torch, triton; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'triton', triton.__version__)"; echo "commit ${TILEDISPATCH_GIT_COMMIT:-unknown}"; } | tee "$WORK/logs/env.txt"
cat > /tmp/build_retime.py <<'PY'
import json, os
from tiledispatch.native.configs import parse_kernel_name
from tiledispatch.native.registry import build
if __name__ == "__main__":
    doc = json.load(open("bench/gpu/padded_retime_kernels.json"))
    results = build([parse_kernel_name(n) for n in doc["padded"] + doc["unpadded_best"]], arch="sm_90",
                    cache_dir="/tmp/retime_reg", workers=os.cpu_count() or 4)
    print("built", len(results), {r.status for r in results})
PY
( time python3 /tmp/build_retime.py ) > "$WORK/logs/build_retime.txt" 2>&1; grep -E "built|real" "$WORK/logs/build_retime.txt"
python3 -c "import json; from tiledispatch.native.sampler import sample_problems as s; \
print(json.dumps([p.to_dict() for p in s(100, seed=7) if (p.c_per_group % 8 or p.k_per_group % 8) \
and max(p.c_per_group, p.k_per_group) >= 16]))" > "$WORK/padded_problems.json"
REGEX=$(python3 -c "import json; d = json.load(open('bench/gpu/padded_retime_kernels.json')); print('^(' + '|'.join(d['padded'] + d['unpadded_best']) + ')$')")
timeout 240 python3 -m tiledispatch.cli bench --problems "$WORK/padded_problems.json" --kernels "$REGEX" --cache-dir /tmp/retime_reg \
  --out "$WORK/padded_retime" > "$WORK/logs/bench_padded_retime.txt" 2>&1; echo "bench rc $?"; tail -1 "$WORK/logs/bench_padded_retime.txt"
python3 bench/report.py "$WORK/padded_retime" --out "$WORK/report_padded_retime" \
  --title "Unaligned synthetic problems (seed 7): padded kernels after the copy rewrite, call 1's best unpadded kernels, cuDNN (bf16)" 2>&1 | tail -1
if [ "${TESTS:-1}" != 0 ]; then
  TILEDISPATCH_TEST_REGISTRY="$WORK/test_registry" timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu.py \
    -k padded > "$WORK/logs/gpu_tests_padded.txt" 2>&1; tail -1 "$WORK/logs/gpu_tests_padded.txt"
fi
tar -czf "$OUT/results.tar.gz" -C "$WORK" --exclude=test_registry . 2>/dev/null
