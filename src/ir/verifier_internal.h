// What the verifier's files share, private to src/ir/: verifier.cpp (the tile ops' typing rules and
// infer_type), verify_hopper_constructs.cpp (the Hopper constructs' typing rules) and
// verify_scope_and_placement.cpp (the whole-kernel check, verify). The helpers throw weft::Error at `loc`
// with a message that names the op; verifier.cpp defines those that are not inline here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/node.h"

namespace weft::ir {

// Internal to libweft (cmake/weft.map would export these names otherwise).
#pragma GCC visibility push(hidden)

inline bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

[[noreturn]] inline void fail(SourceLoc loc, const std::string& message) { throw Error(message, loc); }

inline std::string name(Op op) { return std::string(op_name(op)); }

std::string kind_name(const Type& t);
const Type& value_operand(Op op, const std::vector<NodeRef>& operands, size_t i, SourceLoc loc);
const Type& require_scalar(Op op, const std::vector<NodeRef>& operands, size_t i, std::string_view what, SourceLoc loc);
std::string thread_query_name(Op op, const Attrs& attrs);

// The typing rules of the Hopper constructs (verify_hopper_constructs.cpp): infer_type hands every op it
// has no rule for to this.
Type infer_hopper_construct(Op op, const std::vector<NodeRef>& operands, Attrs& attrs, SourceLoc loc);

#pragma GCC visibility pop

}  // namespace weft::ir
