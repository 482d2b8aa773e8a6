// Which pointer arguments a tile of pointers derives from: what the CPU backend's bounds checks compare
// each address with (codegen/cpu/cpu_abi.h, LaunchChecks).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/node.h"

namespace weft::passes {

// The argument slots (Param ints[0]) of the pointer parameters `ptrs` may derive from, sorted: through
// ptr_add's pointer operand, broadcasts, reshapes, permutes, slices and both choices of where(). Empty
// when a pointer may come from elsewhere (a Var): any pointer argument then.
std::vector<int32_t> pointer_roots(const ir::Node& ptrs);

}  // namespace weft::passes
