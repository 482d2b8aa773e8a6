#include "ir/node.h"

#include <fmt/format.h>

namespace weft::ir {

std::string_view op_name(Op op) {
  switch (op) {
#define WEFT_OP(name, text, category) \
  case Op::name:                      \
    return text;
#include "weft/detail/ops.def"
#undef WEFT_OP
  }
  return "?";
}

OpCategory op_category(Op op) {
  switch (op) {
#define WEFT_OP(name, text, category) \
  case Op::name:                      \
    return OpCategory::category;
#include "weft/detail/ops.def"
#undef WEFT_OP
  }
  return OpCategory::Special;
}

namespace {

// Moves what `n` owns (operands, region arguments and bodies) onto `pending`.
void take_children(Node& n, std::vector<NodeRef>& pending) {
  for (NodeRef& o : n.operands) pending.push_back(std::move(o));
  n.operands.clear();
  for (Region& r : n.regions) {
    for (NodeRef& a : r.args) pending.push_back(std::move(a));
    for (NodeRef& b : r.body) pending.push_back(std::move(b));
  }
  n.regions.clear();
}

}  // namespace

// A node whose last reference goes away here has its own children taken first, so that its destructor
// finds nothing to release: the depth of the C++ stack stays constant whatever the shape of the graph.
// (Nodes are immutable once traced, so only their destruction writes them; the const_cast is that.)
Node::~Node() {
  std::vector<NodeRef> pending;
  take_children(*this, pending);
  while (!pending.empty()) {
    NodeRef n = std::move(pending.back());
    pending.pop_back();
    if (n && n.use_count() == 1) take_children(const_cast<Node&>(*n), pending);
  }  // n, now without children, is freed here
}

int64_t Type::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out + "]";
}

std::string Type::str() const {
  switch (kind) {
    case Kind::None:
      return "none";
    case Kind::Value:
      return shape.empty() ? dtype.str() : dtype.str() + shape_str(shape);
    case Kind::Var:
      return "var " + (shape.empty() ? dtype.str() : dtype.str() + shape_str(shape));
    case Kind::Shared:
      return "shared " + dtype.str() + shape_str(shape);
    case Kind::Barrier:
      return shape.empty() ? "mbarrier" : "mbarrier" + shape_str(shape);
    case Kind::TensorDesc:
      return "tensordesc " + dtype.str() + shape_str(shape);
  }
  return "?";
}

}  // namespace weft::ir
