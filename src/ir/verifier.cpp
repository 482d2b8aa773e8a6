#include "ir/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

namespace weft::ir {
namespace {

constexpr int64_t kMaxTileElements = int64_t(1) << 20;

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

[[noreturn]] void fail(SourceLoc loc, const std::string& message) { throw Error(message, loc); }

std::string name(Op op) { return std::string(op_name(op)); }

std::string kind_name(const Type& t) {
  switch (t.kind) {
    case Type::Kind::Var: return "a Var slot";
    case Type::Kind::Shared: return "shared memory";
    case Type::Kind::Barrier: return "an mbarrier";
    case Type::Kind::TensorDesc: return "a TMA descriptor";
    case Type::Kind::Value: return "a value";
    case Type::Kind::None: break;
  }
  return "a statement";
}

const Type& value_operand(Op op, const std::vector<NodeRef>& operands, size_t i, SourceLoc loc) {
  const Type& t = operands.at(i)->type;
  if (!t.is_value())
    fail(loc, fmt::format("{}: operand {} is {}, not a value{}", name(op), i, kind_name(t),
                          t.kind == Type::Kind::Var ? " (read the Var instead)"
                          : t.kind == Type::Kind::Shared ? " (read it with local_load)" : ""));
  return t;
}

void require_float(Op op, const Type& t, SourceLoc loc) {
  if (!t.dtype.is_float())
    fail(loc, fmt::format("{} needs a floating-point tile, got {}; convert it first, e.g. cast<float>(x)", name(op), t.str()));
}

void require_numeric(Op op, const Type& t, SourceLoc loc) {
  if (t.dtype.pointer || t.dtype.is_bool())
    fail(loc, fmt::format("{} needs numbers, got {}", name(op), t.str()));
}

void require_integer_or_bool(Op op, const Type& t, SourceLoc loc) {
  if (!t.dtype.is_int())
    fail(loc, fmt::format("{} needs integers or booleans, got {}", name(op), t.str()));
}

void require_same(Op op, const Type& a, const Type& b, SourceLoc loc) {
  if (a.dtype != b.dtype)
    fail(loc, fmt::format("{}: element types differ: {} vs {}; convert one with cast<T>(...) so both match", name(op),
                          a.str(), b.str()));
  if (a.shape != b.shape)
    fail(loc, fmt::format("{}: shapes differ: {} vs {}", name(op), shape_str(a.shape), shape_str(b.shape)));
}

const Type& require_scalar(Op op, const std::vector<NodeRef>& operands, size_t i, std::string_view what, SourceLoc loc) {
  const Type& t = value_operand(op, operands, i, loc);
  if (!t.shape.empty()) fail(loc, fmt::format("{}: {} must be a scalar (rank 0), got {}", name(op), what, t.str()));
  return t;
}

int64_t axis_attr(Op op, Attrs& attrs, int rank, SourceLoc loc) {
  if (attrs.ints.empty()) fail(loc, fmt::format("{}: missing axis", name(op)));
  int64_t axis = attrs.ints[0];
  if (axis < -rank || axis >= rank)
    fail(loc, fmt::format("{}: axis {} is out of range for a tile of rank {}; use an axis in [{}, {}]", name(op), axis,
                          rank, -rank, rank - 1));
  if (axis < 0) axis += rank;
  attrs.ints[0] = axis;
  return axis;
}

void check_constant_value(DType d, double v, SourceLoc loc) {
  if (d.pointer) fail(loc, "a constant cannot be a pointer; pass pointers as kernel parameters");
  if (d.is_float()) return;
  if (!std::isfinite(v) || v != std::trunc(v))
    fail(loc, fmt::format("the constant {} is not a whole number but its type is {}; use a floating-point tile or "
                          "round the value",
                          v, d.str()));
  // Compared as doubles: converting an out-of-range double to int64_t is undefined.
  const bool is_bool = d.scalar == ScalarType::i1;
  const double limit = is_bool ? 2.0 : std::ldexp(1.0, d.bits() - 1);  // the first value past the top
  if (v < (is_bool ? 0.0 : -limit) || v >= limit) {
    int64_t lo = is_bool ? 0 : std::numeric_limits<int64_t>::min() >> (64 - d.bits());
    int64_t hi = is_bool ? 1 : std::numeric_limits<int64_t>::max() >> (64 - d.bits());
    fail(loc, fmt::format("the constant {} does not fit in {} (range {} to {})", v, d.str(), lo, hi));
  }
}

Type infer_reduce(Op op, const std::vector<NodeRef>& operands, Attrs& attrs, SourceLoc loc) {
  const Type& x = value_operand(op, operands, 0, loc);
  if (x.shape.empty()) fail(loc, fmt::format("{}: cannot reduce a scalar; reduce a tile of rank 1 or more", name(op)));
  require_numeric(op, x, loc);
  int64_t axis = axis_attr(op, attrs, x.rank(), loc);
  Shape s = x.shape;
  s.erase(s.begin() + axis);
  bool is_arg = op == Op::ArgMax || op == Op::ArgMin;
  return Type::value(is_arg ? DType{ScalarType::i32, false} : x.dtype, s);
}

// A shared-memory operand: a whole buffer (`stage_view` false) or one stage of it.
const Type& shared_operand(Op op, const std::vector<NodeRef>& operands, size_t i, bool stage_view, SourceLoc loc) {
  const NodeRef& o = operands.at(i);
  const Type& t = o->type;
  if (t.kind != Type::Kind::Shared)
    fail(loc, fmt::format("{}: operand {} must be shared memory (from local_alloc), got {}", name(op), i, kind_name(t)));
  bool is_view = o->op != Op::LocalAlloc;
  if (stage_view && !is_view)
    fail(loc, fmt::format("{} takes one stage of a buffer: index the buffer from local_alloc (made at {}) with "
                          "local_view(buffer, stage) or buffer[stage]",
                          name(op), o->loc.str()));
  if (!stage_view && is_view) fail(loc, fmt::format("{} takes a whole buffer from local_alloc, not a view", name(op)));
  return t;
}

// One mbarrier: an element of an alloc_barriers array.
void require_one_barrier(Op op, const std::vector<NodeRef>& operands, SourceLoc loc) {
  const Type& t = operands.at(0)->type;
  if (t.kind != Type::Kind::Barrier)
    fail(loc, fmt::format("{} needs an mbarrier (an element of alloc_barriers), got {}", name(op), kind_name(t)));
  if (!t.shape.empty())
    fail(loc, fmt::format("{} needs one mbarrier, got the array of {} (made at {}); pick one with bars[i]", name(op),
                          t.shape[0], operands[0]->loc.str()));
}

void require_i32_scalar(Op op, const std::vector<NodeRef>& operands, size_t i, std::string_view what, SourceLoc loc) {
  const Type& t = require_scalar(op, operands, i, what, loc);
  if (t.dtype != DType{ScalarType::i32, false})
    fail(loc, fmt::format("{}: {} must be i32, got {}; convert it with cast<int32_t>(...)", name(op), what, t.str()));
}

// The public name of a ThreadIndex or ReadClock node.
std::string thread_query_name(Op op, const Attrs& attrs) {
  static const char* const ids[] = {"thread_id", "lane_id", "warp_id", "warp_group_id"};
  if (op == Op::ThreadIndex) return ids[attrs.ints.at(1) & 3];
  return attrs.ints.at(1) == 0 ? "clock64" : "global_timer";
}

// wgmma with fp8 operands has no transposed forms (imm-trans-a/b exist for f16/bf16 only) and takes A from
// registers only in a fragment layout of its own: both operands come from shared memory, K-major.
void check_fp8_async_dot_operands(const std::vector<NodeRef>& operands, SourceLoc loc) {
  if (operands[0]->type.kind == Type::Kind::Value)
    fail(loc, "async_dot with fp8 operands reads a from shared memory: store the tile into a buffer stage "
              "(local_store) and pass the stage");
  if (operands[0]->op == Op::LocalTrans)
    fail(loc, "async_dot with fp8 operands needs a K-major (K contiguous): wgmma cannot transpose fp8 operands; "
              "store a as [M, K] and pass the stage itself, not local_trans");
  if (operands[1]->op != Op::LocalTrans)
    fail(loc, fmt::format("async_dot with fp8 operands needs b K-major, but b is a {} stage read as it is stored "
                          "(N contiguous): wgmma cannot transpose fp8 operands; store b as [N, K] (K contiguous) "
                          "and pass local_trans(stage)",
                          shape_str(operands[1]->type.shape)));
}

Type infer_dot(const std::vector<NodeRef>& operands, SourceLoc loc) {
  const Type& a = value_operand(Op::Dot, operands, 0, loc);
  const Type& b = value_operand(Op::Dot, operands, 1, loc);
  if (a.rank() != 2 || b.rank() != 2)
    fail(loc, fmt::format("dot multiplies rank-2 tiles, got a: {} and b: {}", a.str(), b.str()));
  if (a.shape[1] != b.shape[0])
    fail(loc, fmt::format("dot: inner dimensions differ: a is {} and b is {}; a's columns ({}) must equal b's rows ({})",
                          shape_str(a.shape), shape_str(b.shape), a.shape[1], b.shape[0]));
  if (a.dtype != b.dtype)
    fail(loc, fmt::format("dot: a is {} but b is {}; both operands need one element type (cast one of them)",
                          a.dtype.str(), b.dtype.str()));
  ScalarType s = a.dtype.scalar;
  if (a.dtype.pointer || (s != ScalarType::f16 && s != ScalarType::bf16 && s != ScalarType::f32))
    fail(loc, fmt::format("dot takes f16, bf16 or f32 operands, got {}; convert them with cast<float>(...)",
                          a.dtype.str()));
  Type result = Type::value(DType{ScalarType::f32, false}, {a.shape[0], b.shape[1]});
  if (operands.size() == 3) {
    const Type& acc = value_operand(Op::Dot, operands, 2, loc);
    if (!acc.same_value_type(result))
      fail(loc, fmt::format("dot: the accumulator is {} but a {} @ b {} gives {}; accumulate in an f32 tile of that shape",
                            acc.str(), shape_str(a.shape), shape_str(b.shape), result.str()));
  }
  return result;
}

}  // namespace

void check_tile_shape(const Shape& shape, std::string_view what, SourceLoc loc) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!is_pow2(shape[i]))
      fail(loc, fmt::format("{}: dimension {} of shape {} is {}, not a power of two; tile dimensions must be powers of "
                            "two (round the tile up and mask the extra elements)",
                            what, i, shape_str(shape), shape[i]));
    n *= shape[i];
    if (n > kMaxTileElements)
      fail(loc, fmt::format("{}: shape {} has more than {} elements; split the work into smaller tiles", what,
                            shape_str(shape), kMaxTileElements));
  }
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op, SourceLoc loc) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(loc, fmt::format("{}: shapes {} and {} do not broadcast: dimension {} is {} in one and {} in the other "
                            "(dimensions must be equal or 1)",
                            op, shape_str(a), shape_str(b), i, da, db));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Type infer_type(Op op, const std::vector<NodeRef>& operands, Attrs& attrs, SourceLoc loc) {
  for (const NodeRef& o : operands)
    if (!o) fail(loc, fmt::format("{}: an operand is an empty handle; give the Tile a value first", name(op)));
  const DType i32{ScalarType::i32, false};
  const DType i1{ScalarType::i1, false};

  switch (op_category(op)) {
    case OpCategory::Unary: {
      const Type& x = value_operand(op, operands, 0, loc);
      if (op == Op::Not) {
        require_integer_or_bool(op, x, loc);
      } else if (op == Op::Neg || op == Op::Abs) {
        require_numeric(op, x, loc);
      } else {
        require_float(op, x, loc);
      }
      bool fast = !attrs.ints.empty() && attrs.ints[0] == 1;
      bool via_f64 = op == Op::Tanh || op == Op::Sigmoid || op == Op::Erf;  // computed in f64 for f32 results
      if (via_f64 && !fast && x.dtype.scalar == ScalarType::f64)
        fail(loc, fmt::format("{} is offered for f32, f16 and bf16 (it computes in f64 to be accurate in f32), not for "
                              "{}; cast<float> it first",
                              name(op), x.str()));
      if (fast) {  // the fast flavour (weft::fast)
        bool offered = op == Op::Exp2 || op == Op::Exp || op == Op::Log2 || op == Op::Rcp || op == Op::Rsqrt ||
                       op == Op::Tanh;
        if (!offered)
          fail(loc, fmt::format("fast::{} does not exist; the fast flavours are: exp, exp2, log2, rcp, rsqrt, tanh",
                                name(op)));
        if (x.dtype.scalar == ScalarType::f64)
          fail(loc, fmt::format("fast::{} computes in f32 (the GPU's approximate instruction) but x is {}; cast<float> "
                                "it first, or use the accurate {}",
                                name(op), x.str(), name(op)));
      }
      return x;
    }
    case OpCategory::Binary: {
      const Type& a = value_operand(op, operands, 0, loc);
      const Type& b = value_operand(op, operands, 1, loc);
      require_same(op, a, b, loc);
      if (op == Op::And || op == Op::Or || op == Op::Xor) {
        require_integer_or_bool(op, a, loc);
      } else if (op == Op::Pow) {
        require_float(op, a, loc);
        if (a.dtype.scalar == ScalarType::f64)
          fail(loc, fmt::format("pow is offered for f32, f16 and bf16 (it computes in f64 to be accurate in f32), not "
                                "for {}; cast<float> the operands first",
                                a.str()));
      } else if (op == Op::Shl || op == Op::Shr) {
        if (!a.dtype.is_int() || a.dtype.is_bool()) fail(loc, fmt::format("{} needs integers, got {}", name(op), a.str()));
      } else {
        require_numeric(op, a, loc);
      }
      return a;
    }
    case OpCategory::Compare: {
      const Type& a = value_operand(op, operands, 0, loc);
      const Type& b = value_operand(op, operands, 1, loc);
      require_same(op, a, b, loc);
      if (a.dtype.pointer) fail(loc, fmt::format("{}: pointers cannot be compared; compare offsets instead", name(op)));
      return Type::value(i1, a.shape);
    }
    case OpCategory::Leaf:
    case OpCategory::Special:
      break;
  }

  switch (op) {
    case Op::Param:
      // ints = {index, known divisor[, 1 = TMA descriptor, swizzle bytes]}; a descriptor's box is the shape attr.
      if (attrs.ints.size() >= 4 && attrs.ints[2] == 1) return Type::tensor_desc(attrs.dtype, attrs.shape);
      return Type::value(attrs.dtype, {});
    case Op::ProgramId:
    case Op::NumPrograms: {
      int64_t axis = attrs.ints.at(0);
      if (axis < 0 || axis > 2)
        fail(loc, fmt::format("{}: axis {} does not exist; the grid has axes 0, 1 and 2", name(op), axis));
      return Type::value(i32, {});
    }
    case Op::LoopIndex:
      return Type::value(i32, {});
    case Op::Constant:
      check_tile_shape(attrs.shape, "constant", loc);
      check_constant_value(attrs.dtype, attrs.number, loc);
      return Type::value(attrs.dtype, attrs.shape);
    case Op::Arange: {
      int64_t start = attrs.ints.at(0), end = attrs.ints.at(1);
      if (end <= start) fail(loc, fmt::format("arange({}, {}): the end must be greater than the start", start, end));
      if (start < INT32_MIN || end - 1 > INT32_MAX)
        fail(loc, fmt::format("arange({}, {}): the values do not fit in i32", start, end));
      check_tile_shape({end - start}, fmt::format("arange({}, {})", start, end), loc);
      return Type::value(i32, {end - start});
    }
    case Op::Fma: {
      const Type& a = value_operand(op, operands, 0, loc);
      require_same(op, a, value_operand(op, operands, 1, loc), loc);
      require_same(op, a, value_operand(op, operands, 2, loc), loc);
      require_float(op, a, loc);
      return a;
    }
    case Op::Select: {
      const Type& c = value_operand(op, operands, 0, loc);
      const Type& a = value_operand(op, operands, 1, loc);
      const Type& b = value_operand(op, operands, 2, loc);
      if (c.dtype != i1) fail(loc, fmt::format("where: the condition must be a bool tile, got {}", c.str()));
      if (a.dtype != b.dtype)
        fail(loc, fmt::format("where: the two choices have different element types, {} and {}; cast one of them",
                              a.dtype.str(), b.dtype.str()));
      require_same(op, a, b, loc);
      if (c.shape != a.shape)
        fail(loc, fmt::format("where: condition shape {} differs from the values' shape {}", shape_str(c.shape),
                              shape_str(a.shape)));
      return a;
    }
    case Op::Cast: {
      const Type& x = value_operand(op, operands, 0, loc);
      if (x.dtype.pointer || attrs.dtype.pointer)
        fail(loc, fmt::format("cast from {} to {}: pointers cannot be cast; offset them with + instead", x.dtype.str(),
                              attrs.dtype.str()));
      return Type::value(attrs.dtype, x.shape);
    }
    case Op::PtrAdd: {
      const Type& p = value_operand(op, operands, 0, loc);
      const Type& o = value_operand(op, operands, 1, loc);
      if (!p.dtype.pointer) fail(loc, fmt::format("ptr_add: {} is not a pointer", p.str()));
      if (o.dtype.pointer || o.dtype.is_float() || o.dtype.is_bool() || o.dtype.bits() < 32)
        fail(loc, fmt::format("a pointer offset must be i32 or i64, got {}", o.dtype.str()));
      if (p.shape != o.shape)
        fail(loc, fmt::format("ptr_add: shapes differ: {} vs {}", shape_str(p.shape), shape_str(o.shape)));
      return p;
    }
    case Op::Broadcast: {
      const Type& x = value_operand(op, operands, 0, loc);
      check_tile_shape(attrs.shape, "broadcast target", loc);
      if (x.rank() > static_cast<int>(attrs.shape.size()) || broadcast_shapes(x.shape, attrs.shape, "broadcast", loc) != attrs.shape)
        fail(loc, fmt::format("cannot broadcast a tile of shape {} to {}: only dimensions of size 1 (or missing leading "
                              "ones) can grow",
                              shape_str(x.shape), shape_str(attrs.shape)));
      return Type::value(x.dtype, attrs.shape);
    }
    case Op::Reshape: {
      const Type& x = value_operand(op, operands, 0, loc);
      check_tile_shape(attrs.shape, "reshape target", loc);
      Type out = Type::value(x.dtype, attrs.shape);
      if (out.numel() != x.numel())
        fail(loc, fmt::format("cannot reshape {} ({} elements) to {} ({} elements); the element count must stay the same",
                              shape_str(x.shape), x.numel(), shape_str(attrs.shape), out.numel()));
      return out;
    }
    case Op::Permute: {
      const Type& x = value_operand(op, operands, 0, loc);
      std::vector<int64_t> sorted = attrs.ints;
      std::sort(sorted.begin(), sorted.end());
      bool ok = static_cast<int>(sorted.size()) == x.rank();
      for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == static_cast<int64_t>(i);
      if (!ok)
        fail(loc, fmt::format("permute: the permutation [{}] must list each axis 0..{} of the {} tile once",
                              fmt::join(attrs.ints, ", "), x.rank() - 1, x.str()));
      Shape s(x.rank());
      for (int i = 0; i < x.rank(); ++i) s[i] = x.shape[attrs.ints[i]];
      return Type::value(x.dtype, s);
    }
    case Op::Slice: {
      const Type& x = value_operand(op, operands, 0, loc);
      int64_t axis = axis_attr(op, attrs, x.rank(), loc), start = attrs.ints.at(1), size = attrs.ints.at(2);
      if (size < 1 || start < 0 || start + size > x.shape[axis] || start % size != 0)
        fail(loc, fmt::format("slice of {} along axis {}: [{}, {}) must lie inside the tile and start at a multiple of "
                              "its size",
                              x.str(), axis, start, start + size));
      Shape s = x.shape;
      s[axis] = size;
      check_tile_shape(s, "slice", loc);
      return Type::value(x.dtype, s);
    }
    case Op::Load: {
      const Type& p = value_operand(op, operands, 0, loc);
      if (!p.dtype.pointer) fail(loc, fmt::format("load needs a tile of pointers, got {}", p.str()));
      DType elem{p.dtype.scalar, false};
      if (operands.size() >= 2) {
        const Type& m = value_operand(op, operands, 1, loc);
        if (m.dtype != i1 || m.shape != p.shape)
          fail(loc, fmt::format("load: the mask must be a bool tile of the pointers' shape {}, got {}", shape_str(p.shape),
                                m.str()));
      }
      if (operands.size() == 3) {
        const Type& o = value_operand(op, operands, 2, loc);
        if (o.dtype != elem || o.shape != p.shape)
          fail(loc, fmt::format("load: the fill value must be {} of shape {}, got {}", elem.str(), shape_str(p.shape),
                                o.str()));
      }
      return Type::value(elem, p.shape);
    }
    case Op::Store: {
      const Type& p = value_operand(op, operands, 0, loc);
      const Type& v = value_operand(op, operands, 1, loc);
      if (!p.dtype.pointer) fail(loc, fmt::format("store needs a tile of pointers, got {}", p.str()));
      DType elem{p.dtype.scalar, false};
      if (v.dtype != elem)
        fail(loc, fmt::format("store of {} values through {} pointers: the value's element type must be {}; convert it "
                              "with cast<{}>(value)",
                              v.dtype.str(), p.dtype.str(), elem.str(), elem.str()));
      if (v.shape != p.shape)
        fail(loc, fmt::format("store: the value's shape {} differs from the pointers' shape {}", shape_str(v.shape),
                              shape_str(p.shape)));
      if (operands.size() == 3) {
        const Type& m = value_operand(op, operands, 2, loc);
        if (m.dtype != i1 || m.shape != p.shape)
          fail(loc, fmt::format("store: the mask must be a bool tile of the pointers' shape {}, got {}", shape_str(p.shape),
                                m.str()));
      }
      return Type::none();
    }
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::ArgMax:
    case Op::ArgMin:
      return infer_reduce(op, operands, attrs, loc);
    case Op::Dot:
      return infer_dot(operands, loc);
    case Op::For: {
      for (size_t i = 0; i < 3; ++i) {
        const Type& t = require_scalar(op, operands, i, i == 0 ? "the start" : i == 1 ? "the end" : "the step", loc);
        if (t.dtype != i32)
          fail(loc, fmt::format("for_range: bounds and step must be i32, got {}; convert it with cast<int32_t>(...)",
                                t.str()));
      }
      return Type::none();
    }
    case Op::If: {
      const Type& c = require_scalar(op, operands, 0, "the condition", loc);
      if (c.dtype != i1) fail(loc, fmt::format("if_: the condition must be a bool scalar, got {}", c.str()));
      return Type::none();
    }
    case Op::VarDecl: {
      const Type& init = value_operand(op, operands, 0, loc);
      return Type::var(init.dtype, init.shape);
    }
    case Op::VarGet: {
      const Type& v = operands.at(0)->type;
      if (v.kind != Type::Kind::Var) fail(loc, "var_get: the operand is not a Var");
      return Type::value(v.dtype, v.shape);
    }
    case Op::VarSet: {
      const NodeRef& slot = operands.at(0);
      const Type& v = slot->type;
      if (v.kind != Type::Kind::Var) fail(loc, "var_set: the target is not a Var");
      const Type& x = value_operand(op, operands, 1, loc);
      Type declared = Type::value(v.dtype, v.shape);
      if (!x.same_value_type(declared))
        fail(loc, fmt::format("this assignment changes the type of a Var declared as {} at {}: the new value is {}; a "
                              "Var keeps the shape and element type of its initial value",
                              declared.str(), slot->loc.str(), x.str()));
      return Type::none();
    }
    case Op::LocalAlloc: {
      if (attrs.shape.size() < 2 || attrs.shape[0] < 1)
        fail(loc, "local_alloc: give a tile shape and a stage count of at least 1");
      Shape stage(attrs.shape.begin() + 1, attrs.shape.end());
      check_tile_shape(stage, "local_alloc", loc);
      if (attrs.dtype.pointer || attrs.dtype.is_bool())
        fail(loc, fmt::format("local_alloc: shared buffers hold numbers, not {}", attrs.dtype.str()));
      if (!operands.empty()) {  // reuses another allocation's bytes
        const Node& other = *operands[0];
        if (other.op != Op::LocalAlloc || !other.operands.empty())
          fail(loc, "local_alloc: `reuse` must be a buffer that local_alloc made without reuse");
        int64_t mine = Type::shared(attrs.dtype, attrs.shape).numel() * attrs.dtype.bytes();
        int64_t theirs = other.type.numel() * other.type.dtype.bytes();
        if (mine > theirs)
          fail(loc, fmt::format("local_alloc: this buffer needs {} bytes but reuses '{}' (made at {}), which has {}; "
                                "reuse a larger buffer or use fewer stages",
                                mine, other.attrs.names.at(0), other.loc.str(), theirs));
      }
      return Type::shared(attrs.dtype, attrs.shape);
    }
    case Op::LocalView: {
      const Type& buf = shared_operand(op, operands, 0, false, loc);
      require_i32_scalar(op, operands, 1, "the stage", loc);
      return Type::shared(buf.dtype, Shape(buf.shape.begin() + 1, buf.shape.end()));
    }
    case Op::LocalLoad: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      return Type::value(v.dtype, v.shape);
    }
    case Op::LocalStore:
    case Op::LocalStoreRemote: {
      if (op == Op::LocalStoreRemote) require_i32_scalar(op, operands, 2, "the cluster rank of the block to store into", loc);
      const Type& v = shared_operand(op, operands, 0, true, loc);
      const Type& x = value_operand(op, operands, 1, loc);
      if (!x.same_value_type(Type::value(v.dtype, v.shape)))
        fail(loc, fmt::format("local_store of a {} tile into a buffer stage of {}; the tile must have the stage's shape "
                              "and element type",
                              x.str(), Type::value(v.dtype, v.shape).str()));
      return Type::none();
    }
    case Op::AllocBarriers: {
      int64_t count = attrs.ints.at(0), arrivals = attrs.ints.at(1);
      if (count < 1 || count > 1024) fail(loc, fmt::format("alloc_barriers: {} barriers; allocate 1 to 1024", count));
      if (arrivals < 1 || arrivals > (1 << 20) - 1)
        fail(loc, fmt::format("alloc_barriers: an arrive count of {} is out of range; a phase needs 1 to 2^20 - 1 arrivals",
                              arrivals));
      return Type::barrier({count});
    }
    case Op::BarrierAt: {
      const Type& t = operands.at(0)->type;
      if (t.kind != Type::Kind::Barrier || t.shape.empty())
        fail(loc, fmt::format("indexing needs the array from alloc_barriers, got {}", kind_name(t)));
      require_i32_scalar(op, operands, 1, "the index", loc);
      return Type::barrier({});
    }
    case Op::BarrierExpectBytes:
      require_one_barrier(op, operands, loc);
      require_i32_scalar(op, operands, 1, "the byte count", loc);
      return Type::none();
    case Op::BarrierArrive:
      require_one_barrier(op, operands, loc);
      return Type::none();
    case Op::BarrierWait:
      require_one_barrier(op, operands, loc);
      require_i32_scalar(op, operands, 1, "the phase", loc);
      return Type::none();
    case Op::NamedBarrierArrive:
    case Op::NamedBarrierWait: {
      int64_t id = attrs.ints.at(0), threads = attrs.ints.at(1);
      if (id < 0 || id > 15)
        fail(loc, fmt::format("{}: barrier id {} does not exist; the hardware has named barriers 0 to 15", name(op), id));
      if (threads < 32 || threads % 32 != 0 || threads > 1024)
        fail(loc, fmt::format("{}: {} threads; the count must be a multiple of 32 (whole warps) from 32 to 1024",
                              name(op), threads));
      return Type::none();
    }
    case Op::AsyncDescriptorLoad:
    case Op::AsyncDescriptorLoadMulticast:
    case Op::AsyncDescriptorStore: {
      bool is_load = op != Op::AsyncDescriptorStore, multicast = op == Op::AsyncDescriptorLoadMulticast;
      check_eviction(op, attrs, loc);
      const Type& d = operands.at(0)->type;
      if (d.kind != Type::Kind::TensorDesc)
        fail(loc, fmt::format("{}: operand 0 must be a TensorDesc kernel parameter, got {}", name(op), kind_name(d)));
      const Type& v = shared_operand(op, operands, 1, true, loc);
      // A box's leading dimensions of size 1 (one head of a [B*H, S, D] tensor, say) are not part of the
      // tile: a [1, R, C] box fills an [R, C] view, row-major either way.
      auto squeezed = [](const Shape& s) {
        size_t first = 0;
        while (first + 1 < s.size() && s[first] == 1) ++first;
        return Shape(s.begin() + static_cast<std::ptrdiff_t>(first), s.end());
      };
      if (v.dtype != d.dtype || squeezed(v.shape) != squeezed(d.shape))
        fail(loc, fmt::format("{}: the descriptor moves boxes of {}{} but the shared buffer stage is {}{}; make the "
                              "buffer's tile shape the descriptor's box (or the box the tile shape; leading box "
                              "dimensions of 1 may be left out)",
                              name(op), d.dtype.str(), shape_str(d.shape), v.dtype.str(), shape_str(v.shape)));
      size_t first_coord = multicast ? 4 : is_load ? 3 : 2;
      if (is_load) {
        std::vector<NodeRef> bar{operands.at(2)};
        require_one_barrier(op, bar, loc);
      }
      if (multicast) require_i32_scalar(op, operands, 3, "the multicast mask", loc);
      if (operands.size() - first_coord != d.shape.size())
        fail(loc, fmt::format("{}: {} coordinates for a {}-dimensional descriptor; give one per dimension",
                              name(op), operands.size() - first_coord, d.shape.size()));
      for (size_t i = first_coord; i < operands.size(); ++i) require_i32_scalar(op, operands, i, "a coordinate", loc);
      return Type::none();
    }
    case Op::AsyncStoreWait:
      if (attrs.ints.at(0) < 0 || attrs.ints.at(0) > 63)
        fail(loc, fmt::format("async_store_wait({}): the number of stores left in flight must be 0 to 63", attrs.ints[0]));
      return Type::none();
    case Op::FenceAsyncShared:
      return Type::none();
    case Op::AsyncLoad: {
      const Type& p = value_operand(op, operands, 0, loc);
      if (!p.dtype.pointer) fail(loc, fmt::format("async_load needs a tile of pointers, got {}", p.str()));
      check_eviction(op, attrs, loc);
      const Type& v = shared_operand(op, operands, 1, true, loc);
      if (operands[1]->op == Op::LocalTrans)
        fail(loc, "async_load into a local_trans view: copy into the stage as it is stored, then read it through "
                  "local_trans");
      DType elem{p.dtype.scalar, false};
      if (v.dtype != elem || v.shape != p.shape)
        fail(loc, fmt::format("async_load of {} elements through pointers of shape {} into a buffer stage of {}; the "
                              "pointers must have the stage's shape and point to its element type",
                              elem.str(), shape_str(p.shape), Type::value(v.dtype, v.shape).str()));
      if (operands.size() >= 3) {
        const Type& m = value_operand(op, operands, 2, loc);
        if (m.dtype != i1 || m.shape != p.shape)
          fail(loc, fmt::format("async_load: the mask must be a bool tile of the pointers' shape {}, got {}",
                                shape_str(p.shape), m.str()));
      }
      if (operands.size() == 4) {
        const Type& o = value_operand(op, operands, 3, loc);
        if (o.dtype != elem || o.shape != p.shape)
          fail(loc, fmt::format("async_load: the fill value must be {} of shape {}, got {}", elem.str(),
                                shape_str(p.shape), o.str()));
      }
      return Type::none();
    }
    case Op::AsyncCommitGroup:
      return Type::none();
    case Op::AsyncWaitGroup:
      if (attrs.ints.at(0) < 0 || attrs.ints.at(0) > 63)
        fail(loc, fmt::format("async_wait_group({}): the number of groups left in flight must be 0 to 63", attrs.ints[0]));
      return Type::none();
    case Op::LocalRows: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      require_i32_scalar(op, operands, 1, "the first row", loc);
      if (operands[0]->op == Op::LocalTrans) fail(loc, "rows of a transposed view: take the rows first, then local_trans");
      int64_t rows = attrs.ints.at(0);
      if (v.rank() < 1 || rows < 1 || rows > v.shape[0] || v.shape[0] % rows != 0)
        fail(loc, fmt::format("rows({}) of a {} stage: the count must divide the stage's {} rows", rows, shape_str(v.shape),
                              v.rank() ? v.shape[0] : 0));
      Shape s = v.shape;
      s[0] = rows;
      return Type::shared(v.dtype, s);
    }
    case Op::LocalCols: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      if (operands[0]->op != Op::LocalView)
        fail(loc, "cols() takes a whole stage (buffer[stage]): column panels are a property of the buffer");
      int64_t first = attrs.ints.at(0), count = attrs.ints.at(1);
      if (v.rank() != 2 || count < 1 || first < 0 || first + count > v.shape[1] || first % count != 0)
        fail(loc, fmt::format("cols({}, {}) of a {} stage: the columns must lie inside it and start at a multiple of "
                              "the count",
                              first, count, shape_str(v.shape)));
      return Type::shared(v.dtype, {v.shape[0], count});
    }
    case Op::LocalTrans: {
      const Type& v = shared_operand(op, operands, 0, true, loc);
      if (v.rank() != 2) fail(loc, fmt::format("local_trans transposes a 2-D buffer stage, got {}", v.str()));
      if (operands[0]->op == Op::LocalTrans) fail(loc, "local_trans of a transposed view: use the view itself");
      return Type::shared(v.dtype, {v.shape[1], v.shape[0]});
    }
    case Op::AsyncDot: {
      // a: a buffer stage, or a tile in registers (wgmma's A from registers).
      const Type& a = operands.at(0)->type.kind == Type::Kind::Value ? value_operand(op, operands, 0, loc)
                                                                      : shared_operand(op, operands, 0, true, loc);
      const Type& b = shared_operand(op, operands, 1, true, loc);
      const Type& acc = value_operand(op, operands, 2, loc);
      if (a.rank() != 2 || b.rank() != 2)
        fail(loc, fmt::format("async_dot multiplies 2-D tiles, got a: {} and b: {}", a.str(), b.str()));
      bool fp8 = a.dtype.is_fp8() && b.dtype.is_fp8();
      if (!fp8 && (a.dtype != b.dtype || (a.dtype.scalar != ScalarType::bf16 && a.dtype.scalar != ScalarType::f16)))
        fail(loc, fmt::format("async_dot takes bf16 or f16 operands of one type, or fp8 ones (f8e4m3, f8e5m2, mixed "
                              "as you like), got a: {} and b: {}",
                              a.dtype.str(), b.dtype.str()));
      if (fp8) check_fp8_async_dot_operands(operands, loc);
      int64_t M = a.shape[0], K = a.shape[1], N = b.shape[1];
      int64_t k_step = fp8 ? 32 : 16;
      if (b.shape[0] != K)
        fail(loc, fmt::format("async_dot: a is {} and b is {}; a's columns must equal b's rows", shape_str(a.shape),
                              shape_str(b.shape)));
      std::vector<std::string> wrong;
      if (M % 64 != 0) wrong.push_back(fmt::format("M = {} is not a multiple of 64", M));
      if (K % k_step != 0) wrong.push_back(fmt::format("K = {} is not a multiple of {}", K, k_step));
      if (N % 8 != 0) wrong.push_back(fmt::format("N = {} is not a multiple of 8", N));
      if (N > 256) wrong.push_back(fmt::format("N = {} is over 256 (split b's columns over several async_dots)", N));
      if (!wrong.empty())
        fail(loc, fmt::format("async_dot of [{}x{}] by [{}x{}]: {}; wgmma needs M a multiple of 64, K a multiple of {} "
                              "(for {}) and N a multiple of 8 up to 256",
                              M, K, K, N, fmt::join(wrong, ", "), k_step, fp8 ? "fp8" : "16-bit operands"));
      Type result = Type::value(DType{ScalarType::f32, false}, {M, N});
      if (!acc.same_value_type(result))
        fail(loc, fmt::format("async_dot: the accumulator is {} but the product is {}", acc.str(), result.str()));
      return result;
    }
    case Op::AsyncDotWait: {
      const Type& x = value_operand(op, operands, 0, loc);
      if (operands[0]->op != Op::AsyncDot && operands[0]->op != Op::VarGet)
        fail(loc, "async_dot_wait takes the value of an async_dot (directly or through a Var)");
      if (attrs.ints.at(0) < 0 || attrs.ints.at(0) > 7)
        fail(loc, fmt::format("async_dot_wait({}): the number of groups left in flight must be 0 to 7", attrs.ints[0]));
      return x;
    }
    case Op::AsyncTasks:
      return Type::none();
    case Op::TaskReplicaId:
    case Op::ClusterCtaRank:
      return Type::value(i32, {});
    case Op::ClusterSync:
      return Type::none();
    case Op::ThreadIndex:
    case Op::ReadClock: {
      int64_t threads = attrs.ints.at(0);
      std::string what = thread_query_name(op, attrs);
      if (!is_pow2(threads))
        fail(loc, fmt::format("{}() gives one element per thread of its group, here {} threads, but tiles need a "
                              "power-of-two shape: call it in a task of 1, 2, 4, 8 or 16 warps",
                              what, threads));
      return Type::value(op == Op::ThreadIndex ? i32 : DType{ScalarType::i64, false}, {threads});
    }
    case Op::Nanosleep: {
      const Type& t = value_operand(op, operands, 0, loc);
      if (t.dtype != i32)
        fail(loc, fmt::format("nanosleep takes a duration in nanoseconds as i32 (a scalar or a tile), got {}; convert it "
                              "with cast<int32_t>(...)",
                              t.str()));
      return Type::none();
    }
    case Op::AsyncRemoteShmemCopy:
    case Op::AsyncDescriptorPrefetch:
    case Op::DescriptorPrefetch:
      return infer_copy_or_prefetch(op, operands, attrs, loc);
    case Op::BarrierArriveRemote:
      require_one_barrier(op, operands, loc);
      require_i32_scalar(op, operands, 1, "the cluster rank of the block to arrive in", loc);
      return Type::none();
    default:
      break;
  }
  throw InternalError(fmt::format("verifier: no typing rule for op '{}'", name(op)));
}

