#!/usr/bin/env bash
# Training/validation data collection on the GPU machine, in rounds so every direction gains data
# even when the sitting is cut short; resumable (bench skips measured problems). Run after
# `session.sh build`. Data lands in $WORK/data/{train,validation}_<direction>/.
set -uo pipefail
WORK=${WORK:-/tmp/tdwork}
REG="$WORK/registry"
DTYPE=${DTYPE:-bf16}
SUFFIX=${SUFFIX:-}            # "_fp16" for the fp16 lists
ROUNDS=${ROUNDS:-10}
TRAIN_STEP=${TRAIN_STEP:-150}
VALID_STEP=${VALID_STEP:-60}
VALID_MAX=${VALID_MAX:-1000}  # validation problems stop growing here; later rounds add training only
export PYTHONUNBUFFERED=1
td() { python3 -m tiledispatch.cli "$@"; }
for round in $(seq 1 "$ROUNDS"); do
  for direction in fwd bwd_data bwd_weight; do
    td bench --problems "models/data/problems/validation_${direction}${SUFFIX}.json" --direction "$direction" \
      --dtype "$DTYPE" --cache-dir "$REG" --out "$WORK/data/validation_${direction}${SUFFIX}" --training \
      --limit $(( round * VALID_STEP < VALID_MAX ? round * VALID_STEP : VALID_MAX )) 2>&1 | grep -E "^bench: [0-9]" 
    td bench --problems "models/data/problems/train_${direction}${SUFFIX}.json" --direction "$direction" \
      --dtype "$DTYPE" --cache-dir "$REG" --out "$WORK/data/train_${direction}${SUFFIX}" --oracle-only --training \
      --max-kernels 48 --limit $((round * TRAIN_STEP)) 2>&1 | grep -E "^bench: [0-9]"
    echo "round $round $direction done $(date -u +%H:%M:%S)"
  done
done
