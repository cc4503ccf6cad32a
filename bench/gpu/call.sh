#!/usr/bin/env bash
# One device call (GPU machine, repo root): $1 = synth | complete | torch | probe | tests | dev. Writes $OUT/results.tar.gz.
# Each builds the default registry first (BUILD=0: not) (16 workers; a warm machine's second build does nothing) and stops
# its sweeps by the call's deadline ($T0 + $DEADLINE_S, default 560 s); sweeps resume on the next call.
#   synth:    100 synthetic problems x 3 directions (seed 7, --oracle-only) and their report; the sweep folder is
#             .carry/synthetic, carried from call to call so that a second call resumes it.
#   complete: the split-K forward/backward-data kernels (KERNELS regex, default '_sk(?!1_)'; FAMILIES: a family
#             list instead, e.g. gwalk; NAME: the output folders' tag, default splitk; DIRS: directions, default
#             'fwd bwd_data') on the bf16 training and
#             validation problems already measured (completion sweeps, training timing), then what is left of synth.
#   torch:    builds the C++ launch path's extension, then the PyTorch integration's and the service's GPU tests (the
#             service needs grpcio >= 1.85.1 and its companions: wheels in .whl), the host cost per call
#             (bench/torch_call_cost.py, two layers), the e2e benchmark eager + CUDA graphs (TESTS=0: no tests; SERVICE=0:
#             not the service's; CALL_COST=0: no call cost; E2E=0: no e2e; ROUNDS, STEPS: its rounds and steps per round, default 45 x 2: see torch_e2e.py).
#   tests:    every kernel GPU test (TESTS_K: a pytest -k expression).
#   probe:    bench/gpu/walk_probe.py (PROBE_DIRECTIONS, default bwd_weight) into $WORK/walk_probe.
#   refresh:  for each direction of DIRS (default 'bwd_weight fwd bwd_data'), the training and validation problems of
#             the shipped bf16 models (bench/gpu/refresh_sets.json): re-measure their changed kernels within WITHIN
#             (default 1.25) x the problem's earlier best (--refresh, --training) into $WORK/refresh_{train,validation}_DIR,
#             then time the configs no folder has (new_kernels; --complete; SHARD=I/N: every N-th training problem) into
#             $WORK/complete_new_* (COMPLETE=0: not); a later call on the same warm machine resumes them. KINDS: the
#             lists and their order (default 'train validation'). A part of the rule set: BUILD_ARGS builds it
#             and REFRESH_ARGS names it to the sweep (e.g. '--family dwrun --dtype bf16' and '--families dwrun'), so
#             only its changed kernels are re-timed.
#   halo_data: session 32's halo rows: the stale halo kernels re-timed (refresh, within WITHIN) on session 29's halo
#             folders' problems, and forward every halo kernel on the stride-2 problems it now runs (a completion);
#             DIRS (default 'fwd bwd_data'), KINDS; into $WORK/halo_{refresh,strided}_KIND_DIR.
#   new:      refresh's completion half alone (DIRS default 'fwd bwd_data', KINDS), from a registry of only the
#             new_kernels ($WORK/registry_new; BUILD=0 skips the default build this mode does not need).
#   configs:  bench/gpu/config_probe.py on PROBE_KERNELS (default stages_probe_kernels.json; several: space-separated), as built (PROBE_VARIANTS,
#             default cg; cg,cap: also under the register budget), into $WORK/config_probe.
#   l1:       bench/gpu/config_probe.py (tensor-core kernels with their cp.async cached in L1 too) into $WORK/l1_probe.
#   held:     bench/gpu/held_probe.py into $WORK/held_probe (its own registry, /tmp/held_registry), then Nsight
#             Compute profiles of PROFILES ("kernel@problem-key ...", bench/gpu/profiles.sh) from that registry.
#   dwrow:    bench/gpu/dwrow_probe.py (depthwise backward-weight, one filter row per program, beside default's
#             depthwise kernels and cuDNN) into $WORK/dwrow_probe; then TESTS_K's kernel GPU tests when set.
#   dwrun:    bench/gpu/dwrun_probe.py (depthwise backward-weight, each thread a run of output columns, beside
#             default's best depthwise kernels and cuDNN) into $WORK/dwrun_probe; then TESTS_K's kernel GPU tests when set.
#   dwrun_data: bench/gpu/dwrun_data_probe.py (depthwise forward / backward-data, each thread a run of output
#             columns, beside default's dwroll kernels and cuDNN) into $WORK/dwrun_data_probe; then TESTS_K's tests.
#   dwrun_pair: bench/gpu/dwrun_pair_probe.py (dwrun with a channel pair a thread, vec 2, all three directions, beside
#             default's dwrun kernels and cuDNN) into $WORK/dwrun_pair_probe; then TESTS_K's tests.
#   dwrun_stages: bench/gpu/dwrun_stages_probe.py (depthwise forward / backward-data, rows through shared memory and
#             four channels a thread, beside default's dwrun kernels and cuDNN) into $WORK/dwrun_stages_probe; then
#             TESTS_K's tests.
#   flat:     bench/gpu/flat_probe.py (backward-weight tensor-core kernels, one accumulator per split against the
#             chunked program, same binaries, with cuDNN) into $WORK/flat_probe; then TESTS_K's kernel GPU tests when set.
#   harness:  bench/gpu/harness_check.py (the same kernels timed as the sweep and as the probes time them, in one
#             process) into $WORK/harness, then td bench on its problems and registry (the sweep's worker) (BUILD=0).
#   variants: for each value v of $VARIANTS, export $VARIANT_ENV=v (a source switch a probe commit carries), build
#             the default registry again (only the switched kernels compile; BUILD_ARGS: a part of it) and bench the dev suite with
#             $VARIANT_ARGS (e.g. --direction bwd_weight --families igemm,gmerge,gemm1x1) into $WORK/variant_v.
#   planar:   3D problems that are 2D ones: kernel and PyTorch GPU tests on them (TESTS=0: none; KERNEL_TESTS=0: not
#             the kernels'; TORCH_TESTS: the PyTorch ones' -k), then (SWEEP=0: not) the 29 3D problems of the seed-7
#             synthetic sample x 3 directions (--oracle-only) into $WORK/synthetic_3d and its report (resumes).
#   multiplier: the direct kernels' multiplier binary: kernel GPU tests (TESTS=0: none; TESTS_K: their -k), then
#             (SWEEP=0: not) the seed-7 synthetic multiplier problems and 3D depthwise ones (--oracle-only) into
#             $WORK/multiplier (resumes) and its report.
#   halo:     bench/gpu/halo_probe.py (grouped forward from shared-memory input rows, Gluon + wgmma, beside the
#             registry's best kernel and cuDNN on the dev suite's grouped stride-1 layers) into $WORK/halo_probe.
#   halo_weight: bench/gpu/halo_weight_probe.py (grouped 3x3 stride-1 backward-weight from shared-memory rows,
#             Gluon + wgmma, beside the registry's best kernel and cuDNN on the dev suite's layers) into
#             $WORK/halo_weight_probe (BUILD=0: it compiles only the registry's best kernels it needs).
#   profiles: Nsight Compute profiles of PROFILES ("kernel@problem-key ...", bench/gpu/profiles.sh's list by default;
#             PROFILE_TIMEOUT s each, default 60) from the default registry, then every kernel GPU test (TESTS=0: not;
#             TESTS_K: a pytest -k expression) in the time left.
#   padded:   channel-padded tiles: kernel GPU tests on unaligned problems (TESTS=0: none; TESTS_K), then (SWEEP=0: not)
#             the seed-7 synthetic problems with unaligned channels and groups >= 16 channels wide x 3 directions
#             (--oracle-only) into $WORK/padded (resumes) and its report.
#   padded_groups: group-padded depthwise kernels: kernel GPU tests (TESTS_K, default padded), then (SWEEP=0: not)
#             bench/problems/unaligned_depthwise.json x 3 directions (--oracle-only) into $WORK/padded_groups (resumes).
#   rows:     training rows of refresh_sets.json's new_kernels on the models' problems they run
#             (models/data/problems/$ROWS/, ROWS default new; DIRS, KINDS, SHARD=I/N) into $WORK/${ROWS}_rows_KIND_DIR (resumes).
#   fp16_rows: the first LIMIT (default 100) problems of the models' lists (KINDS, default validation; DIRS; SHARD=I/N)
#             timed in fp16 on the current binaries, every default kernel, into $WORK/fp16_KIND_DIR (resumes): fp16
#             ground truth for the fp16 models.
#   dev:      the dev suite (../shared/bench/dev_suite.json), every default kernel and cuDNN (DEV_ARGS: e.g.
#             --oracle-only), and its
#             report.
# (Session 10 ran this script as bench/gpu/s10_call.sh with modes tests | dev | torch.)
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
left() { echo $(( ${DEADLINE_S:-560} - ($(date +%s) - ${T0:-$start}) )); }
# BUILD_ARGS: a part of the rule set (e.g. '--family dwrun --dtype bf16 --ndim 2': what a refresh of those kernels needs).
# shellcheck disable=SC2086
[ "${BUILD:-1}" = 0 ] || ( time td registry build --rule-set "${RULE_SET:-default}" ${BUILD_ARGS:-} --arch sm_90 --workers "$(nproc)" --cache-dir "$REG" --allow-failures ) > "$WORK/logs/build_default.txt" 2>&1
[ "${BUILD:-1}" = 0 ] || grep -v "^\s*\[" "$WORK/logs/build_default.txt" | tail -6
SYN=${SYN:-$PWD/.carry/synthetic}  # SYN=/tmp/...: a folder that survives the next call's tree copy on a warm machine
# sweep LOG REPORT OUT TITLE BENCH-ARGS...: an --oracle-only td bench sweep into OUT (resumes; log
# $WORK/logs/bench_LOG.txt) until the deadline, then its report in $WORK/REPORT and the report's targets.
sweep() {
  local name=$1 log=$WORK/logs/bench_$1.txt report=$WORK/$2 out=$3 title=$4; shift 4
  mkdir -p "$out"
  timeout "$(left)" td bench "$@" --oracle-only --cache-dir "$REG" --out "$out" >> "$log" 2>&1; echo "$name rc $?"
  tail -2 "$log"
  python3 bench/report.py "$out" --out "$report" --title "$title" 2>&1 | tail -2
  grep -A9 "^## Targets" "$report/report.md"
}
synth() {
  sweep synth report_synthetic "$SYN" "Synthetic problems: tiledispatch vs cuDNN (bf16)" --synthetic 100 --seed 7
  cp -r "$SYN" "$WORK/synthetic"
}
# kernel_tests NAME TESTS_K: the kernel GPU tests -k TESTS_K (the env's TESTS_K instead when set; TESTS=0: none; their
# own registry), logged to $WORK/logs/gpu_tests_NAME.txt.
kernel_tests() {
  [ "${TESTS:-1}" = 0 ] && return
  TILEDISPATCH_TEST_REGISTRY="$WORK/test_registry" timeout "$(left)" python3 -m pytest -q -m gpu -p no:cacheprovider \
    tests/kernels/test_gpu.py -k "${TESTS_K:-$2}" > "$WORK/logs/gpu_tests_$1.txt" 2>&1
  tail -3 "$WORK/logs/gpu_tests_$1.txt"
}
# tests_then_sample NAME TESTS_K FILTER TITLE: kernel_tests NAME TESTS_K, then (SWEEP=0: not) the seed-7 synthetic
# sample's problems p for which the Python expression FILTER holds x 3 directions, every default kernel and cuDNN,
# --oracle-only, into $WORK/NAME (resumes on a warm machine), and its report in $WORK/report_NAME.
tests_then_sample() {
  local name=$1 tests_k=$2 filter=$3 title=$4
  kernel_tests "$name" "$tests_k"
  [ "${SWEEP:-1}" = 0 ] && return
  python3 -c "import json, sys; from tiledispatch.native.sampler import sample_problems as s; \
print(json.dumps([p.to_dict() for p in s(100, seed=7) if eval(sys.argv[1], {}, {'p': p})]))" "$filter" \
    > "$WORK/${name}_problems.json"
  sweep "$name" "report_$name" "$WORK/$name" "$title" --problems "$WORK/${name}_problems.json"
}
# bench/gpu/$1_probe.py into $WORK/$1_probe, then TESTS_K's kernel GPU tests (their own registry) when set.
probe_then_tests() {
  timeout "$(left)" python3 "bench/gpu/$1_probe.py" --out "$WORK/$1_probe" > "$WORK/logs/$1_probe.txt" 2>&1
  echo "$1 rc $?"; grep -E "^built|probe done" "$WORK/logs/$1_probe.txt"
  if [ -n "${TESTS_K:-}" ] && [ "$(left)" -gt 60 ]; then
    TILEDISPATCH_TEST_REGISTRY="$WORK/test_registry" timeout "$(left)" python3 -m pytest -q -m gpu -p no:cacheprovider \
      tests/kernels/test_gpu.py -k "$TESTS_K" > "$WORK/logs/gpu_tests_$1.txt" 2>&1; tail -3 "$WORK/logs/gpu_tests_$1.txt"
  fi
}
# refresh_set DIR KEY: the refresh_sets.json entry of direction DIR ('new_kernels' as an anchored regex, lists spaced).
refresh_set() {
  python3 -c "import json, sys; v = json.load(open('bench/gpu/refresh_sets.json'))['sets'][sys.argv[1]][sys.argv[2]]; \
print('^(' + '|'.join(v) + ')\$' if sys.argv[2] == 'new_kernels' else ' '.join(v))" "$1" "$2"
}
# complete_new DIR KIND REGISTRY: the new_kernels of DIR over KIND's measured folders (SHARD=I/N: the training list's
# every N-th problem), from REGISTRY, into $WORK/complete_new_KIND_DIR (a later call on the warm machine resumes it).
complete_new() {
  local d=$1 kind=$2 shard=()
  # An empty list still costs the sweep's planning over every folder (minutes for a 3,000-problem training list).
  if [ "$(refresh_set "$d" new_kernels)" = '^()$' ]; then echo "complete new $kind $d: no new_kernels"; return; fi
  if [ "$kind" = train ] && [ -n "${SHARD:-}" ]; then shard=(--shard "$SHARD"); fi
  # shellcheck disable=SC2046
  timeout "$(left)" td bench --problems "models/data/problems/${kind}_$d.json" --direction "$d" \
    --complete $(refresh_set "$d" "$kind") --kernels "$(refresh_set "$d" new_kernels)" --training "${shard[@]}" \
    --cache-dir "$3" --out "$WORK/complete_new_${kind}_$d" >> "$WORK/logs/complete_new_${kind}_$d.txt" 2>&1
  echo "complete new $kind $d rc $?"; grep -E "^bench: completing" "$WORK/logs/complete_new_${kind}_$d.txt" | tail -1; tail -1 "$WORK/logs/complete_new_${kind}_$d.txt"
}
case ${1:?synth, complete, torch, planar, multiplier, padded, padded_groups, rows, refresh, new, halo_data, probe, configs, l1, dwrow, dwrun, dwrun_data, dwrun_pair, flat, harness, held, halo, halo_weight, profiles, tests, variants or dev} in
  synth) synth ;;
  complete)
    M=models/data/measured
    if [ -n "${FAMILIES:-}" ]; then select=(--families "$FAMILIES"); else select=(--kernels "${KERNELS:-_sk(?!1_)}"); fi
    for kind in train validation; do
      for d in ${DIRS:-fwd bwd_data}; do
        if [ $kind = train ]; then s5=$M/h200_s5/train_$d; else s5=$M/h200_s5/complete_validation_$d; fi
        folders="$M/h200_s3/${kind}_$d $M/h200_s4/${kind}_$d $s5 $M/h200_s6/complete_${kind}_$d $M/h200_s6/complete_prefetch_${kind}_$d $M/h200_s8/refresh_${kind}_$d"
        if [ $d = bwd_weight ]; then  # the folders bf16 bwd_weight version 6 was trained on (and their validation twins)
          folders=""
          for f in h200_s3/${kind}_$d h200_s4/${kind}_$d h200_s5/${kind}_$d h200_s6/complete_${kind}_$d h200_s6/complete_prefetch_${kind}_$d h200_s9/refresh_${kind}_$d h200_s10/complete_lean_${kind}_$d; do
            [ -d "$M/$f" ] && folders="$folders $M/$f"
          done
        fi
        # shellcheck disable=SC2086
        timeout "$(left)" td bench --problems models/data/problems/${kind}_$d.json --direction $d --complete $folders \
          "${select[@]}" --training --cache-dir "$REG" \
          --out "$WORK/complete_${NAME:-splitk}_${kind}_$d" > "$WORK/logs/complete_${NAME:-splitk}_${kind}_$d.txt" 2>&1
        echo "complete $kind $d rc $?"; grep -E "^bench: completing" "$WORK/logs/complete_${NAME:-splitk}_${kind}_$d.txt"; tail -1 "$WORK/logs/complete_${NAME:-splitk}_${kind}_$d.txt"
      done
    done
    [ -d "$SYN" ] && [ "$(left)" -gt 60 ] && synth
    ;;
  torch)
    # The C++ launch path's extension, built once per machine (its build time is in the log).
    export TILEDISPATCH_TORCH_EXT_DIR=$WORK/torch_ext
    ( time python3 -c "from tiledispatch.integrations import torch_native as t; t.extension(); print('torch_native', t.status())" ) \
      > "$WORK/logs/torch_ext_build.txt" 2>&1; grep -E "torch_native|real|rror" "$WORK/logs/torch_ext_build.txt" | tail -4
    if [ "${TESTS:-1}" != 0 ]; then
      TILEDISPATCH_REGISTRY_DIR="$REG" timeout 330 python3 -m pytest -q -s -m gpu -p no:cacheprovider tests/integrations/test_torch_native_gpu.py tests/integrations/test_torch_gpu.py tests/integrations/test_torch_dispatch.py ${TORCH_TESTS:+-k "$TORCH_TESTS"} > "$WORK/logs/gpu_tests_torch.txt" 2>&1; grep -E "C\+\+ runs|passed|failed" "$WORK/logs/gpu_tests_torch.txt" | tail -16
      [ "${SERVICE:-1}" = 0 ] || { TILEDISPATCH_REGISTRY_DIR="$REG" timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/service/test_gpu_server.py > "$WORK/logs/gpu_tests_service.txt" 2>&1; tail -3 "$WORK/logs/gpu_tests_service.txt"; }
    fi
    if [ "${CALL_COST:-1}" != 0 ]; then  # host µs per call: a depthwise 7x7 and a ResNeXt grouped 3x3 layer
      TILEDISPATCH_REGISTRY_DIR="$REG" python3 bench/torch_call_cost.py --out-dir "$WORK/call_cost" > "$WORK/logs/call_cost.txt" 2>&1
      TILEDISPATCH_REGISTRY_DIR="$REG" python3 bench/torch_call_cost.py --channels 128 --groups 32 --filter 3 --size 14 --out-dir "$WORK/call_cost_grouped" > "$WORK/logs/call_cost_grouped.txt" 2>&1
      grep -E "median" "$WORK/logs/call_cost.txt" "$WORK/logs/call_cost_grouped.txt"
    fi
    [ "${E2E:-1}" = 0 ] || TILEDISPATCH_REGISTRY_DIR="$REG" timeout "$(left)" python3 bench/torch_e2e.py --cuda-graph ${E2E_ARGS:-} --models ${MODELS:-mobilenet_v2,convnext_tiny,resnext50_32x4d} --batches ${BATCHES:-32,128} --steps ${STEPS:-2} --rounds ${ROUNDS:-45} --warmup ${WARMUP:-3} --out-dir "$WORK/torch_e2e" > "$WORK/logs/torch_e2e.txt" 2>&1; echo "e2e rc $?"; grep -E "batch|speedup|CUDA graphs" "$WORK/logs/torch_e2e.txt" | tail -20
    ;;
  planar)
    export TILEDISPATCH_TORCH_EXT_DIR=$WORK/torch_ext
    # 3D problems that are 2D ones (ConvProblem.planar): the kernel GPU tests on them (their own registry) and the
    # PyTorch ones (r2plus1d_18's (2+1)D layers, the depthwise planar layers; TESTS=0: none), then the 3D problems of
    # the synthetic sample (seed 7, 100 problems: 29 3D, 16 of them planar) x 3 directions, every default kernel
    # (3D and, on planar problems, 2D) and cuDNN, --oracle-only, into $WORK/synthetic_3d (resumes), and its report.
    if [ "${TESTS:-1}" != 0 ]; then
      [ "${KERNEL_TESTS:-1}" = 0 ] || { TILEDISPATCH_TEST_REGISTRY="$WORK/test_registry" timeout "$(left)" python3 -m pytest -q \
        -m gpu -p no:cacheprovider tests/kernels/test_gpu.py -k "planar" > "$WORK/logs/gpu_tests_planar.txt" 2>&1
        tail -3 "$WORK/logs/gpu_tests_planar.txt"; }
      TILEDISPATCH_REGISTRY_DIR="$REG" timeout "$(left)" python3 -m pytest -q -s -m gpu -p no:cacheprovider \
        tests/integrations/test_torch_gpu.py -k "${TORCH_TESTS:-planar or r2plus1d}" > "$WORK/logs/gpu_tests_torch_planar.txt" 2>&1
      grep -E "worst|passed|failed" "$WORK/logs/gpu_tests_torch_planar.txt" | tail -8
    fi
    [ "${SWEEP:-1}" = 0 ] && exit 0
    python3 -c "import json; from tiledispatch.native.sampler import sample_problems as s; \
print(json.dumps([p.to_dict() for p in s(100, seed=7) if p.ndim == 3]))" > "$WORK/synthetic_3d_problems.json"
    sweep synthetic_3d report_synthetic_3d "$WORK/synthetic_3d" \
      "Synthetic 3D problems (seed 7): tiledispatch vs cuDNN (bf16)" --problems "$WORK/synthetic_3d_problems.json"
    ;;
  multiplier)
    # The direct kernels' depthwise-multiplier binary (C/G = 1, K/G > 1): the kernel GPU tests on multiplier and
    # random odd problems, then the seed-7 synthetic sample's multiplier problems (2D and 3D) and its 3D depthwise ones.
    tests_then_sample multiplier "multiplier or odd_shapes" "p.c_per_group == 1 and (p.k_per_group > 1 or p.ndim == 3)" \
      "Synthetic multiplier and 3D depthwise problems (seed 7): tiledispatch vs cuDNN (bf16)"
    ;;
  padded)
    # Channel-padded tiles (pad_channels, native/kernels/channel_pad.py): the kernel GPU tests on unaligned problems,
    # then the seed-7 synthetic sample's problems with C/G or K/G not a multiple of 8 and a group 16 channels wide or
    # more (dense and grouped: where the v1 tiles ran).
    tests_then_sample padded "padded or odd_shapes" \
      "(p.c_per_group % 8 or p.k_per_group % 8) and max(p.c_per_group, p.k_per_group) >= 16" \
      "Synthetic problems with unaligned channels (seed 7): tiledispatch vs cuDNN (bf16)"
    ;;
  padded_groups)
    # Group-padded depthwise kernels (pad_channels on direct / dwrow, C/G = 1): the kernel GPU tests on unaligned
    # problems (TESTS=0: none; TESTS_K, default padded), then (SWEEP=0: not) bench/problems/unaligned_depthwise.json
    # (the seed-7 synthetic sample's 4 depthwise problems whose channel count is not a multiple of 8, and 6 more) x 3
    # directions, every default kernel and cuDNN (--oracle-only), into $WORK/padded_groups (resumes) and its report.
    kernel_tests padded_groups padded
    [ "${SWEEP:-1}" = 0 ] || sweep padded_groups report_padded_groups "$WORK/padded_groups" \
      "Depthwise problems with a channel count not a multiple of 8: tiledispatch vs cuDNN (bf16)" \
      --problems bench/problems/unaligned_depthwise.json
    ;;
  rows)
    # Training rows of kernels no shipped model ranks: for each direction of DIRS (default all three) and kind of KINDS,
    # its new_kernels (refresh_sets.json; a registry of only them) on the problems of the models' lists they run
    # (models/data/problems/$ROWS/ from bench/gpu/row_problems.py --select $ROWS; session 38 ran it as padded_rows on
    # ROWS=padded; SHARD=I/N: every N-th training problem), --training timing, no cuDNN, into
    # $WORK/${ROWS}_rows_KIND_DIR (resumes on a warm machine).
    ROWS=${ROWS:-new}
    python3 bench/gpu/build_new.py "$WORK/registry_new" ${DIRS:-fwd bwd_data bwd_weight} 2>&1 | tail -1 | cut -c1-200
    for d in ${DIRS:-fwd bwd_data bwd_weight}; do
      for kind in ${KINDS:-train validation}; do
        shard=(); if [ "$kind" = train ] && [ -n "${SHARD:-}" ]; then shard=(--shard "$SHARD"); fi
        timeout "$(left)" td bench --problems "models/data/problems/$ROWS/${kind}_$d.json" --direction "$d" --training \
          "${shard[@]}" --kernels "$(refresh_set "$d" new_kernels)" --no-cudnn --cache-dir "$WORK/registry_new" \
          --out "$WORK/${ROWS}_rows_${kind}_$d" >> "$WORK/logs/${ROWS}_rows_${kind}_$d.txt" 2>&1
        echo "$ROWS rows $kind $d rc $?"; tail -1 "$WORK/logs/${ROWS}_rows_${kind}_$d.txt"
      done
    done
    ;;
  fp16_rows)
    # fp16 rows of the current binaries (none since session 6): for each direction of DIRS (default all three) and kind
    # of KINDS (default validation), the first LIMIT (default 100: the problems the bf16 validation folders measured)
    # of the bf16 models' list models/data/problems/KIND_DIR.json timed in fp16, every default kernel, --training
    # timing, no cuDNN (SHARD=I/N: every N-th of them), into $WORK/fp16_KIND_DIR (resumes on a warm machine): the
    # check of the fp16 models trained on bf16 rows (models/reports/2026-11-29_h200_s37), and their own rows.
    for d in ${DIRS:-fwd bwd_data bwd_weight}; do
      for kind in ${KINDS:-validation}; do
        shard=(); if [ -n "${SHARD:-}" ]; then shard=(--shard "$SHARD"); fi
        python3 -c "import json, sys; from tiledispatch.native.bench import load_problems as l; \
print(json.dumps([p.to_dict() for p in l(sys.argv[1], [sys.argv[2]], 'fp16')[:int(sys.argv[3])]]))" \
          "models/data/problems/${kind}_$d.json" "$d" "${LIMIT:-100}" > "$WORK/fp16_problems_${kind}_$d.json"
        timeout "$(left)" td bench --problems "$WORK/fp16_problems_${kind}_$d.json" --direction "$d" --dtype fp16 \
          --training "${shard[@]}" --no-cudnn --cache-dir "$REG" --out "$WORK/fp16_${kind}_$d" \
          >> "$WORK/logs/fp16_${kind}_$d.txt" 2>&1
        echo "fp16 rows $kind $d rc $?"; tail -1 "$WORK/logs/fp16_${kind}_$d.txt"
      done
    done
    ;;
  dev)
    timeout "$(left)" td bench --problems "$TILEDISPATCH_SHARED_DIR/bench/dev_suite.json" ${DEV_ARGS:-} --cache-dir "$REG" \
      --out "$WORK/dev_suite" > "$WORK/logs/bench_dev.txt" 2>&1; echo "dev rc $?"; tail -2 "$WORK/logs/bench_dev.txt"
    python3 bench/report.py "$WORK/dev_suite" --out "$WORK/report_dev_suite" --title "Dev suite: tiledispatch vs cuDNN (bf16)" 2>&1 | tail -2
    sed -n '/## Targets/,/## Per class/p' "$WORK/report_dev_suite/report.md"
    ;;
  variants)
    for v in ${VARIANTS:?}; do
      export "${VARIANT_ENV:?}=$v"
      # shellcheck disable=SC2086
      ( time td registry build --rule-set default ${BUILD_ARGS:-} --arch sm_90 --workers "$(nproc)" --cache-dir "$REG" --allow-failures ) > "$WORK/logs/build_$v.txt" 2>&1
      grep -v "^\s*\[" "$WORK/logs/build_$v.txt" | tail -3
      # shellcheck disable=SC2086
      timeout "$(left)" td bench --problems "$TILEDISPATCH_SHARED_DIR/bench/dev_suite.json" ${VARIANT_ARGS:-} --cache-dir "$REG" \
        --out "$WORK/variant_$v" > "$WORK/logs/bench_$v.txt" 2>&1; echo "$v rc $?"; tail -1 "$WORK/logs/bench_$v.txt"
    done
    ;;
  probe)
    timeout "$(left)" python3 bench/gpu/walk_probe.py --out "$WORK/walk_probe" --directions "${PROBE_DIRECTIONS:-bwd_weight}" \
      > "$WORK/logs/walk_probe.txt" 2>&1; echo "probe rc $?"; tail -2 "$WORK/logs/walk_probe.txt"
    ;;
  refresh)
    for d in ${DIRS:-bwd_weight fwd bwd_data}; do
      for kind in ${KINDS:-train validation}; do
        # shellcheck disable=SC2046,SC2086
        timeout "$(left)" td bench --problems "models/data/problems/${kind}_$d.json" --direction "$d" \
          --refresh $(refresh_set "$d" "$kind") --refresh-within "${WITHIN:-1.25}" --training ${REFRESH_ARGS:-} --cache-dir "$REG" \
          --out "$WORK/refresh_${kind}_$d" >> "$WORK/logs/refresh_${kind}_$d.txt" 2>&1
        echo "refresh $kind $d rc $?"; grep -E "^bench: refreshing" "$WORK/logs/refresh_${kind}_$d.txt" | tail -1; tail -1 "$WORK/logs/refresh_${kind}_$d.txt"
        [ "${COMPLETE:-1}" = 0 ] || complete_new "$d" "$kind" "$REG"
      done
    done
    ;;
  new)
    # The completion half of `refresh` alone, from a registry of only the new_kernels of DIRS (seconds to build,
    # not the whole rule set; the sweep measures the registry's kernels that are in the rule set).
    python3 bench/gpu/build_new.py "$WORK/registry_new" ${DIRS:-fwd bwd_data} 2>&1 | tail -1
    for d in ${DIRS:-fwd bwd_data}; do
      for kind in ${KINDS:-train validation}; do complete_new "$d" "$kind" "$WORK/registry_new"; done
    done
    ;;
  halo_data)
    # Session 32: the halo rows for the models. For each direction of DIRS (default 'fwd bwd_data') and kind of KINDS:
    # re-time the stale halo kernels (build ids changed in session 31) within WITHIN (default 1.25) x the problem's
    # earlier best halo time on session 29's halo folders' problems into $WORK/halo_refresh_KIND_DIR; forward: then
    # time every halo kernel on the stride-2 problems it now runs (models/data/problems/strided_halo_KIND_fwd.json,
    # bench/gpu/strided_halo_problems.py) as a completion of the measured folders into $WORK/halo_strided_KIND_fwd.
    # BUILD_ARGS='--family halo --dtype bf16 --ndim 2' builds only what they time.
    for d in ${DIRS:-fwd bwd_data}; do
      for kind in ${KINDS:-train validation}; do
        # shellcheck disable=SC2046
        timeout "$(left)" td bench --problems "models/data/problems/${kind}_$d.json" --direction "$d" --training \
          --refresh $(refresh_set "$d" "$kind" | tr ' ' '\n' | grep /h200_s29/) --refresh-within "${WITHIN:-1.25}" \
          --families halo --cache-dir "$REG" --out "$WORK/halo_refresh_${kind}_$d" >> "$WORK/logs/halo_refresh_${kind}_$d.txt" 2>&1
        echo "halo refresh $kind $d rc $?"; grep -E "^bench: refreshing" "$WORK/logs/halo_refresh_${kind}_$d.txt" | tail -1
        if [ "$d" = fwd ]; then
          # shellcheck disable=SC2046
          timeout "$(left)" td bench --problems "models/data/problems/strided_halo_${kind}_fwd.json" --direction fwd --training \
            --complete $(refresh_set fwd "$kind") --families halo --cache-dir "$REG" --out "$WORK/halo_strided_${kind}_fwd" \
            >> "$WORK/logs/halo_strided_${kind}_fwd.txt" 2>&1
          echo "halo strided $kind rc $?"; grep -E "^bench: completing" "$WORK/logs/halo_strided_${kind}_fwd.txt" | tail -1
        fi
      done
    done
    ;;
  configs)
    kernel_lists=()
    for list in ${PROBE_KERNELS:-stages_probe_kernels.json}; do kernel_lists+=(--kernels "bench/gpu/$list"); done
    timeout "$(left)" python3 bench/gpu/config_probe.py --out "$WORK/config_probe" "${kernel_lists[@]}" \
      --variants "${PROBE_VARIANTS:-cg}" > "$WORK/logs/config_probe.txt" 2>&1
    echo "configs rc $?"; grep -c " ok " "$WORK/logs/config_probe.txt"; head -2 "$WORK/logs/config_probe.txt"
    ;;
  l1)
    timeout "$(left)" python3 bench/gpu/config_probe.py --out "$WORK/l1_probe" > "$WORK/logs/l1_probe.txt" 2>&1
    echo "l1 rc $?"; grep -c " ok " "$WORK/logs/l1_probe.txt"; head -2 "$WORK/logs/l1_probe.txt"
    ;;
  dwrow|flat|dwrun|dwrun_data|dwrun_pair|dwrun_stages) probe_then_tests "$1" ;;
  halo)
    timeout "$(left)" python3 bench/gpu/halo_probe.py --out "$WORK/halo_probe" > "$WORK/logs/halo_probe.txt" 2>&1
    echo "halo rc $?"; tail -3 "$WORK/logs/halo_probe.txt"
    ;;
  halo_weight)
    timeout "$(left)" python3 bench/gpu/halo_weight_probe.py --out "$WORK/halo_weight_probe" \
      > "$WORK/logs/halo_weight_probe.txt" 2>&1
    echo "halo_weight rc $?"; tail -3 "$WORK/logs/halo_weight_probe.txt"
    ;;
  harness)
    timeout "$(left)" python3 bench/gpu/harness_check.py --out "$WORK/harness" > "$WORK/logs/harness.txt" 2>&1
    echo "harness rc $?"; tail -3 "$WORK/logs/harness.txt"
    python3 bench/gpu/harness_check.py --out "$WORK/harness" --write-problems /tmp/harness_problems.json
    timeout "$(left)" td bench --problems /tmp/harness_problems.json --direction bwd_weight --cache-dir /tmp/harness_registry \
      --out "$WORK/harness/bench" > "$WORK/logs/harness_bench.txt" 2>&1; echo "bench rc $?"; tail -2 "$WORK/logs/harness_bench.txt"
    ;;
  held)
    timeout "$(left)" python3 bench/gpu/held_probe.py --out "$WORK/held_probe" > "$WORK/logs/held_probe.txt" 2>&1
    echo "held rc $?"; tail -2 "$WORK/logs/held_probe.txt"
    if [ -n "${PROFILES:-}" ] && [ "$(left)" -gt 90 ]; then
      REPO=$PWD REGISTRY=/tmp/held_registry timeout $(( $(left) - 15 )) bash bench/gpu/profiles.sh
    fi
    ;;
  profiles)
    REPO=$PWD REGISTRY=$REG PROFILE_TIMEOUT=${PROFILE_TIMEOUT:-60} timeout "$(left)" bash bench/gpu/profiles.sh
    if [ "${TESTS:-1}" != 0 ] && [ "$(left)" -gt 60 ]; then
      TILEDISPATCH_TEST_REGISTRY="$REG" timeout "$(left)" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu.py ${TESTS_K:+-k "$TESTS_K"} > "$WORK/logs/gpu_tests_kernels.txt" 2>&1
      tail -3 "$WORK/logs/gpu_tests_kernels.txt"
    fi
    ;;
  tests)
    TILEDISPATCH_TEST_REGISTRY="$REG" timeout "$(left)" python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_gpu.py ${TESTS_K:+-k "$TESTS_K"} > "$WORK/logs/gpu_tests_kernels.txt" 2>&1
    tail -3 "$WORK/logs/gpu_tests_kernels.txt"
    ;;
esac
tar -czf "$OUT/results.tar.gz" -C "$WORK" --exclude=registry --exclude=test_registry . 2>/dev/null
echo "elapsed $(( $(date +%s) - start )) s"
