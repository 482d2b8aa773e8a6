#!/usr/bin/env bash
# The README's consumer snippet, verbatim: installs this build of weft into a temporary prefix (copying the
# built library, not rebuilding it), writes the ```cmake block of the README's "Using weft from another
# CMake project" section as a project's CMakeLists.txt, and builds and runs tests/consumer/app.cpp with it —
# with no C++ standard set by the project, as a consumer would write it.
# Usage: check_consumer.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/weft-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" || { cat "$work/install.log"; exit 1; }

mkdir "$work/app"
# The first ```cmake block after the section heading, as written.
awk '/^## Using weft from another CMake project/ {section = 1}
     section && /^```cmake$/ {inside = 1; next}
     inside && /^```$/ {exit}
     inside {print}' "$src/README.md" > "$work/app/CMakeLists.txt"
if ! grep -q 'weft::weft' "$work/app/CMakeLists.txt"; then
  echo "no \`\`\`cmake block linking weft::weft in README.md's 'Using weft from another CMake project'" >&2
  exit 1
fi
cp "$src/tests/consumer/app.cpp" "$work/app/app.cpp"
echo "--- CMakeLists.txt (from README.md)"; cat "$work/app/CMakeLists.txt"

cmake -S "$work/app" -B "$work/app/build" -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="${CONSUMER_CXX:-g++}"
cmake --build "$work/app/build"
WEFT_BACKEND=cpu "$work/app/build/app"