namespace {

// Where the Hopper constructs may appear: shared memory and barriers are allocated once per block, so
// only at the top of the kernel body (not inside loops, ifs or tasks); async_tasks at most once, at the
// top; task_replica_id only inside a task. A tile Var may not be declared before async_tasks: each task
// holds its tiles in the register layout of its own warps (the NVPTX lowering recomputes plain tiles made
// before async_tasks in each task, but a Var's slots would have to hold them in one layout for all of
// them), so the rule holds on every backend, not only where the GPU lowering finds it.
struct PlacementChecker {
  int depth = 0;
  bool in_task = false;
  const Node* tasks = nullptr;
  const Node* tile_var = nullptr;  // the first tile Var declared at the top of the body, before any async_tasks
  const Node* thread_query_outside_tasks = nullptr;  // thread_id() & co. outside every task body

  void check(const Node& n) {
    switch (n.op) {
      case Op::VarDecl:
        if (depth == 0 && !tasks && !tile_var && !n.type.shape.empty()) tile_var = &n;
        break;
      case Op::LocalAlloc:
      case Op::AllocBarriers:
        if (depth > 0)
          fail(n.loc, fmt::format("{} is inside a for_range, if_ or task body; shared memory and barriers are allocated "
                                  "once per block: call it at the top of the kernel body, before the loops and tasks",
                                  name(n.op)));
        break;
      case Op::AsyncTasks:
        if (depth > 0)
          fail(n.loc, "async_tasks is inside a for_range, if_ or task body; call it at the top of the kernel body (each "
                      "task's body holds its own loops)");
        if (tasks)
          fail(n.loc, fmt::format("a second async_tasks; a kernel has one set of tasks (the first is at {}): put all "
                                  "tasks in that call",
                                  tasks->loc.str()));
        if (tile_var)
          fail(tile_var->loc,
               fmt::format("a tile Var ({}) is declared before async_tasks (at {}): each task holds tiles in the "
                           "register layout of its own warps, so no Var can carry a tile into or across the tasks; "
                           "declare the Var inside the task that uses it (a plain tile made before async_tasks is "
                           "fine: each task recomputes it)",
                           tile_var->type.str(), n.loc.str()));
        tasks = &n;
        break;
      case Op::ThreadIndex:
      case Op::ReadClock:
        if (!in_task && !thread_query_outside_tasks) thread_query_outside_tasks = &n;
        break;
      case Op::TaskReplicaId:
        if (!in_task)
          fail(n.loc, "task_replica_id() is outside every task; call it inside a task body of async_tasks");
        break;
      default:
        break;
    }
  }
};

// An async_dot's value is pending until async_dot_wait: it may only flow into the wait, into a Var
// (carried to a wait), or be chained into another async_dot as its accumulator.
void check_async_dot_uses(const Node& n) {
  for (size_t i = 0; i < n.operands.size(); ++i) {
    const Node& o = *n.operands[i];
    if (o.op != Op::AsyncDot) continue;
    bool allowed = n.op == Op::AsyncDotWait || (n.op == Op::VarSet && i == 1) || (n.op == Op::AsyncDot && i == 2);
    if (!allowed)
      fail(n.loc, fmt::format("{} reads the result of async_dot (at {}) before async_dot_wait: the tensor cores may "
                              "still be writing it; wait first, e.g. acc = async_dot_wait(0, acc)",
                              name(n.op), o.loc.str()));
  }
}

struct ScopeChecker {
  std::unordered_set<const Node*> visible;
  PlacementChecker placement;

