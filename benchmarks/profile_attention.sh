#!/usr/bin/env bash
# On the GPU machine, from the repository root (after scripts/gpu-suite or with carry/build staged): Nsight
# Compute profiles of weft's attention kernel, one per configuration, for the shape SHAPE (a bench_attention
# --shapes glob; default d128-bf16-noncausal-s4096). For each configuration (WEFT_ATTENTION_CONFIG values,
# "BN,stages,pingpong,overlap"; "default" = attention_config(D)) it writes into $OUT:
#   NAME.ncu-rep         the report (open it with ncu-ui),
#   NAME.details.txt     every section of the details page (throughput, warp states, stall reasons, ...),
#   NAME.sass.csv        the SASS with per-instruction warp-stall samples (the source page),
# where NAME is prof-<config with commas as dashes>.
# Usage: benchmarks/profile_attention.sh [SHAPE] [CONFIG ...]
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/weft-gpu}
mkdir -p "$out"
if [[ ! -f build/libweft.so && -d carry/build ]]; then
  rm -rf build && cp -r carry/build build && gunzip -f build/libweft.so.gz
fi
shape=${1:-d128-bf16-noncausal-s4096}
shift || true
configs=("$@")
(( ${#configs[@]} )) || configs=(default)
export WEFT_CACHE_DIR=$(mktemp -d /tmp/weft-profile-cache.XXXXXX)
for cfg in "${configs[@]}"; do
  name=prof-${cfg//,/-}
  if [[ $cfg == default ]]; then unset WEFT_ATTENTION_CONFIG; else export WEFT_ATTENTION_CONFIG=$cfg; fi
  # The first weft launches are the correctness check; profile one timed call after them.
  ncu --clock-control none --set full --import-source no -k regex:attention_fwd --launch-skip 4 --launch-count 1 \
      -f -o "$out/$name" \
      python3 benchmarks/bench_attention.py --lib build/benchmarks/libweft_attention.so --skip-ragged \
      --shapes "$shape" --rounds 1 --min-calls 2 --min-time 0 --max-calls 2 --warmup 2 >"$out/$name.run.log" 2>&1
  echo "== $cfg: ncu exit $?"
  ncu -i "$out/$name.ncu-rep" --page details >"$out/$name.details.txt" 2>&1
  ncu -i "$out/$name.ncu-rep" --page source --csv --print-source sass >"$out/$name.sass.csv" 2>&1
  grep -E "Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Issue Slots Busy" "$out/$name.details.txt" | head
done
