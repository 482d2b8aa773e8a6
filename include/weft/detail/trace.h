// weft — the narrow bridge between the public DSL headers and the IR inside libweft.
//
// The typed handles of tile.h hold a reference to an IR node they cannot see into; every DSL
// operation ends in `emit`, which infers and checks the node's type (the verifier's rules), records the
// user's source line and appends the node to the region being traced.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "weft/dtype.h"
#include "weft/error.h"

namespace weft {
namespace ir {
struct Node;
}

namespace detail {

using NodeRef = std::shared_ptr<const ir::Node>;

enum class Op : uint16_t {
#define WEFT_OP(name, text, category) name,
#include "weft/detail/ops.def"
#undef WEFT_OP
};

using Shape = std::vector<int64_t>;

struct Attrs {
  std::vector<int64_t> ints;  // axis, argument index, permutation, arange bounds …
  Shape shape;                // result shape of constant / broadcast / reshape
  DType dtype{};              // constant / param / cast
  double number = 0;          // constant value (given as an integer: the nearest double)
  std::optional<int64_t> integer;  // constant value given as an integer, exact (past 2^53 too)
  bool has_dtype = false;
  std::vector<std::string> names;  // the user's names of allocations and tasks

  // An integer constant's value (the verifier has checked that `number` is whole where `integer` is not set).
  int64_t integer_value() const { return integer ? *integer : static_cast<int64_t>(number); }
};

// Append a node of kind `op` to the region being traced and return it; throws weft::Error (naming `loc`)
// when the operands do not fit the op.
NodeRef emit(Op op, std::vector<NodeRef> operands, Attrs attrs, SourceLoc loc);

// Elementwise ops with NumPy broadcasting: operands are broadcast to a common shape first.
NodeRef emit_elementwise(Op op, std::vector<NodeRef> operands, SourceLoc loc);

NodeRef constant(DType dtype, double value, const Shape& shape, SourceLoc loc);
// An integer constant given exactly (an i64 literal past 2^53 has no double of its value).
NodeRef constant_int(DType dtype, int64_t value, const Shape& shape, SourceLoc loc);

// A C++ number as a constant of type `dtype`: integers exactly (unsigned ones past INT64_MAX as doubles, which the
// verifier then refuses as out of range), floating-point values as doubles.
template <class L> NodeRef literal_constant(DType dtype, L literal, const Shape& shape, SourceLoc loc) {
  if constexpr (std::is_integral_v<L>) {
    if (!(std::is_unsigned_v<L> && static_cast<unsigned long long>(literal) > 0x7fffffffffffffffULL))
      return constant_int(dtype, static_cast<int64_t>(literal), shape, loc);
  }
  return constant(dtype, static_cast<double>(literal), shape, loc);
}

DType node_dtype(const NodeRef&);
const Shape& node_shape(const NodeRef&);

// Structured control flow: the bodies are traced into new regions.
void trace_for(NodeRef lo, NodeRef hi, NodeRef step, const std::function<void(NodeRef)>& body, SourceLoc loc);
// while (cond()) body(): cond's statements and the rank-0 Bool it returns are region 0, body region 1.
void trace_while(const std::function<NodeRef()>& cond, const std::function<void()>& body, SourceLoc loc);
void trace_if(NodeRef cond, const std::function<void()>& then_body, const std::function<void()>* else_body,
              SourceLoc loc);

// Warp-specialized tasks: each body is traced into its own region of one AsyncTasks node.
struct TaskSpec {
  std::string name;
  int warps = 4, regs = 0, replicas = 1;
  std::function<void()> body;
  SourceLoc loc;  // the task() call: errors about one task name it
};
void trace_tasks(const std::vector<TaskSpec>& tasks, SourceLoc loc);

// The number of threads of the group that runs the code being traced: the kernel's num_warps * 32, or
// inside a task body the task's warps * 32 (one replica).
int group_threads(SourceLoc loc);

// Fails with a clear message when no kernel is being traced (a DSL call outside a kernel body).
void require_tracing(SourceLoc loc);

}  // namespace detail
}  // namespace weft
