// The verifier: the typing rules of every IR node, and a whole-kernel check run before lowering.
//
// `infer_type` is called by the tracer for every node it builds, so a mistake is reported at the user's
// line as it is made; `verify` re-checks a finished kernel (types, scoping, control flow) and is what
// passes rely on before lowering.
#pragma once

#include "ir/node.h"

namespace weft::ir {

// The type of a node of kind `op` with these operands and attributes, or a weft::Error naming `loc` that
// says what is wrong and what to change. May canonicalize `attrs` (negative axes become positive).
Type infer_type(Op op, const std::vector<NodeRef>& operands, Attrs& attrs, SourceLoc loc);

// Checks a tile shape: every dimension a power of two and the element count within what a program
// instance can hold. `what` names the shape in the message ("result of arange").
void check_tile_shape(const Shape& shape, std::string_view what, SourceLoc loc);

// NumPy broadcasting of two shapes, or an error naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op, SourceLoc loc);

// Re-checks a whole kernel: every node's type, and every operand defined before its use in the same or
// an enclosing region.
void verify(const Function& f);

// The bulk copy into another block, the TMA prefetches and the L2 eviction hints
// (verify_copies_and_hints.cpp): the typing rules infer_type hands over, the check of a TMA op's eviction
// attribute, and the whole-kernel rules that need the kernel's options (run when a kernel is specialized,
// for every backend): a copy needs a cluster of 2 or more blocks and a barrier some barrier_expect_bytes names.
Type infer_copy_or_prefetch(Op op, const std::vector<NodeRef>& operands, Attrs& attrs, SourceLoc loc);
void check_eviction(Op op, const Attrs& attrs, SourceLoc loc);
void verify_cluster_copies(const Function& f, int cluster_blocks, std::string_view kernel);

}  // namespace weft::ir
