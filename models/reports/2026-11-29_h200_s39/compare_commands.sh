#!/bin/bash
# Session 39: the shipped bf16 models (fwd/26, bwd_data/24, bwd_weight/21) beside their predecessors (25, 23, 20) on
# this session's H200 runs, which no model was trained on: the synthetic report of record and the multiplier sweep.
cd "$(dirname "$0")/../../.." || exit 1
OUT=models/reports/2026-11-29_h200_s39
declare -A OLD=([fwd]=25 [bwd_data]=23 [bwd_weight]=20) NEW=([fwd]=26 [bwd_data]=24 [bwd_weight]=21)
for d in fwd bwd_data bwd_weight; do
  a=models/artifacts/lgbm-sm_90-bf16-$d
  for pair in "synthetic_s39:bench/results/2026-11-29_h200_s39/raw/synthetic_calls2-3" \
      "multiplier_s39:bench/results/2026-11-29_h200_s39/raw/multiplier_call1"; do
    name=${pair%%:*}; data=${pair#*:}
    .venv/bin/python -m tiledispatch.models.compare --data "$data" --direction $d --models "$a/${OLD[$d]}" "$a/${NEW[$d]}" \
      --rule-set default --out $OUT/compare_${name}_$d.json > $OUT/compare_${name}_$d.md 2>&1
    echo "$name $d rc $?"; sed -n 3,6p $OUT/compare_${name}_$d.md
  done
done
