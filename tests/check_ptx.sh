#!/usr/bin/env bash
# Runs the unit test binary ($1) on the Catch test spec ($2) with WEFT_CHECK_PTX set by ctest, so that
# every kernel the tests trace is also assembled by ptxas; exits 77 (ctest: skipped) when there is no ptxas
# where weft looks for it (PATH, then /usr/local/cuda/bin).
set -u
if ! command -v ptxas >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/ptxas ]; then
  echo "skipped: ptxas is neither on PATH nor at /usr/local/cuda/bin/ptxas (install the CUDA toolkit to run this check)"
  exit 77
fi
exec "$1" "$2"
