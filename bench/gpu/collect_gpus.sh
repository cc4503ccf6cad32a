#!/usr/bin/env bash
# Heuristic data on every GPU of the machine at once: one collect.sh per GPU, each measuring every
# N-th problem (--shard i/N) into folders tagged .g<i>, until DEADLINE_S; then interrupts them
# (SIGTERM: the sweep writes what it has measured before it exits) and packs $WORK/data and the logs
# into $OUT/data.tar.gz. Resumable: the next call continues where this one stopped. Needs the
# registry ($WORK/registry, `final.sh` step build) and runs from the tree final.sh prepared.
#   DEADLINE_S=540 bash bench/gpu/collect_gpus.sh
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
if [ -n "${SEED_DATA:-}" ]; then
  for list in "$SEED_DATA"/*/; do
    name=$(basename "$list")
    for ((gpu = 0; gpu < GPUS; gpu++)); do
      target="$WORK/data/$name.g$gpu"
      [ -d "$target" ] && continue
      mkdir -p "$target"
      for shard in "$list"rows-*.parquet; do cp "$shard" "$target/rows-seed-$(basename "$shard" .parquet | cut -d- -f2).parquet"; done
    done
  done
fi
pids=()
for ((gpu = 0; gpu < GPUS; gpu++)); do
  (
    # FIRST_ON_LAST_GPU (e.g. "bash bench/gpu/profiles.sh") runs on the last GPU before its share starts.
    if [ "$gpu" -eq $((GPUS - 1)) ] && [ -n "${FIRST_ON_LAST_GPU:-}" ]; then
      CUDA_VISIBLE_DEVICES=$gpu timeout $((DEADLINE_S - 60)) bash -c "$FIRST_ON_LAST_GPU" > "$WORK/logs/first_on_last_gpu.txt" 2>&1
    fi
    CUDA_VISIBLE_DEVICES=$gpu SHARD="$gpu/$GPUS" TAG=".g$gpu" \
      timeout -s TERM -k 30 $((DEADLINE_S - ($(date +%s) - START))) bash bench/gpu/collect.sh \
      >> "$WORK/logs/collect_console.g$gpu.txt" 2>&1
  ) &
  pids+=($!)
done
wait "${pids[@]}"
[ -n "${FIRST_ON_LAST_GPU:-}" ] && tail -n 12 "$WORK/logs/first_on_last_gpu.txt"
for ((gpu = 0; gpu < GPUS; gpu++)); do echo "--- GPU $gpu"; tail -n 4 "$WORK/logs/collect_console.g$gpu.txt"; done
mkdir -p "$OUT"
tar -czf "$OUT/data.tar.gz" -C "$WORK" data logs $( [ -d "$WORK/ncu" ] && echo ncu)
du -sh "$OUT/data.tar.gz"
