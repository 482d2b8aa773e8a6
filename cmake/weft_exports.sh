#!/usr/bin/env bash
# Writes libweft's final linker version script (run just before libweft links).
#   usage: weft_exports.sh BASE_MAP OUT_MAP OBJECT...
#
# BASE_MAP (cmake/weft.map) exports every symbol that mentions weft::. Some of
# those are internal functions whose signatures mention LLVM types, e.g.
# weft::codegen::ElementOps::fma(llvm::Value*, ...), or LLVM templates
# instantiated for weft types. They could not collide with another LLVM, but
# they are not API either, so this script lists them by their exact mangled
# names under `local:` -- an exact name beats a wildcard in a version script --
# and libweft exports no symbol that mentions llvm:: at all.
set -euo pipefail
base=$1 out=$2
shift 2

tmp=$(mktemp "${out}.XXXXXX")
trap 'rm -f "$tmp" "$tmp.m" "$tmp.d" "$tmp.locals"' EXIT

nm -g --defined-only "$@" 2>/dev/null | awk 'NF >= 3 { print $NF }' | sort -u > "$tmp.m"
c++filt < "$tmp.m" > "$tmp.d"
paste -d '\t' "$tmp.m" "$tmp.d" |
  awk -F '\t' '$2 ~ /llvm::/ && $2 ~ /weft/ { print "    " $1 ";" }' > "$tmp.locals"

# Insert the names right after the `local:` line of the base script.
awk -v locals="$tmp.locals" '
  { print }
  /^[[:space:]]*local:/ { while ((getline line < locals) > 0) print line }
' "$base" > "$tmp"
mv "$tmp" "$out"
