#!/usr/bin/env bash
# Completion sweeps of new kernels over every measured problem list, on several GPUs at once: for each list
# (train_<d>, validation_<d> and their _fp16), the rule set's kernels of FAMILIES that the list's measured
# folders lack (`bench --complete --families`, --training timing, no cuDNN), sharded over the GPUs, into
# $WORK/data/<TAG>_<list>.g<i>. Merge afterwards with models/merge_gpu_shards.py. Used in session 6 for
# the dwroll kernels (models/data/measured/h200_s6/). Needs the registry ($WORK/registry, final.sh step
# build) and runs from the tree final.sh prepared (/tmp/repo).
#   FAMILIES=dwroll TAG=dwroll GPUS="2 3" DEADLINE_S=300 bash bench/gpu/complete_family.sh
# SESSIONS: the measured session folders whose lists are completed (default: every models/data/measured/h200_s*).
set -uo pipefail
WORK=${WORK:-/tmp/tdwork}
FAMILIES=${FAMILIES:?FAMILIES: comma-separated kernel families to complete, e.g. dwroll}
TAG=${TAG:-complete}
DEADLINE_S=${DEADLINE_S:-540}
GPUS=(${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader)})
LISTS=${LISTS:-"validation_fwd validation_bwd_data validation_bwd_weight train_fwd train_bwd_data train_bwd_weight
  validation_fwd_fp16 validation_bwd_data_fp16 validation_bwd_weight_fp16 train_fwd_fp16 train_bwd_data_fp16
  train_bwd_weight_fp16"}
cd /tmp/repo || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
SESSIONS=${SESSIONS:-$(ls -d models/data/measured/h200_s* 2>/dev/null)}
START=$(date +%s)
left() { echo $(( DEADLINE_S - ($(date +%s) - START) )); }
mkdir -p "$WORK/data" "$WORK/logs"
index=0
for gpu in "${GPUS[@]}"; do
  (
    for list in $LISTS; do
      direction=${list#*_}; direction=${direction%_fp16}; dtype=bf16; [[ $list == *_fp16 ]] && dtype=fp16
      # every folder that measured this list's problems: the plain sweeps and earlier completions
      measured=$(for session in $SESSIONS; do for folder in "$session"/{,complete_,complete_*_}"$list"; do
                   [ -d "$folder" ] && echo "$folder"; done; done | sort -u)
      [ -n "$measured" ] || continue
      [ "$(left)" -gt 40 ] || break
      # shellcheck disable=SC2086
      CUDA_VISIBLE_DEVICES=$gpu timeout -s TERM -k 20 $(( $(left) - 30 )) python3 -m tiledispatch.cli bench \
        --problems "models/data/problems/$list.json" --direction "$direction" --dtype "$dtype" --training \
        --cache-dir "$WORK/registry" --families "$FAMILIES" --shard "$index/${#GPUS[@]}" \
        --out "$WORK/data/${TAG}_$list.g$gpu" --complete $measured >> "$WORK/logs/${TAG}.g$gpu.txt" 2>&1
    done
  ) &
  index=$((index + 1))
done
wait
for gpu in "${GPUS[@]}"; do echo "--- GPU $gpu"; grep -c "rows, best" "$WORK/logs/${TAG}.g$gpu.txt"; tail -n 1 "$WORK/logs/${TAG}.g$gpu.txt"; done
