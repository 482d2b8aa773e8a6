// Tracing a kernel: running the user's C++ callable once with parameter handles, recording each DSL call
// as an IR node of the kernel's Function.
#pragma once

#include <functional>
#include <memory>

#include "ir/node.h"
#include "weft/kernel.h"

namespace weft::dsl {

// Traces `tracer` into a verified Function (`num_warps`: the kernel's, the group of code outside tasks). `consts` holds, per parameter position, the Const value or the
// Tma (of a TensorDesc parameter: its box and swizzle go on the Param node) given at launch (ignored for
// Tile parameters); bit i of `divisible` marks Tile parameter i as a multiple of 16 (a 16-byte-aligned
// pointer, or an integer), recorded on its Param node.
std::shared_ptr<const ir::Function> trace_kernel(const std::string& name,
                                                 const std::vector<detail::ParamInfo>& params,
                                                 const std::function<void(const detail::TraceInputs&)>& tracer,
                                                 const std::vector<detail::KernelArg>& consts, uint64_t divisible,
                                                 SourceLoc loc, int num_warps = 4);

// Whether this thread is inside a kernel body being traced.
bool tracing();

}  // namespace weft::dsl
