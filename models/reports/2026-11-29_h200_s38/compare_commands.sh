#!/bin/bash
# Session 38 model comparisons: shipped bf16 models vs the candidates trained with the s38 padded rows.
cd /work/main
OUT=models/reports/2026-11-29_h200_s38; mkdir -p $OUT
declare -A OLD=([fwd]=25 [bwd_data]=23 [bwd_weight]=20) NEW=([fwd]=26 [bwd_data]=24 [bwd_weight]=21)
for d in fwd bwd_data bwd_weight; do
  old=models/artifacts/lgbm-sm_90-bf16-$d/${OLD[$d]}; new=/tmp/cand38/lgbm-sm_90-bf16-$d/${NEW[$d]}
  val=$(python3 -c "import json,sys; print(' '.join(json.load(open('bench/gpu/refresh_sets.json'))['sets'][sys.argv[1]]['validation']))" $d)
  dev=bench/results/2026-11-29_h200_s33/raw/dev_suite_call2; [ $d = bwd_weight ] && dev=bench/results/2026-11-29_h200_s34/raw/dev_suite_bwd_weight_call1
  for pair in "padded_groups_s38:bench/results/2026-11-29_h200_s38/raw/padded_groups_call1" "validation:$val" "dev:$dev" \
      "synthetic_s34:bench/results/2026-11-29_h200_s34/raw/synthetic_calls1-3" "multiplier_s35:bench/results/2026-11-29_h200_s35/raw/multiplier_calls3-4" \
      "padded_s36:bench/results/2026-11-29_h200_s36/raw/padded_retime_call8"; do
    name=${pair%%:*}; data=${pair#*:}
    .venv/bin/python -m tiledispatch.models.compare --data $data --direction $d --models $old $new --rule-set default --out $OUT/compare_${name}_$d.json > $OUT/compare_${name}_$d.md 2>&1
    echo "$name $d rc $?"; sed -n 3,6p $OUT/compare_${name}_$d.md
  done
done
# fp16 models on fp16 measurements (h200_s38/fp16_validation_*): session 6's, session 37's (bf16 rows), the candidates.
cd /work/main
OUT=models/reports/2026-11-29_h200_s38
declare -A S6=([fwd]=2 [bwd_data]=2 [bwd_weight]=3) OLD=([fwd]=3 [bwd_data]=3 [bwd_weight]=4) NEW=([fwd]=4 [bwd_data]=4 [bwd_weight]=5)
for d in fwd bwd_data bwd_weight; do
  a=models/artifacts/lgbm-sm_90-fp16-$d
  .venv/bin/python -m tiledispatch.models.compare --data models/data/measured/h200_s38/fp16_validation_$d --direction $d --dtype fp16 \
    --models $a/${OLD[$d]} $a/${S6[$d]} /tmp/cand38/lgbm-sm_90-fp16-$d/${NEW[$d]} --rule-set default \
    --out $OUT/compare_fp16_validation_$d.json > $OUT/compare_fp16_validation_$d.md 2>&1
  echo "fp16 $d rc $?"; sed -n 1,12p $OUT/compare_fp16_validation_$d.md
done
