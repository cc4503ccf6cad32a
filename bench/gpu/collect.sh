#!/usr/bin/env bash
# Training/validation data collection on the GPU machine, in rounds so every direction gains data
# even when the sitting is cut short; resumable (bench skips measured problems). Run after
# `session.sh build`. Data lands in $WORK/data/{train,validation}_<direction><SUFFIX><TAG>/.
# One process per GPU: CUDA_VISIBLE_DEVICES=i SHARD=i/N TAG=.g<i> (bench/gpu/collect_gpus.sh does it),
# each measuring every N-th problem of the same prefixes into its own folders.
set -uo pipefail
WORK=${WORK:-/tmp/tdwork}
REG="$WORK/registry"
DTYPE=${DTYPE:-bf16}
SUFFIX=${SUFFIX:-}            # "_fp16" for the fp16 lists
ROUNDS=${ROUNDS:-10}
TRAIN_STEP=${TRAIN_STEP:-150}
VALID_STEP=${VALID_STEP:-60}
VALID_MAX=${VALID_MAX:-1000}  # validation problems stop growing here; later rounds add training only
DIRECTIONS=${DIRECTIONS:-fwd bwd_data bwd_weight}
SHARD=${SHARD:-0/1}
TAG=${TAG:-}
LOGS="$WORK/logs/collect$TAG"
mkdir -p "$LOGS"
export PYTHONUNBUFFERED=1
td() { python3 -m tiledispatch.cli "$@"; }
# Full bench output goes to one log per list (per-problem times for the next sitting's planning);
# the console gets the summary lines.
for round in $(seq 1 "$ROUNDS"); do
  for direction in $DIRECTIONS; do
    td bench --problems "models/data/problems/validation_${direction}${SUFFIX}.json" --direction "$direction" \
      --dtype "$DTYPE" --cache-dir "$REG" --out "$WORK/data/validation_${direction}${SUFFIX}${TAG}" --training \
      --shard "$SHARD" --limit $(( round * VALID_STEP < VALID_MAX ? round * VALID_STEP : VALID_MAX )) \
      >> "$LOGS/validation_${direction}${SUFFIX}.txt" 2>&1
    tail -n 2 "$LOGS/validation_${direction}${SUFFIX}.txt" | grep -E "^\[|^bench" | head -1
    # Training problems need no cuDNN rows (only validation reports compare with cuDNN's heuristic).
    td bench --problems "models/data/problems/train_${direction}${SUFFIX}.json" --direction "$direction" \
      --dtype "$DTYPE" --cache-dir "$REG" --out "$WORK/data/train_${direction}${SUFFIX}${TAG}" --oracle-only --training \
      --no-cudnn --max-kernels 48 --shard "$SHARD" --limit $((round * TRAIN_STEP)) \
      >> "$LOGS/train_${direction}${SUFFIX}.txt" 2>&1
    tail -n 2 "$LOGS/train_${direction}${SUFFIX}.txt" | grep -E "^\[|^bench" | head -1
    echo "round $round $direction done $(date -u +%H:%M:%S)"
  done
done
