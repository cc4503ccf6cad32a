#!/usr/bin/env bash
# Heuristic data on every GPU of the machine at once: one collect.sh per GPU, each measuring every
# N-th problem (--shard i/N) into folders tagged .g<i>, until DEADLINE_S; then interrupts them
# (SIGTERM: the sweep writes what it has measured before it exits) and packs $WORK/data and the logs
# into $OUT/data.tar.gz. Resumable: the next call continues where this one stopped. Needs the
# registry ($WORK/registry, `final.sh` step build) and runs from the tree final.sh prepared.
#   DEADLINE_S=540 bash bench/gpu/collect_gpus.sh
# PHASES: what each GPU runs in turn ("bf16 fp16": the bf16 lists with the round settings from the
# environment, then the fp16 lists with FP16_* settings). COMPLETE_FROM: session folders whose
# validation problems get a completion sweep on GPU 0 first (kernels added to the rule set since).
set -uo pipefail
WORK=${WORK:-/tmp/tdwork}
OUT=${OUT:-/tmp/out}
DEADLINE_S=${DEADLINE_S:-540}
GPUS=${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)}
cd /tmp/repo || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
START=$(date +%s)
mkdir -p "$WORK/logs" "$WORK/data"
# Problems already measured with the same kernels (SEED_DATA) are skipped: each GPU's folders start with
# copies of those shards, named rows-seed-* so that merging the new data leaves them out.
# SEED_DATA may name several session folders (space-separated).
if [ -n "${SEED_DATA:-}" ] && [ ! -e "$WORK/data/.seeded" ]; then
  for session in $SEED_DATA; do
    for list in "$session"/*/; do
      name=$(basename "$list")
      for ((gpu = 0; gpu < GPUS; gpu++)); do
        target="$WORK/data/$name.g$gpu"
        mkdir -p "$target"
        for shard in "$list"rows-*.parquet; do
          cp "$shard" "$target/rows-seed-$(basename "$session")-$(basename "$shard" .parquet | cut -d- -f2).parquet"
        done
      done
    done
  done
  touch "$WORK/data/.seeded"
fi
phase() {  # one collect.sh run of a phase, with that phase's settings
  case $1 in
    bf16) bash bench/gpu/collect.sh ;;
    fp16) DTYPE=fp16 SUFFIX=_fp16 VALID_STEP=${FP16_VALID_STEP:-25} VALID_MAX=${FP16_VALID_MAX:-50} \
            TRAIN_STEP=${FP16_TRAIN_STEP:-150} ROUNDS=${FP16_ROUNDS:-2} bash bench/gpu/collect.sh ;;
    *) echo "collect_gpus: unknown phase $1 (bf16, fp16)"; return 2 ;;
  esac
}
export -f phase
pids=()
for ((gpu = 0; gpu < GPUS; gpu++)); do
  (
    # FIRST_ON_LAST_GPU (e.g. "bash bench/gpu/profiles.sh") runs on the last GPU before its share starts.
    if [ "$gpu" -eq $((GPUS - 1)) ] && [ -n "${FIRST_ON_LAST_GPU:-}" ]; then
      CUDA_VISIBLE_DEVICES=$gpu timeout $((DEADLINE_S - 60)) bash -c "$FIRST_ON_LAST_GPU" > "$WORK/logs/first_on_last_gpu.txt" 2>&1
    fi
    if [ "$gpu" -eq 0 ] && [ -n "${COMPLETE_FROM:-}" ]; then
      for direction in fwd bwd_data; do
        CUDA_VISIBLE_DEVICES=0 timeout -s TERM -k 30 $((DEADLINE_S - ($(date +%s) - START))) \
          python3 -m tiledispatch.cli bench --problems "models/data/problems/validation_$direction.json" \
          --direction "$direction" --cache-dir "$WORK/registry" --training --out "$WORK/data/complete_validation_$direction" \
          --complete $(for s in $COMPLETE_FROM; do echo "$s/validation_$direction"; done) \
          >> "$WORK/logs/complete_validation_$direction.txt" 2>&1
        tail -n 2 "$WORK/logs/complete_validation_$direction.txt"
      done
    fi
    for name in ${PHASES:-bf16}; do
      left=$((DEADLINE_S - ($(date +%s) - START)))
      [ "$left" -gt 30 ] || break
      CUDA_VISIBLE_DEVICES=$gpu SHARD="$gpu/$GPUS" TAG=".g$gpu" timeout -s TERM -k 30 "$left" bash -c "phase $name" \
        >> "$WORK/logs/collect_console.g$gpu.txt" 2>&1
    done
  ) &
  pids+=($!)
done
wait "${pids[@]}"
[ -n "${FIRST_ON_LAST_GPU:-}" ] && tail -n 12 "$WORK/logs/first_on_last_gpu.txt"
for ((gpu = 0; gpu < GPUS; gpu++)); do echo "--- GPU $gpu"; tail -n 4 "$WORK/logs/collect_console.g$gpu.txt"; done
mkdir -p "$OUT"
tar -czf "$OUT/data.tar.gz" -C "$WORK" data logs $( [ -d "$WORK/ncu" ] && echo ncu)
du -sh "$OUT/data.tar.gz"
