#!/usr/bin/env bash
# On the GPU machine, from the repository root (after scripts/gpu-suite, or with carry/build staged): times
# weft's attention under several tilings, each against cuDNN and FlashAttention-2 in the same process, on the
# shapes SHAPES (bench_attention --shapes globs, comma-separated). A configuration is a WEFT_ATTENTION_CONFIG
# value "BN,stages,pingpong,overlap,persistent[,BM[,across_tiles]]", or "default" (attention_config(D)). One line per shape and
# configuration goes to stdout and to $OUT/attention-configs.log.
# Usage: benchmarks/attention_configs.sh SHAPES CONFIG...
#   e.g. benchmarks/attention_configs.sh 'd128-bf16-*-s512,d128-bf16-*-s1024' default 128,2,1,1,1
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
out=${OUT:-/tmp/weft-gpu}
mkdir -p "$out"
log=$out/attention-configs.log
if [[ ! -f build/libweft.so && -d carry/build ]]; then   # gpu-suite did not run: unpack as it does
  rm -rf build && cp -r carry/build build && gunzip -f build/libweft.so.gz
fi
shapes=${1:?usage: attention_configs.sh SHAPES CONFIG...}
shift
(( $# )) || set -- default
export WEFT_CACHE_DIR=$(mktemp -d /tmp/weft-attention-configs.XXXXXX)
status=0
for cfg in "$@"; do
  if [[ $cfg == default ]]; then unset WEFT_ATTENTION_CONFIG; else export WEFT_ATTENTION_CONFIG=$cfg; fi
  python3 benchmarks/bench_attention.py --lib build/benchmarks/libweft_attention.so --skip-ragged --rounds 1 \
    --shapes "$shapes" 2>&1 | grep -E "check |FAIL|n/a|Error|error" | sed "s/^/$cfg  /" | tee -a "$log"
  (( PIPESTATUS[0] == 0 )) || status=1
done
exit $status
