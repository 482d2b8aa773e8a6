// NVPTX lowering: reductions (sum, max, min, argmax, argmin) along an axis or of a whole tile, through
// registers, warp shuffles and shared memory.
#include "codegen/nvptx/lowering.h"
#include "ir/walk.h"

namespace weft::codegen::nvptx::detail {

Lowering::Partial Lowering::combine(Op op, DType d, Partial a, Partial b) {
  switch (op) {
    case Op::ReduceSum: return {ops_.binary(Op::Add, d, a.value, b.value), nullptr};
    case Op::ReduceMax: return {ops_.binary(Op::Max, d, a.value, b.value), nullptr};
    case Op::ReduceMin: return {ops_.binary(Op::Min, d, a.value, b.value), nullptr};
    default: {  // the extreme value (NaN above all), the first index on ties (element_ops.h)
      Value* strictly = ops_.arg_better(op, d, b.value, a.value);
      Value* tie = b_.CreateAnd(ops_.arg_same(d, b.value, a.value), b_.CreateICmpSLT(b.index, a.index));
      Value* take_b = b_.CreateOr(strictly, tie);
      return {b_.CreateSelect(take_b, b.value, a.value), b_.CreateSelect(take_b, b.index, a.index)};
    }
  }
}

// A whole tile down to one value, when every element has a single owner (no copies): each thread
// combines its own registers, each warp by shuffles, the warps through shared memory — no staging.
void Lowering::reduce_to_scalar(const NodeRef& n) {
  const NodeRef& x = n->operands[0];
  DType d = x->type.dtype;
  bool is_arg = n->op == Op::ArgMax || n->op == Op::ArgMin;
  int64_t total = x->type.numel();
  const Regs& xs = regs(x);
  Partial p{xs.v[0], is_arg ? flat_index(total, 0) : nullptr};
  for (size_t r = 1; r < xs.v.size(); ++r)
    p = combine(n->op, d, p, {xs.v[r], is_arg ? flat_index(total, static_cast<int64_t>(r)) : nullptr});
  for (int64_t lanes = 16; lanes >= 1; lanes /= 2)
    p = combine(n->op, d, p, {ptx_.shuffle_xor(p.value, lanes), is_arg ? ptx_.shuffle_xor(p.index, lanes) : nullptr});
  if (threads_ > 32) p = combine_block_warps(n->op, d, p, n->loc);
  regs_[n.get()] = {{ops_.round(n->type.dtype, is_arg ? p.index : p.value)}};
}

bool Lowering::reduces_to_scalar(const ir::Node& n) const {
  bool reduction = n.op == Op::ReduceSum || n.op == Op::ReduceMax || n.op == Op::ReduceMin || n.op == Op::ArgMax ||
                   n.op == Op::ArgMin;
  return reduction && n.type.shape.empty() && n.operands[0]->type.numel() >= threads_;
}

bool Lowering::has_block_reduction(const ir::Region& r) const {
  return threads_ > 32 && ir::any_statement(r, [&](const ir::Node& n) { return reduces_to_scalar(n); });
}

// Along the rows of an Acc tile: each thread combines its own registers of each of its rows (as a tree,
// for instruction-level parallelism), then the four lanes that share the row by two shuffles. The
// result stays where the rows are (AccRows): nothing goes through shared memory.
void Lowering::reduce_acc_rows(const NodeRef& n) {
  const Regs& x = regs(n->operands[0]);
  DType d = n->operands[0]->type.dtype;
  Regs out = empty_regs(Layout::AccRows, n->type.shape);
  int64_t per_block = x.cols / 2;
  for (int64_t block = 0; block < x.rows / 64; ++block)
    for (int64_t half = 0; half < 2; ++half) {
      std::vector<Partial> parts;
      for (int64_t i = 0; i < x.cols / 8; ++i)
        for (int64_t e = 0; e < 2; ++e) parts.push_back({x.v[static_cast<size_t>(block * per_block + 4 * i + 2 * half + e)], nullptr});
      while (parts.size() > 1) {
        std::vector<Partial> next;
        for (size_t k = 0; k + 1 < parts.size(); k += 2) next.push_back(combine(n->op, d, parts[k], parts[k + 1]));
        if (parts.size() % 2) next.push_back(parts.back());
        parts = std::move(next);
      }
      Partial p = parts[0];
      for (int64_t lanes = 1; lanes <= 2; lanes *= 2) p = combine(n->op, d, p, {ptx_.shuffle_xor(p.value, lanes), nullptr});
      out.v.push_back(ops_.round(n->type.dtype, p.value));
    }
  regs_[n.get()] = std::move(out);
}

void Lowering::reduce(const NodeRef& n) {
  const NodeRef& x = n->operands[0];
  if (layout_of(*n) == Layout::AccRows) return reduce_acc_rows(n);
  if (reduces_to_scalar(*n)) return reduce_to_scalar(n);
  DType d = x->type.dtype;
  Op op = n->op;
  bool is_arg = op == Op::ArgMax || op == Op::ArgMin;
  int64_t total = x->type.numel(), len = x->type.shape[n->axis()], inner = 1;
  for (size_t k = n->axis() + 1; k < x->type.shape.size(); ++k) inner *= x->type.shape[k];
  int64_t outputs = total / len;
  llvm::Type* t = ops_.compute_type(d);
  int64_t elem_bytes = static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t));
  // Threads per output: the block splits each output's `len` inputs among `group` threads.
  int64_t group = outputs >= threads_ ? 1 : std::min(len, threads_ / outputs);
  int64_t partials_at = total * elem_bytes;
  claim_shared(partials_at + 2 * threads_ * 8, n->loc);
  stage(regs(x), d, total, 0);
  sync_group();

  std::vector<Partial> results;
  Value* part = group == 1 ? i32c(0) : b_.CreateURem(tid_, i32c(group));
  for (int64_t q = 0; q < per_thread(outputs); ++q) {
    Value* out = group == 1 ? flat_index(outputs, q) : b_.CreateURem(b_.CreateUDiv(tid_, i32c(group)), i32c(outputs));
    Value* base = b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(out, i32c(inner)), i32c(len * inner)),
                               b_.CreateURem(out, i32c(inner)));
    auto input = [&](Value* k) { return b_.CreateLoad(t, shared_at(t, 0, b_.CreateAdd(base, b_.CreateMul(k, i32c(inner))))); };
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    Value* acc = eb.CreateAlloca(t);
    Value* acc_index = eb.CreateAlloca(b_.getInt32Ty());
    b_.CreateStore(input(part), acc);
    b_.CreateStore(part, acc_index);
    counted_loop(b_.CreateAdd(part, i32c(group)), i32c(len), i32c(group), [&](Value* k) {
      Partial p = combine(op, d, {b_.CreateLoad(t, acc), b_.CreateLoad(b_.getInt32Ty(), acc_index)}, {input(k), k});
      b_.CreateStore(p.value, acc);
      if (p.index) b_.CreateStore(p.index, acc_index);
    });
    Partial p{b_.CreateLoad(t, acc), is_arg ? b_.CreateLoad(b_.getInt32Ty(), acc_index) : nullptr};
    for (int64_t lanes = std::min<int64_t>(group, 32) / 2; lanes >= 1; lanes /= 2)
      p = combine(op, d, p, {ptx_.shuffle_xor(p.value, lanes), is_arg ? ptx_.shuffle_xor(p.index, lanes) : nullptr});
    if (group > 32) p = combine_warps(op, d, p, group, partials_at);
    results.push_back(p);
  }
  sync_group();

  Regs out;
  for (const Partial& p : results) out.v.push_back(ops_.round(n->type.dtype, is_arg ? p.index : p.value));
  if (group > 1) {  // thread t computed output (t / group) mod outputs; the layout wants t mod outputs
    DType rd = n->type.dtype;
    llvm::Type* st = shared_type(rd);
    Value* out_index = b_.CreateURem(b_.CreateUDiv(tid_, i32c(group)), i32c(outputs));
    guarded(b_.CreateICmpEQ(part, i32c(0)), [&]() -> Value* {
      b_.CreateStore(to_shared(rd, out.v[0]), shared_at(st, 0, out_index));
      return nullptr;
    }, nullptr);
    sync_group();
    out.v[0] = from_shared(rd, b_.CreateLoad(st, shared_at(st, 0, flat_index(outputs, 0))));
    sync_group();
  }
  regs_[n.get()] = std::move(out);
}

