#!/bin/bash
# Session 41 model comparisons: shipped bf16 / fp16 models vs the candidates trained with the s41 new-kernel rows
# (candidates in /tmp/cand41 then; the same versions under models/artifacts/ now).
cd /work/main
OUT=models/reports/2026-11-30_h200_s41; mkdir -p $OUT
declare -A OLD=([fwd]=26 [bwd_data]=24 [bwd_weight]=21) NEW=([fwd]=27 [bwd_data]=25 [bwd_weight]=22)
for d in ${DIRS:-fwd bwd_data bwd_weight}; do
  old=models/artifacts/lgbm-sm_90-bf16-$d/${OLD[$d]}; new=/tmp/cand41/lgbm-sm_90-bf16-$d/${NEW[$d]}
  # (refresh_sets.json's validation lists end with models/data/measured/h200_s41/new_rows_validation_$d now)
  val=$(python3 -c "import json,sys; print(' '.join(json.load(open('bench/gpu/refresh_sets.json'))['sets'][sys.argv[1]]['validation']))" $d)
  for pair in "dev_s41:bench/results/2026-11-30_h200_s41/raw/dev_suite_call2" "dev_s40:bench/results/2026-11-29_h200_s40/raw/dev_suite_call5" \
      "validation:$val" "synthetic_s41:bench/results/2026-11-30_h200_s41/raw/synthetic_calls2-3"; do
    name=${pair%%:*}; data=${pair#*:}
    .venv/bin/python -m tiledispatch.models.compare --data $data --direction $d --models $old $new --rule-set default --out $OUT/compare_${name}_$d.json > $OUT/compare_${name}_$d.md 2>&1
    echo "$name $d rc $?"; sed -n 3,6p $OUT/compare_${name}_$d.md
  done
done
cd /work/main
OUT=models/reports/2026-11-30_h200_s41
declare -A OLD=([fwd]=4 [bwd_data]=4 [bwd_weight]=5) NEW=([fwd]=5 [bwd_data]=5 [bwd_weight]=6)
for d in fwd bwd_data bwd_weight; do
  a=models/artifacts/lgbm-sm_90-fp16-$d
  .venv/bin/python -m tiledispatch.models.compare --data models/data/measured/h200_s38/fp16_validation_$d --direction $d --dtype fp16 \
    --models $a/${OLD[$d]} /tmp/cand41/lgbm-sm_90-fp16-$d/${NEW[$d]} --rule-set default \
    --out $OUT/compare_fp16_validation_$d.json > $OUT/compare_fp16_validation_$d.md 2>&1
  echo "fp16 $d rc $?"; sed -n 3,6p $OUT/compare_fp16_validation_$d.md
done
