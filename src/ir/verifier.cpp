// The typing rules of the tile ops (elementwise ops, constants, shapes, loads and stores, reductions, dot,
// control flow and Vars), infer_type's dispatch, and the helpers every verifier file uses
// (verifier_internal.h). The Hopper constructs' rules are in verify_hopper_constructs.cpp, the bulk copy's,
// prefetches' and eviction hints' in verify_copies_and_hints.cpp, the whole-kernel check (verify) in
// verify_scope_and_placement.cpp.
#include "ir/verifier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/atomics.h"
#include "ir/verifier_internal.h"

namespace weft::ir {

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

const Type& require_scalar(Op op, const std::vector<NodeRef>& operands, size_t i, std::string_view what, SourceLoc loc) {
  const Type& t = value_operand(op, operands, i, loc);
  if (!t.shape.empty()) fail(loc, fmt::format("{}: {} must be a scalar (rank 0), got {}", name(op), what, t.str()));
  return t;
}

// The public name of a ThreadIndex, ReadClock or VoteBallot node.
std::string thread_query_name(Op op, const Attrs& attrs) {
  static const char* const ids[] = {"thread_id", "lane_id", "warp_id", "warp_group_id"};
  if (op == Op::ThreadIndex) return ids[attrs.ints.at(1) & 3];
  if (op == Op::VoteBallot) return "vote_ballot_sync";
  return attrs.ints.at(1) == 0 ? "clock64" : "global_timer";
}

namespace {

constexpr int64_t kMaxTileElements = int64_t(1) << 20;

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

void check_constant_value(DType d, const Attrs& a, SourceLoc loc) {
  if (d.pointer) fail(loc, "a constant cannot be a pointer; pass pointers as kernel parameters");
  if (d.is_float()) return;
  const bool is_bool = d.scalar == ScalarType::i1;
  int64_t lo = is_bool ? 0 : std::numeric_limits<int64_t>::min() >> (64 - d.bits());
  int64_t hi = is_bool ? 1 : std::numeric_limits<int64_t>::max() >> (64 - d.bits());
  auto out_of_range = [&](const std::string& value) {
    fail(loc, fmt::format("the constant {} does not fit in {} (range {} to {})", value, d.str(), lo, hi));
  };
  if (a.integer) {  // given as an integer: exact
    if (*a.integer < lo || *a.integer > hi) out_of_range(std::to_string(*a.integer));
    return;
  }
  double v = a.number;
  if (!std::isfinite(v) || v != std::trunc(v))
    fail(loc, fmt::format("the constant {} is not a whole number but its type is {}; use a floating-point tile or "
                          "round the value",
                          v, d.str()));
  // Compared as doubles: converting an out-of-range double to int64_t is undefined.
  const double limit = is_bool ? 2.0 : std::ldexp(1.0, d.bits() - 1);  // the first value past the top
  if (v < (is_bool ? 0.0 : -limit) || v >= limit) out_of_range(fmt::format("{}", v));
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

// atomic_rmw (ptrs, value [, mask]) and atomic_cas (ptrs, compare, value [, mask]): the old values, of the
// pointee type and the pointers' shape.
static Type infer_atomic(Op op, const std::vector<NodeRef>& operands, const Attrs& attrs, SourceLoc loc) {
  const DType i1{ScalarType::i1, false};
  const bool cas = op == Op::AtomicCas;
  const size_t values = cas ? 2 : 1;
  if (attrs.ints.size() != (cas ? 2u : 3u) || (!cas && (attrs.ints[0] < 0 || attrs.ints[0] > int64_t(AtomicOp::xchg))) ||
      attrs.ints[cas ? 0 : 1] < 0 || attrs.ints[cas ? 0 : 1] > int64_t(MemOrder::acq_rel) ||
      attrs.ints[cas ? 1 : 2] < 0 || attrs.ints[cas ? 1 : 2] > int64_t(MemScope::system))
    fail(loc, fmt::format("{}: malformed attributes (operation, order, scope)", name(op)));
  AtomicInfo info = atomic_info(op, attrs);
  const std::string what = fmt::format("atomic_{}", atomic_name(info));
  if (operands.size() != 1 + values && operands.size() != 2 + values)
    fail(loc, fmt::format("{} takes the pointers, {} and an optional mask", what, cas ? "the compare value, the value" : "the value"));
  const Type& p = value_operand(op, operands, 0, loc);
  if (!p.dtype.pointer) fail(loc, fmt::format("{} needs a tile of pointers (or one pointer), got {}", what, p.str()));
  DType elem{p.dtype.scalar, false};
  const ScalarType s = elem.scalar;
  const bool word = s == ScalarType::i32 || s == ScalarType::i64;
  const bool wide_float = s == ScalarType::f32 || s == ScalarType::f64;
  const bool half_float = s == ScalarType::f16 || s == ScalarType::bf16;
  const bool add = !info.cas && info.op == AtomicOp::add;
  const bool add_or_xchg = add || (!info.cas && info.op == AtomicOp::xchg);
  if (!word && !(wide_float && add_or_xchg) && !(half_float && add))
    fail(loc, fmt::format("{} on {} pointers: the GPU's atomics take {}; keep the counters in a buffer of one of "
                          "those types",
                          what, p.dtype.str(),
                          add ? "i32, i64, f16, bf16, f32 or f64 elements"
                              : add_or_xchg ? "i32, i64, f32 or f64 elements" : "i32 or i64 elements"));
  for (size_t i = 1; i <= values; ++i) {
    const Type& v = value_operand(op, operands, i, loc);
    const char* role = cas && i == 1 ? "compare value" : "value";
    if (v.dtype != elem)
      fail(loc, fmt::format("{} through {} pointers: the {} is {}; its element type must be {} (convert it with "
                            "cast<{}>(...))",
                            what, p.dtype.str(), role, v.dtype.str(), elem.str(), elem.str()));
    if (v.shape != p.shape)
      fail(loc, fmt::format("{}: the {}'s shape {} differs from the pointers' shape {}", what, role, shape_str(v.shape),
                            shape_str(p.shape)));
  }
  if (operands.size() == 2 + values) {
    const Type& m = value_operand(op, operands, 1 + values, loc);
    if (m.dtype != i1 || m.shape != p.shape)
      fail(loc, fmt::format("{}: the mask must be a bool tile of the pointers' shape {}, got {}", what, shape_str(p.shape),
                            m.str()));
  }
  return Type::value(elem, p.shape);
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
      check_constant_value(attrs.dtype, attrs, loc);
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
    case Op::AtomicRmw:
    case Op::AtomicCas:
      return infer_atomic(op, operands, attrs, loc);
    case Op::WaitForPriorGrid:
    case Op::LaunchDependentGrids:
      return Type::none();
    case Op::Fence:
      if (!operands.empty() || attrs.ints.size() != 1 || attrs.ints[0] < 0 || attrs.ints[0] > int64_t(MemScope::system))
        fail(loc, "fence: malformed attributes (the scope)");
      return Type::none();
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
    case Op::While:
      if (!operands.empty()) fail(loc, "while: takes no operands (its test is region 0)");
      return Type::none();
    case Op::LoopCondition: {
      const Type& c = value_operand(op, operands, 0, loc);
      if (c.dtype != i1 || !c.shape.empty())
        fail(loc, fmt::format("while_: the condition must be a rank-0 Bool (one value for the whole program), got {}; "
                              "reduce a tile to one value first, e.g. with max(cast<int32_t>(mask), 0) > 0",
                              c.str()));
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
    default:
      break;
  }
  // Shared memory, barriers, TMA, async copies and dots, tasks, clusters, thread identity and time.
  return infer_hopper_construct(op, operands, attrs, loc);
}

}  // namespace weft::ir
