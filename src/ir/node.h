// The tile IR: immutable, typed nodes in ordered regions.
//
// A node is one operation. Values are nodes; a node's operands are the nodes whose values it uses.
// Statements with regions (for, if) own their bodies. Nodes are built only through the tracing context
// (src/dsl/trace.cpp), which asks the verifier for the type of each new node, so malformed IR fails where
// it is made, with the user's line.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/detail/trace.h"

namespace weft::passes {
struct KernelPlans;  // passes/kernel_plans.h
}

namespace weft::ir {

using detail::Attrs;
using detail::NodeRef;
using detail::Op;
using detail::Shape;

enum class OpCategory { Leaf, Unary, Binary, Compare, Special };

std::string_view op_name(Op);
OpCategory op_category(Op);

// What a node produces: nothing (a statement), a value, a variable slot holding values, shared memory
// (a buffer of all its stages, shape [stages, dims...], or a view of one stage), mbarriers ([n] or one)
// or a TMA descriptor.
struct Type {
  enum class Kind : uint8_t { None, Value, Var, Shared, Barrier, TensorDesc } kind = Kind::None;
  DType dtype{};
  Shape shape;  // empty: rank 0

  static Type none() { return {}; }
  static Type value(DType d, Shape s) { return {Kind::Value, d, std::move(s)}; }
  static Type var(DType d, Shape s) { return {Kind::Var, d, std::move(s)}; }
  static Type shared(DType d, Shape s) { return {Kind::Shared, d, std::move(s)}; }
  static Type barrier(Shape s) { return {Kind::Barrier, DType{}, std::move(s)}; }
  // A TMA descriptor parameter: its element type and box (the tile one copy moves).
  static Type tensor_desc(DType d, Shape box) { return {Kind::TensorDesc, d, std::move(box)}; }

  bool is_value() const { return kind == Kind::Value; }
  bool is_scalar() const { return kind == Kind::Value && shape.empty(); }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  bool same_value_type(const Type& o) const { return dtype == o.dtype && shape == o.shape; }
  // "f32", "i32[128]", "ptr<bf16>[64x64]", "var f32[16x16]", "shared bf16[4x128x64]", "mbarrier[4]",
  // "tensordesc bf16[128x64]"
  std::string str() const;
};

std::string shape_str(const Shape&);  // "[64x32]", "[]"

struct Region {
  std::vector<NodeRef> args;  // values defined by the region's owner (a loop index)
  std::vector<NodeRef> body;
  SourceLoc loc;              // a task's region: its task() call (other regions: unset)
};

struct Node {
  Op op;
  Type type;
  std::vector<NodeRef> operands;
  Attrs attrs;
  std::vector<Region> regions;
  SourceLoc loc;
  uint32_t id = 0;  // unique within a kernel, in creation order

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Releases the operands and regions without recursion: a chain of a million nodes, each the last owner
  // of the one before, would otherwise unwind as a million nested destructors (node.cpp).
  ~Node();

  int axis() const { return static_cast<int>(attrs.ints.at(0)); }
};

struct Function {
  std::string name;
  std::vector<NodeRef> params;  // Param nodes, in order (Const parameters are not here)
  Region body;
  SourceLoc loc;  // where the Kernel was declared
  // The tasks' and shared memory's plans, made once after tracing (passes/kernel_plans.h) so that the
  // backends do not plan again; null for a Function built by hand. Not part of the IR's text.
  std::shared_ptr<const passes::KernelPlans> plans;
};

}  // namespace weft::ir
