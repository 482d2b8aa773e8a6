#!/usr/bin/env bash
# What ptxas makes of the PTX of LLVM's code generator and of weft's own emitter (WEFT_PTX_EMITTER), for every
# kernel the unit tests trace: registers, spill bytes, "Performance Loss" advisories and static SASS
# instructions (the cubin's .text, 16 bytes an instruction), kernel by kernel, then totals. Needs no GPU: the
# tests run on the CPU backend and WEFT_CHECK_PTX=sm_90a lowers each kernel to PTX beside them; needs the CUDA
# toolkit's ptxas and binutils' readelf.
#
#   benchmarks/compare_ptx_emitters.sh [build dir (build)] [Catch2 test spec ('~[gpu]')] [--all]
#
# Prints the kernels that differ in registers, spills or advisories, or whose SASS is more than 5% longer with
# weft's emitter (--all: every kernel), then the totals.
set -uo pipefail
build=${1:-build}
spec=${2:-'~[gpu]'}
all=${3:-}
ptxas=$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)
[[ -x $ptxas ]] || { echo "compare_ptx_emitters: no ptxas on PATH or at /usr/local/cuda/bin" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for emitter in llvm weft; do
  echo "compiling the test kernels with WEFT_PTX_EMITTER=$emitter ..." >&2
  WEFT_CACHE=0 WEFT_BACKEND=cpu WEFT_CHECK_PTX=sm_90a WEFT_PTX_EMITTER=$emitter WEFT_DUMP=ptx \
    WEFT_DUMP_DIR="$out/$emitter" "$build/tests/weft_unit_tests" "$spec" > "$out/$emitter.log" 2>&1
done

# ptxas -v on one PTX file: "registers spill_bytes advisories sass_instructions".
measure() {
  local ptx=$1 cubin=$1.cubin info
  info=$("$ptxas" -arch=sm_90a -v -o "$cubin" "$ptx" 2>&1) || { echo "- - - -"; return; }
  local regs spill loss sass
  regs=$(grep -oE 'Used [0-9]+ registers' <<< "$info" | grep -oE '[0-9]+' | head -1)
  spill=$(grep -oE '[0-9]+ bytes spill stores' <<< "$info" | grep -oE '^[0-9]+' | head -1)
  loss=$(grep -c 'Performance Loss' <<< "$info")
  sass=0
  for hex in $(readelf -S -W "$cubin" 2>/dev/null | sed -n 's/^ *\[ *[0-9]*\] *\.text\.[^ ]* *[A-Z_]* *[0-9a-f]* *[0-9a-f]* *\([0-9a-f]*\).*/\1/p'); do
    sass=$((sass + 16#$hex / 16))
  done
  echo "${regs:-0} ${spill:-0} $loss ${sass:-0}"
}

printf "%-64s %9s %9s %9s %13s\n" kernel "regs" "spill B" "advisory" "SASS instr."
total_llvm=0 total_weft=0 kernels=0 longer=0 shorter=0
for ptx in "$out"/weft/*.ptx; do
  name=$(basename "$ptx" .ptx)
  [[ -f $out/llvm/$name.ptx ]] || continue
  read -r rl sl al nl <<< "$(measure "$out/llvm/$name.ptx")"
  read -r rw sw aw nw <<< "$(measure "$ptx")"
  [[ $rw == - ]] && { echo "$name: ptxas REFUSED weft's PTX"; continue; }
  [[ $rl == - ]] && continue
  kernels=$((kernels + 1)) total_llvm=$((total_llvm + nl)) total_weft=$((total_weft + nw))
  (( nw > nl )) && longer=$((longer + 1))
  (( nw < nl )) && shorter=$((shorter + 1))
  if [[ -n $all || $rl != "$rw" || $sl != "$sw" || $al != "$aw" ]] || (( nw * 100 > nl * 105 )); then
    printf "%-64s %4s/%-4s %4s/%-4s %4s/%-4s %6s/%-6s\n" "${name:0:64}" "$rl" "$rw" "$sl" "$sw" "$al" "$aw" "$nl" "$nw"
  fi
done
echo "(each cell: LLVM's code generator / weft's emitter)"
echo "kernels: $kernels; SASS instructions: LLVM $total_llvm, weft $total_weft; weft longer on $longer, shorter on $shorter"
