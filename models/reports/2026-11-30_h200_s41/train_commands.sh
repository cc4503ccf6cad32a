#!/bin/bash
# Session 41: declare the new_rows folders completions, then train the candidates: each shipped model's own command
# (its train_manifest.json) with the session's training folder added (fp16: --dtype fp16 --also-dtype bf16, the same rows).
set -e
cd /work/main
M=models/data/measured/h200_s41
for d in fwd bwd_data bwd_weight; do
  for kind in train validation; do
    earlier=$(python3 -c "import json,sys; print(' '.join(json.load(open('bench/gpu/refresh_sets.json'))['sets'][sys.argv[1]][sys.argv[2]]))" $d $kind)
    .venv/bin/python -m tiledispatch.models.completion $M/new_rows_${kind}_$d --completes $earlier | tail -1
  done
done
# dtype direction shipped-version candidate-version
for spec in "bf16 fwd 26 27" "bf16 bwd_data 24 25" "bf16 bwd_weight 21 22" "fp16 fwd 4 5" "fp16 bwd_data 4 5" "fp16 bwd_weight 5 6"; do
  read -r dtype d old new <<< "$spec"
  cmd=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['command'])" models/artifacts/lgbm-sm_90-$dtype-$d/$old/train_manifest.json)
  cmd=${cmd/--out \/tmp\/cand38/--out /tmp/cand41}
  cmd=${cmd/--version $old/--version $new}
  cmd=${cmd/ --direction/ $M/new_rows_train_$d --direction}
  cmd=${cmd/python -m/.venv/bin/python -m}
  ( time $cmd ) > /tmp/cand41_train_${dtype}_$d.log 2>&1
  tail -3 /tmp/cand41_train_${dtype}_$d.log
done
