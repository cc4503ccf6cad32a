#!/bin/bash
# Session 41: declare the new_rows folders completions, then train bf16 candidates (shipped commands + the new folder).
set -e
cd /work/main
M=models/data/measured/h200_s41
declare -A OLD=([fwd]=26 [bwd_data]=24 [bwd_weight]=21) NEW=([fwd]=27 [bwd_data]=25 [bwd_weight]=22)
for d in fwd bwd_data bwd_weight; do
  for kind in train validation; do
    earlier=$(python3 -c "import json,sys; print(' '.join(json.load(open('bench/gpu/refresh_sets.json'))['sets'][sys.argv[1]][sys.argv[2]]))" $d $kind)
    .venv/bin/python -m tiledispatch.models.completion $M/new_rows_${kind}_$d --completes $earlier | tail -1
  done
done
for d in ${DIRS:-fwd bwd_data bwd_weight}; do
  cmd=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['command'])" models/artifacts/lgbm-sm_90-bf16-$d/${OLD[$d]}/train_manifest.json)
  cmd=${cmd/--out \/tmp\/cand38/--out /tmp/cand41}
  cmd=${cmd/--version ${OLD[$d]}/--version ${NEW[$d]}}
  cmd=${cmd/ --direction/ $M/new_rows_train_$d --direction}
  cmd=${cmd/python -m/.venv/bin/python -m}
  echo "$cmd" > /tmp/cand41_cmd_$d.txt
  ( time $cmd ) > /tmp/cand41_train_$d.log 2>&1
  tail -3 /tmp/cand41_train_$d.log
done
# fp16 candidates: the shipped fp16 commands (--dtype fp16 --also-dtype bf16) with the same new folder.
declare -A OLD=([fwd]=4 [bwd_data]=4 [bwd_weight]=5) NEW=([fwd]=5 [bwd_data]=5 [bwd_weight]=6)
for d in fwd bwd_data bwd_weight; do
  cmd=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['command'])" models/artifacts/lgbm-sm_90-fp16-$d/${OLD[$d]}/train_manifest.json)
  cmd=${cmd/--out \/tmp\/cand38/--out /tmp/cand41}
  cmd=${cmd/--version ${OLD[$d]}/--version ${NEW[$d]}}
  cmd=${cmd/ --direction/ $M/new_rows_train_$d --direction}
  cmd=${cmd/python -m/.venv/bin/python -m}
  echo "$cmd" > /tmp/cand41_cmd_fp16_$d.txt
  ( time $cmd ) > /tmp/cand41_train_fp16_$d.log 2>&1
  tail -3 /tmp/cand41_train_fp16_$d.log
done
