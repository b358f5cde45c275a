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
python3 -m bayesblis validate "$DATA" --holdout "$HOLDOUT" --hardware H100 --out "$OUT" \
    --max-obs-per-run 200 --fit-draws 600 --fit-tune 600 --max-treedepth 7 --target-accept 0.95 \
    "${@:3}"
