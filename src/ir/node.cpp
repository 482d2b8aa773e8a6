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
