// IR -> LLVM IR for the host CPU: fusion of elementwise chains. Each tile op is a loop over its elements
// into a tile of its own (lowering.h); a chain of k elementwise ops was k loops and k tiles, which LLVM then
// vectorized and unrolled one by one (a small-M GEMM's body of ~2,000 such loops took a minute to compile).
// A value with one use, by a consumer in the same region that reads each of its elements once at the
// consumer's own index, is left lazy instead: the consumer computes the element where it reads it, so the
// chain is one loop. Rounding is what the tile's store and load would do (Lowering::elem).
#include <algorithm>

#include "codegen/cpu/lowering.h"

namespace weft::codegen::cpu::detail {
namespace {

// Lazy chains deeper than this are computed into a tile: a consumer's element would otherwise recurse
// through the whole chain (a traced chain of a million tile ops).
constexpr int kMaxLazyDepth = 16;

// Ops lowered by define_elementwise (their element i reads each operand's element i once).
bool elementwise(const ir::Node& n) {
  switch (ir::op_category(n.op)) {
    case ir::OpCategory::Unary:
    case ir::OpCategory::Binary:
    case ir::OpCategory::Compare:
      return true;
    default: break;
  }
  return n.op == Op::Fma || n.op == Op::Select || n.op == Op::Cast || n.op == Op::PtrAdd;
}

// Whether `user` reads each element of its operand `x` once, at the index it computes (or, a reduction, at
// an index of its own, once), with no write to memory between reading operands and using them.
bool reads_each_element_once(const ir::Node& user, const ir::Node& x) {
  switch (user.op) {
    case Op::Load:
      return user.type.shape == x.type.shape;
    case Op::Store:
      return user.operands[0]->type.shape == x.type.shape;
    case Op::VarDecl:
    case Op::VarSet:
      return true;
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin:
    case Op::ArgMax:
    case Op::ArgMin:
      return true;
    default:
      return elementwise(user) && user.type.shape == x.type.shape;
  }
}

struct Use {
  int count = 0;
  const ir::Node* user = nullptr;
  const ir::Region* region = nullptr;
  size_t index = 0;
};

void count_uses(const ir::Region& r, std::unordered_map<const ir::Node*, Use>& uses) {
  for (size_t j = 0; j < r.body.size(); ++j) {
    const ir::Node& n = *r.body[j];
    for (const NodeRef& o : n.operands) {
      Use& u = uses[o.get()];
      ++u.count;
      u.user = &n;
      u.region = &r;
      u.index = j;
    }
    for (const ir::Region& inner : n.regions) count_uses(inner, uses);
  }
}

bool writes_var(const ir::Node& n, const ir::Node* var) {
  if (n.op == Op::VarSet && n.operands[0].get() == var) return true;
  for (const ir::Region& r : n.regions)
    for (const NodeRef& m : r.body)
      if (writes_var(*m, var)) return true;
  return false;
}

void plan_region(const ir::Region& r, const std::unordered_map<const ir::Node*, Use>& uses,
                 std::unordered_set<const ir::Node*>& fusible, std::unordered_map<const ir::Node*, size_t>& computed_at) {
  for (const NodeRef& n : r.body)
    for (const ir::Region& inner : n->regions) plan_region(inner, uses, fusible, computed_at);
  // Last to first, so that a value's consumer is decided before it: a lazy value is computed where its
  // consumer is, or (a lazy consumer) where that one is computed.
  for (size_t j = r.body.size(); j-- > 0;) {
    const ir::Node& n = *r.body[j];
    const bool var_read = n.op == Op::VarGet;
    if (!(elementwise(n) || var_read) || !n.type.is_value() || n.type.shape.empty()) continue;
    auto it = uses.find(&n);
    if (it == uses.end()) continue;
    const Use& u = it->second;
    if (u.count != 1 || u.region != &r || u.index <= j || !reads_each_element_once(*u.user, n)) continue;
    auto consumer = computed_at.find(u.user);
    const size_t at = consumer != computed_at.end() ? consumer->second : u.index;
    if (var_read) {  // the Var must still hold this value where it is computed (that op itself reads first)
      bool written = false;
      for (size_t k = j + 1; k < at && !written; ++k) written = writes_var(*r.body[k], n.operands[0].get());
      if (written) continue;
    }
    fusible.insert(&n);
    computed_at[&n] = at;
  }
}

}  // namespace

void Lowering::plan_fusion(const ir::Region& r) {
  std::unordered_map<const ir::Node*, Use> uses;
  count_uses(r, uses);
  std::unordered_map<const ir::Node*, size_t> computed_at;
  plan_region(r, uses, fusible_, computed_at);
}

bool Lowering::define_lazy(const NodeRef& n, std::function<Value*(Value*)> element, bool rounded) {
  if (!fusible_.count(n.get())) return false;
  int depth = 1;
  for (const NodeRef& o : n->operands)
    if (auto it = lazy_.find(o.get()); it != lazy_.end()) depth = std::max(depth, it->second.depth + 1);
  if (depth > kMaxLazyDepth) return false;
  lazy_[n.get()] = Lazy{std::move(element), depth, rounded};
  vals_[n.get()] = {Val::Kind::Lazy, nullptr};
  return true;
}

}  // namespace weft::codegen::cpu::detail
