#!/usr/bin/env bash
# Checks that libweft.so keeps LLVM inside: no libLLVM.so dependency, no
# exported LLVM (or other third-party) symbols, and weft's own symbols exported.
#   usage: tests/check_exports.sh path/to/libweft.so
#
# Fails on
#   - ldd listing libLLVM (or an unresolved dependency),
#   - any exported symbol that mentions llvm:: (LLVM's own code could collide
#     with another LLVM loaded in the same process; weft's internal functions
#     with LLVM types in their signatures are kept local by cmake/weft_exports.sh),
#   - any other exported symbol not mentioning weft (fmt::, std::, ... leaks),
#   - no exported weft:: symbol at all.
set -uo pipefail

lib=${1:?usage: $0 path/to/libweft.so}
[[ -f $lib ]] || { echo "FAIL: $lib does not exist"; exit 1; }

status=0
syms=$(nm -D --defined-only "$lib" | awk '{ print $NF }' | c++filt) || {
  echo "FAIL: nm -D failed on $lib"; exit 1; }

llvm_syms=$(grep 'llvm::' <<<"$syms" || true)
foreign=$(grep -v 'weft' <<<"$syms" | grep -v '^$' || true)
n_weft=$(grep -c 'weft::' <<<"$syms" || true)
n_all=$(grep -c . <<<"$syms" || true)

echo "$lib: $n_all exported symbols, $n_weft mention weft::"

deps=$(ldd "$lib" 2>&1)
if grep -qi 'libLLVM' <<<"$deps"; then
  echo "FAIL: $lib depends on libLLVM:"
  grep -i 'libLLVM' <<<"$deps"
  status=1
fi
if grep -q 'not found' <<<"$deps"; then
  echo "FAIL: unresolved dependencies:"
  grep 'not found' <<<"$deps"
  status=1
fi

if [[ -n $llvm_syms ]]; then
  echo "FAIL: $(grep -c . <<<"$llvm_syms") exported symbols mention llvm::, e.g.:"
  head -n 20 <<<"$llvm_syms"
  status=1
fi
if [[ -n $foreign ]]; then
  echo "FAIL: $(grep -c . <<<"$foreign") exported symbols that are not weft's, e.g.:"
  head -n 20 <<<"$foreign"
  status=1
fi
if (( n_weft == 0 )); then
  echo "FAIL: no weft:: symbol is exported (cmake/weft.map?)"
  status=1
fi

echo "dependencies:"
while IFS= read -r line; do echo "  $line"; done <<<"$deps"
if (( status == 0 )); then echo "PASS: no LLVM symbols exported, no libLLVM dependency"; fi
exit $status
