// Typing and whole-kernel rules of the bulk copies (async_load_bulk and async_store_bulk between global and
// shared memory, async_remote_shmem_copy into another block of the cluster), the TMA prefetches and the L2
// eviction hints (include/weft/async.h).
//
// The rules are the GPU's: cp.async.bulk moves a multiple of 16 bytes between 16-byte aligned
// shared-memory addresses and completes them on an mbarrier that expects them; it names another block of
// the cluster, so the kernel runs in clusters. The CPU backend runs the same checks (verify and the
// kernel's specialization), so a kernel it accepts is one the GPU accepts.
#include <fmt/format.h>

#include <functional>
#include <unordered_set>

#include "ir/copy_hints.h"
#include "ir/verifier.h"

namespace weft::ir {
namespace {

[[noreturn]] void fail(SourceLoc loc, const std::string& message) { throw Error(message, loc); }

std::string name(Op op) { return std::string(op_name(op)); }

void require_i32(Op op, const NodeRef& n, std::string_view what, SourceLoc loc) {
  const Type& t = n->type;
  if (!t.is_scalar() || t.dtype != DType{ScalarType::i32, false})
    fail(loc, fmt::format("{}: {} must be an i32 scalar, got {}; convert it with cast<int32_t>(...)", name(op), what,
                          t.kind == Type::Kind::Value ? t.str() : "something that is not a value"));
}

const Type& require_descriptor(Op op, const NodeRef& n, SourceLoc loc) {
  if (n->type.kind != Type::Kind::TensorDesc)
    fail(loc, fmt::format("{}: operand 0 must be a TensorDesc kernel parameter", name(op)));
  return n->type;
}

// A stage of a buffer (or rows or columns of one) the bulk copy moves as bytes.
const Type& copy_view(Op op, const NodeRef& n, const char* which, SourceLoc loc) {
  const Type& t = n->type;
  if (t.kind != Type::Kind::Shared || n->op == Op::LocalAlloc)
    fail(loc, fmt::format("{}: {} must be one stage of a shared buffer (buffer[stage], or rows/cols of one)", name(op),
                          which));
  if (n->op == Op::LocalTrans)
    fail(loc, fmt::format("{}: {} is a local_trans view; the copy moves the bytes as they are stored: copy the stage "
                          "itself and read the destination through local_trans",
                          name(op), which));
  return t;
}

int64_t bytes_of(const Type& t) { return t.numel() * t.dtype.bytes(); }

// The barrier a copy completes on: one mbarrier, not the array.
void require_one_mbarrier(Op op, const NodeRef& n, SourceLoc loc) {
  if (n->type.kind != Type::Kind::Barrier || !n->type.shape.empty())
    fail(loc, fmt::format("{}: the barrier must be one mbarrier (bars[i] of alloc_barriers)", name(op)));
}

// cp.async.bulk's shared-memory side: a multiple of 16 bytes, at a 16-byte aligned address (stages are
// 1024-byte aligned; rows of a stage start at multiples of its row bytes).
void check_bulk_bytes(Op op, const NodeRef& view, SourceLoc loc) {
  const Type& t = view->type;
  int64_t bytes = bytes_of(t);
  if (bytes % 16 != 0)
    fail(loc, fmt::format("{} of {} moves {} bytes; cp.async.bulk moves a multiple of 16 bytes: make the tile's bytes "
                          "a multiple of 16 (e.g. more columns)",
                          name(op), Type::value(t.dtype, t.shape).str(), bytes));
  if (view->op != Op::LocalRows) return;
  const Type& whole = view->operands[0]->type;
  int64_t row_bytes = whole.numel() / whole.shape[0] * whole.dtype.bytes();
  if (row_bytes % 16 != 0)
    fail(loc, fmt::format("{}: the view is rows of a stage whose rows are {} bytes, so a block of rows may start at an "
                          "address that is not a multiple of 16, which cp.async.bulk needs; copy whole stages, or make "
                          "the rows a multiple of 16 bytes",
                          name(op), row_bytes));
}

}  // namespace

void check_eviction(Op op, const Attrs& attrs, SourceLoc loc) {
  if (attrs.ints.empty()) return;
  // A reducing TMA store carries {eviction (0: none), reduction}; the reduction is checked with the store.
  const bool reducing = op == Op::AsyncDescriptorStore && attrs.ints.size() == 2;
  const int e = copy_hints(attrs).evict;
  if (reducing && e == 0) return;
  if ((attrs.ints.size() != 1 && !reducing) || e < 1 || e > 4)
    fail(loc, fmt::format("{}: {} is not an L2 eviction priority; pass Evict::first, last, normal or unchanged (or "
                          "none)",
                          name(op), e));
}

Type infer_copy_or_prefetch(Op op, const std::vector<NodeRef>& operands, Attrs& attrs, SourceLoc loc) {
  switch (op) {
    case Op::AsyncRemoteShmemCopy: {
      const Type& dst = copy_view(op, operands.at(0), "the destination", loc);
      const Type& src = copy_view(op, operands.at(1), "the source", loc);
      if (dst.dtype != src.dtype || dst.shape != src.shape)
        fail(loc, fmt::format("{}: the destination is {} but the source is {}; copy between views of one element type "
                              "and shape",
                              name(op), Type::value(dst.dtype, dst.shape).str(), Type::value(src.dtype, src.shape).str()));
      require_one_mbarrier(op, operands.at(2), loc);
      require_i32(op, operands.at(3), "the cluster rank of the receiving block", loc);
      check_bulk_bytes(op, operands.at(1), loc);
      check_bulk_bytes(op, operands.at(0), loc);
      return Type::none();
    }
    case Op::AsyncRemoteShmemStore: {
      const Type& dst = operands.at(0)->type;
      if (dst.kind != Type::Kind::Shared || operands[0]->op == Op::LocalAlloc)
        fail(loc, fmt::format("{}: the destination must be one stage of a shared buffer (buffer[stage], or a view of "
                              "one)",
                              name(op)));
      const Type& x = operands.at(1)->type;
      if (x.kind != Type::Kind::Value || !x.same_value_type(Type::value(dst.dtype, dst.shape)))
        fail(loc, fmt::format("{} of a {} tile into a view of {}: the tile must have the view's shape and element type",
                              name(op), x.kind == Type::Kind::Value ? x.str() : "non-value",
                              Type::value(dst.dtype, dst.shape).str()));
      if (dst.dtype.bytes() != 4 && dst.dtype.bytes() != 8)
        fail(loc, fmt::format("{} of {} elements: st.async stores 4 or 8 bytes at a time, so the elements must be i32, "
                              "f32, i64 or f64; convert the tile (cast<float>(...)) or use local_store(view, tile, "
                              "rank) and barrier_arrive(bar, rank)",
                              name(op), dst.dtype.str()));
      require_one_mbarrier(op, operands.at(2), loc);
      require_i32(op, operands.at(3), "the cluster rank of the receiving block", loc);
      return Type::none();
    }
    case Op::AsyncLoadBulk:
    case Op::AsyncStoreBulk: {
      const bool load = op == Op::AsyncLoadBulk;
      const Type& p = operands.at(0)->type;
      const Type& v = copy_view(op, operands.at(1), load ? "the destination" : "the source", loc);
      if (p.kind != Type::Kind::Value || !p.dtype.pointer || !p.shape.empty())
        fail(loc, fmt::format("{}: the {} must be one pointer (a rank-0 Ptr, e.g. x + offset), got {}", name(op),
                              load ? "source" : "destination",
                              p.kind == Type::Kind::Value ? p.str() : "something that is not a value"));
      if (DType{p.dtype.scalar, false} != v.dtype)
        fail(loc, fmt::format("{}: the pointer is to {} but the view holds {}; use a pointer to the view's element "
                              "type",
                              name(op), DType{p.dtype.scalar, false}.str(), v.dtype.str()));
      if (load) require_one_mbarrier(op, operands.at(2), loc);
      check_bulk_bytes(op, operands.at(1), loc);
      return Type::none();
    }
    case Op::AsyncDescriptorPrefetch: {
      const Type& d = require_descriptor(op, operands.at(0), loc);
      check_eviction(op, attrs, loc);
      if (operands.size() - 1 != d.shape.size())
        fail(loc, fmt::format("{}: {} coordinates for a {}-dimensional descriptor; give one per dimension", name(op),
                              operands.size() - 1, d.shape.size()));
      for (size_t i = 1; i < operands.size(); ++i) require_i32(op, operands[i], "a coordinate", loc);
      return Type::none();
    }
    case Op::DescriptorPrefetch:
      require_descriptor(op, operands.at(0), loc);
      return Type::none();
    default: break;
  }
  throw InternalError(fmt::format("verifier: infer_copy_or_prefetch has no rule for op '{}'", name(op)));
}

void verify_cluster_copies(const Function& f, int cluster_blocks, std::string_view kernel) {
  std::vector<const Node*> copies;
  std::unordered_set<const Node*> expecting;  // barrier arrays some barrier_expect_bytes names
  auto array_of = [](const Node* bar) { return bar->op == Op::BarrierAt ? bar->operands[0].get() : bar; };
  std::function<void(const Region&)> walk = [&](const Region& r) {
    for (const NodeRef& n : r.body) {
      if (n->op == Op::AsyncRemoteShmemCopy || n->op == Op::AsyncRemoteShmemStore) copies.push_back(n.get());
      if (n->op == Op::BarrierExpectBytes) expecting.insert(array_of(n->operands[0].get()));
      for (const Region& inner : n->regions) walk(inner);
    }
  };
  walk(f.body);
  for (const Node* c : copies) {
    const std::string what = name(c->op);
    if (cluster_blocks < 2)
      fail(c->loc, fmt::format("{} {} into another block of the thread-block cluster, but kernel '{}' does not run in "
                               "clusters; declare it with KernelOptions{{.cluster = {{2, 1, 1}}}} (or the cluster "
                               "shape it needs)",
                               what, c->op == Op::AsyncRemoteShmemCopy ? "copies" : "stores", kernel));
    const Node* bars = array_of(c->operands[2].get());
    if (!expecting.count(bars))
      fail(c->loc, fmt::format("{} completes its bytes on barrier '{}', but no barrier_expect_bytes names that barrier "
                               "array: the receiving block must expect the bytes (barrier_expect_bytes(bar, "
                               "view.bytes())) on the barrier it waits on, or its phase completes without them",
                               what, bars->attrs.names.empty() ? "?" : bars->attrs.names[0]));
  }
}

}  // namespace weft::ir
