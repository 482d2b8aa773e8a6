#!/usr/bin/env bash
# On the GPU machine, from the repository root: weft's attention forward against cuDNN and FlashAttention-2
# (benchmarks/bench_attention.py) in one Python process. Run it after scripts/gpu-suite has unpacked the
# staged build into build/ (or alone, with carry/build staged by scripts/stage-gpu-build: it unpacks it the
# same way then). Writes attention.log, attention.json and attention.png into $OUT (or /tmp/weft-gpu): three
# files, so that with gpu-suite's five the eight files the device tool brings back are enough.
# Arguments go to bench_attention.py, e.g. --quick, or --shapes 'd128-bf16-*'.
# Exit status: bench_attention.py's (1 when a check failed, 2 when the library cannot be used).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/weft-gpu}
mkdir -p "$out"
log=$out/attention.log
lib=build/benchmarks/libweft_attention.so

if [[ ! -f build/libweft.so && -d carry/build ]]; then   # gpu-suite did not run: unpack as it does
  rm -rf build && cp -r carry/build build && gunzip -f build/libweft.so.gz
fi
if [[ ! -f $lib ]]; then
  echo "run_attention_bench: $lib is missing (does scripts/stage-gpu-build stage it?)" | tee "$log" >&2
  exit 2
fi

# A compile cache of its own, empty: each weft kernel's first call is a cold compile, and reported as such.
WEFT_CACHE_DIR=$(mktemp -d /tmp/weft-attention-cache.XXXXXX)
export WEFT_CACHE_DIR
export PYTHONUNBUFFERED=1

{
  echo "== $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  echo "== libweft_attention.so resolves libweft.so to:"
  ldd "$lib" | grep -i weft
} 2>&1 | tee "$log"

# WEFT_ATTENTION_TIMEOUT=seconds stops a hung run (a kernel that never finishes) before the device call's own
# limit, so the log and the JSON written so far (after each shape) still come back.
limit=()
[[ -n ${WEFT_ATTENTION_TIMEOUT-} ]] && limit=(timeout -k 10 "$WEFT_ATTENTION_TIMEOUT")
"${limit[@]}" python3 benchmarks/bench_attention.py --lib "$lib" --json "$out/attention.json" \
  --plot "$out/attention.png" "$@" 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}

{
  echo "== after the run"
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
  echo "== bench_attention.py exit status $status"
} 2>&1 | tee -a "$log"
exit "$status"