// The per-warp partials of a whole-block reduction, combined with one barrier: every lane writes its
// warp's partial (one value to one address: no branch), every thread reads them all. Two scratch
// buffers take turns, so the next such reduction may write while slow threads still read this one
// (its barrier then settles those reads); any other use of shared memory settles them first. The turn
// is a run-time value (constant-folded outside loops), so a loop with one reduction per iteration
// alternates too: unsettled reads are always on the buffer the turn does not point at.
Lowering::Partial Lowering::combine_block_warps(Op op, DType d, Partial p, SourceLoc loc) {
  int64_t warps = threads_ / 32, slot = warps * 8;  // a value (or an index) per warp, at most 8 bytes
  reserve_shared(4 * slot, loc);
  llvm::Type* t = ops_.compute_type(d);
  llvm::Type* i32 = b_.getInt32Ty();
  if (!scratch_turn_) {
    llvm::IRBuilder<> eb(entry_, entry_->begin());
    scratch_turn_ = eb.CreateAlloca(i32);
    eb.CreateStore(i32c(0), scratch_turn_);
  }
  Value* turn = b_.CreateLoad(i32, scratch_turn_);
  b_.CreateStore(b_.CreateXor(turn, i32c(1)), scratch_turn_);
  Value* values = b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_base(), b_.CreateZExt(b_.CreateMul(turn, i32c(2 * slot)), b_.getInt64Ty()));
  Value* indices = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), values, slot);
  Value* warp = b_.CreateLShr(tid_, i32c(5));
  b_.CreateStore(p.value, b_.CreateInBoundsGEP(t, values, warp));
  if (p.index) b_.CreateStore(p.index, b_.CreateInBoundsGEP(i32, indices, warp));
  sync_group();
  partials_unsettled_ = true;
  auto partial_of = [&](int64_t w) -> Partial {
    return {b_.CreateLoad(t, b_.CreateConstInBoundsGEP1_64(t, values, w)),
            p.index ? b_.CreateLoad(i32, b_.CreateConstInBoundsGEP1_64(i32, indices, w)) : nullptr};
  };
  Partial r = partial_of(0);
  for (int64_t w = 1; w < warps; ++w) r = combine(op, d, r, partial_of(w));
  return r;
}