  void region(const Region& r) {
    std::vector<const Node*> added;
    auto define = [&](const NodeRef& n) {
      visible.insert(n.get());
      added.push_back(n.get());
    };
    for (const NodeRef& a : r.args) define(a);
    for (const NodeRef& n : r.body) {
      for (const NodeRef& o : n->operands)
        if (!visible.count(o.get()))
          fail(n->loc, fmt::format("{} uses a value (made at {}) that is not visible here: it was made inside a "
                                   "for_range or if_ body that has ended; carry it out through a Var declared before "
                                   "that body",
                                   name(n->op), o->loc.str()));
      Attrs attrs = n->attrs;
      Type t = infer_type(n->op, n->operands, attrs, n->loc);
      if (t.kind != n->type.kind || !t.same_value_type(n->type))
        throw InternalError(fmt::format("verifier: node %{} ({}) has type {} but its operands give {}", n->id,
                                        name(n->op), n->type.str(), t.str()));
      placement.check(*n);
      check_async_dot_uses(*n);
      bool was_in_task = placement.in_task;
      placement.in_task = was_in_task || n->op == Op::AsyncTasks;
      ++placement.depth;
      for (const Region& inner : n->regions) region(inner);
      --placement.depth;
      placement.in_task = was_in_task;
      define(n);
    }
    for (const Node* n : added) visible.erase(n);
  }
};

}  // namespace

void verify(const Function& f) {
  ScopeChecker checker;
  for (const NodeRef& p : f.params) checker.visible.insert(p.get());
  checker.region(f.body);
  const PlacementChecker& placed = checker.placement;
  if (placed.tasks && placed.thread_query_outside_tasks)
    fail(placed.thread_query_outside_tasks->loc,
         fmt::format("{}() is outside every task body of a kernel with async_tasks (at {}): the block's threads are "
                     "the tasks' threads, so per-thread values belong inside a task body; call it there",
                     thread_query_name(placed.thread_query_outside_tasks->op, placed.thread_query_outside_tasks->attrs),
                     placed.tasks->loc.str()));
}

}  // namespace weft::ir
