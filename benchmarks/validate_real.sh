#!/usr/bin/env bash
# Leave-one-out validation on the 16 measured H100 runs (issue: real-trace validation).
# Usage: bash benchmarks/validate_real.sh [experiment|model] [OUT.json] [validate options...]
# e.g. bash benchmarks/validate_real.sh model /tmp/m2.json --seed 2 --profiles ../shared/data/operator-profiles
set -euo pipefail
cd "$(dirname "$0")/.."
HOLDOUT="${1:-experiment}"
OUT="${2:-benchmarks/results/validate-${HOLDOUT}.json}"
DATA="${BAYESBLIS_DATA:-../shared/data}/real/h100-inference-perf"
mkdir -p "$(dirname "$OUT")"
# 16 folds by experiment: short fold fits (about 5 min in all). 4 folds by model: longer
# fits (largest r_hat 1.006-1.03, about 10 min); at 600 draws and depth 7 their r_hat reached
# 1.19 and a fold's median moved by up to 4 points with the random stream.
if [ "$HOLDOUT" = model ]; then
    FOLD_FIT=(--fit-draws 1500 --fit-tune 1000 --max-treedepth 10)
else
    FOLD_FIT=(--fit-draws 600 --fit-tune 600 --max-treedepth 7)
fi
python3 -m bayesblis validate "$DATA" --holdout "$HOLDOUT" --hardware H100 --out "$OUT" \
    --max-obs-per-run 200 "${FOLD_FIT[@]}" --target-accept 0.95 "${@:3}"