// Combines the per-warp partials of a group spanning several warps, through shared memory.
Lowering::Partial Lowering::combine_warps(Op op, DType d, Partial p, int64_t group, int64_t at) {
  llvm::Type* t = ops_.compute_type(d);
  Value* warp = b_.CreateUDiv(tid_, i32c(32));
  int64_t values_at = at, indices_at = at + threads_ * 8;
  guarded(b_.CreateICmpEQ(lane(), i32c(0)), [&]() -> Value* {
    b_.CreateStore(p.value, shared_at(t, values_at, warp));
    if (p.index) b_.CreateStore(p.index, shared_at(b_.getInt32Ty(), indices_at, warp));
    return nullptr;
  }, nullptr);
  sync_group();
  int64_t warps = group / 32;
  Value* first = b_.CreateMul(b_.CreateUDiv(warp, i32c(warps)), i32c(warps));
  auto partial_of = [&](Value* w) -> Partial {
    return {b_.CreateLoad(t, shared_at(t, values_at, w)),
            p.index ? b_.CreateLoad(b_.getInt32Ty(), shared_at(b_.getInt32Ty(), indices_at, w)) : nullptr};
  };
  Partial r = partial_of(first);
  for (int64_t w = 1; w < warps; ++w) r = combine(op, d, r, partial_of(b_.CreateAdd(first, i32c(w))));
  sync_group();
  return r;
}

}  // namespace weft::codegen::nvptx::detail
