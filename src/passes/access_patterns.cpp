#include "passes/access_patterns.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "support/compile_timing.h"

namespace weft::passes {
namespace {

using ir::Op;

constexpr int64_t kLarge = int64_t(1) << 30;  // "divisible by any power of two we care about"

int64_t power_of_two_dividing(int64_t v) {
  if (v == 0) return kLarge;
  return std::min<int64_t>(kLarge, v & -v);
}

int64_t last_dim(const ir::Node& n) { return n.type.shape.empty() ? 1 : n.type.shape.back(); }
int64_t numel(const ir::Node& n) { return n.type.numel(); }

// The divisor of every element: within a run of consecutive values only the first is known to be a
// multiple of anything.
int64_t element_divisor(const AccessPattern& p) { return p.contiguity > 1 ? 1 : p.divisor; }

// The divisor of the starts of runs of `length` elements cut from p's runs (each a multiple of `length`
// past a start of p's).
int64_t run_divisor(const AccessPattern& p, int64_t length) {
  return p.contiguity > length ? std::gcd(p.divisor, length) : p.contiguity == length ? p.divisor : element_divisor(p);
}

// Runs never reach past a row of the last dimension (except constancy of values equal everywhere).
AccessPattern clamp(const ir::Node& n, AccessPattern p) {
  p.contiguity = std::min(p.contiguity, last_dim(n));
  p.constancy = std::min(p.constancy, numel(n));
  p.divisor = std::min(p.divisor, kLarge);
  return p;
}

}  // namespace

AccessPatterns::AccessPatterns(const ir::Function& f) {
  support::StageTimer timer(support::CompileStage::passes);
  for (const ir::NodeRef& p : f.params) known_[p.get()] = compute(*p);
  visit(f.body);
}

void AccessPatterns::visit(const ir::Region& r) {
  for (const ir::NodeRef& a : r.args) known_.emplace(a.get(), compute(*a));  // a loop index may be known
  for (const ir::NodeRef& n : r.body) {
    known_[n.get()] = compute(*n);
    if (n->op == Op::For) {  // i = lo + k * step: a multiple of whatever divides both
      int64_t d = std::gcd(element_divisor(of(n->operands[0].get())), element_divisor(of(n->operands[2].get())));
      known_[n->regions[0].args[0].get()] = {1, 1, d};
    }
    for (const ir::Region& inner : n->regions) visit(inner);
  }
}

AccessPattern AccessPatterns::of(const ir::Node* n) const {
  auto it = known_.find(n);
  return it == known_.end() ? AccessPattern{} : it->second;
}

AccessPattern AccessPatterns::compute(const ir::Node& n) const {
  auto operand = [&](size_t i) { return of(n.operands[i].get()); };
  AccessPattern unknown;
  switch (n.op) {
    case Op::Param:
      return {1, 1, n.attrs.ints.size() > 1 ? n.attrs.ints[1] : 1};
    case Op::Constant:
      if (!n.type.dtype.is_int()) return unknown;
      return clamp(n, {1, numel(n), power_of_two_dividing(n.attrs.integer_value())});
    case Op::Arange:
      return clamp(n, {numel(n), 1, power_of_two_dividing(n.attrs.ints[0])});
    case Op::Add:
    case Op::Sub:
    case Op::PtrAdd: {
      AccessPattern a = operand(0), b = operand(1);
      int64_t scale = 1;  // an offset counts elements; a pointer's divisor counts bytes
      if (n.op == Op::PtrAdd) scale = DType{n.type.dtype.scalar, false}.bytes();  // of the pointee
      AccessPattern out;
      // A run stays consecutive where one side runs and the other holds still (subtracting a running
      // value would run backwards: only a constant may be subtracted).
      out.contiguity = std::min(a.contiguity, b.constancy);
      if (n.op != Op::Sub) out.contiguity = std::max(out.contiguity, std::min(a.constancy, b.contiguity));
      out.constancy = std::min(a.constancy, b.constancy);
      out = clamp(n, out);
      out.divisor = std::gcd(run_divisor(a, out.contiguity), run_divisor(b, out.contiguity) * scale);
      return out;
    }
    case Op::Mul: {
      AccessPattern a = operand(0), b = operand(1);
      return clamp(n, {1, std::min(a.constancy, b.constancy), std::min(kLarge, element_divisor(a) * element_divisor(b))});
    }
    case Op::Cast:
      if (n.type.dtype.is_int() && !n.type.dtype.is_bool() && n.operands[0]->type.dtype.bits() <= n.type.dtype.bits())
        return operand(0);  // widening keeps the values
      break;
    case Op::Broadcast: {
      const ir::Node& x = *n.operands[0];
      AccessPattern p = operand(0);
      if (x.type.shape.empty() || numel(x) == 1) return clamp(n, {1, numel(n), p.divisor});
      if (last_dim(x) == last_dim(n)) return clamp(n, p);        // leading dimensions repeat whole rows
      if (last_dim(x) == 1) return clamp(n, {1, last_dim(n), element_divisor(p)});  // each value spreads along a row
      return {1, 1, element_divisor(p)};
    }
    case Op::Reshape: {
      const ir::Node& x = *n.operands[0];
      AccessPattern p = operand(0);
      if (last_dim(x) == last_dim(n)) return clamp(n, p);  // same rows
      return {1, 1, element_divisor(p)};
    }
    case Op::Lt:
    case Op::Ge:
    case Op::Gt:
    case Op::Le: {
      // `running < bound` (or >=): with the run's start and the bound both multiples of g, the switch
      // from true to false falls on a multiple of g, so aligned blocks of g elements share one result —
      // a mask `cols < n` is one predicate per 16-byte chunk when n is a multiple of the chunk. (<= and
      // > switch one element later: only the mirrored forms, bound on the left, get the same rule.)
      if (n.operands[0]->type.dtype.pointer) break;  // (the DSL has no pointer compares; runs step by bytes)
      bool left_runs = n.op == Op::Lt || n.op == Op::Ge;
      AccessPattern run = operand(left_runs ? 0 : 1), bound = operand(left_runs ? 1 : 0);
      int64_t k = std::min(run.constancy, bound.constancy);
      int64_t length = std::min(run.contiguity, bound.constancy);
      if (length > 1) k = std::max(k, std::gcd(length, std::gcd(run_divisor(run, length), element_divisor(bound))));
      return clamp(n, {1, k, 1});
    }
    default:
      break;
  }
  // Any other elementwise operation of values that hold still holds still; loop indices, program ids,
  // variables, loads …: nothing known.
  ir::OpCategory category = ir::op_category(n.op);
  if (category == ir::OpCategory::Unary || category == ir::OpCategory::Binary || category == ir::OpCategory::Compare ||
      n.op == Op::Select || n.op == Op::Cast || n.op == Op::Fma) {
    int64_t k = numel(n);
    for (size_t i = 0; i < n.operands.size(); ++i) k = std::min(k, operand(i).constancy);
    return clamp(n, {1, k, 1});
  }
  return unknown;
}

}  // namespace weft::passes
