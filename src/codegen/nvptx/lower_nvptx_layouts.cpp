// NVPTX lowering: the blocked and the wgmma layouts (lowering.h), which nodes keep the wgmma layout, and
// tiles moved between layouts through shared memory (relayout, exchange: broadcast, slice, permute).
#include "codegen/nvptx/lowering.h"

namespace weft::codegen::nvptx::detail {

// Flat element index of register r of this thread, in a tile of n elements.
Value* Lowering::flat_index(int64_t n, int64_t r) {
  if (n == 1) return i32c(0);
  int64_t v = vector_width(n), chunk = r / v, j = r % v;
  if (n < threads_ * v)  // threads hold copies: wrap around
    return b_.CreateAnd(b_.CreateAdd(b_.CreateMul(tid_, i32c(v)), i32c(chunk * threads_ * v + j)), i32c(n - 1));
  // No wrap-around, and no signed overflow (n <= 2^20): LLVM can then see that a chunk's elements are
  // consecutive, and fold the run-time check of the 16-byte accesses.
  return b_.CreateNSWAdd(b_.CreateNSWMul(tid_, i32c(v)), i32c(chunk * threads_ * v + j));
}

// Register r of x, or the first register of its run when the analysis proves the run holds one value
// (a chunk's V registers are V consecutive flat elements from a multiple of V): a mask `cols < n` then
// costs one compare per chunk, not one per element.
Value* Lowering::same_value_reg(const NodeRef& x, size_t r) {
  const std::vector<Value*>& v = regs(x).v;
  int64_t k = std::min(patterns_.of(x.get()).constancy, vector_width(x->type.numel()));
  if (k <= 1 || x->type.numel() < threads_ * vector_width(x->type.numel())) return v[r];
  return v[r - r % static_cast<size_t>(k)];
}

// The wgmma accumulator layout of a [rows, cols] f32 tile on one warp group (128 threads): per 64 rows,
// for each 8 columns c0, thread t (warp w, lane l) holds 4 registers: (16w + l/4, c0 + 2(l%4) + {0, 1})
// and the same 8 rows lower (the D fragment of wgmma.m64nNk16 in the PTX ISA).
Value* Lowering::wgmma_index(int64_t cols, int64_t r) {
  int64_t per_block = cols / 2, block = r / per_block, q = r % per_block, i = q / 4, e = q % 4;
  Value* warp = b_.CreateLShr(tid_, i32c(5));
  Value* lane = b_.CreateAnd(tid_, i32c(31));
  Value* row = b_.CreateAdd(b_.CreateAdd(b_.CreateMul(warp, i32c(16)), b_.CreateLShr(lane, i32c(2))),
                            i32c(block * 64 + (e >= 2 ? 8 : 0)));
  Value* col = b_.CreateAdd(b_.CreateShl(b_.CreateAnd(lane, i32c(3)), i32c(1)), i32c(8 * i + (e & 1)));
  return b_.CreateAdd(b_.CreateMul(row, i32c(cols)), col);
}

Value* Lowering::index_of(const Regs& r, int64_t n, int64_t k) {
  return r.wgmma ? wgmma_index(r.cols, k) : flat_index(n, k);
}

// The same tile in the other layout, through the group's scratch shared memory.
Regs Lowering::relayout(const Regs& src, DType d, const ir::Shape& shape, bool to_wgmma, SourceLoc loc) {
  int64_t n = shape.empty() ? 1 : shape[0] * (shape.size() > 1 ? shape[1] : 1);
  if (src.uniform) {
    Regs out = src;
    out.wgmma = to_wgmma;
    out.rows = shape[0];
    out.cols = shape.size() > 1 ? shape[1] : 1;
    return out;
  }
  llvm::Type* t = shared_type(d);
  reserve_shared(n * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), loc);
  for (size_t r = 0; r < src.v.size(); ++r) b_.CreateStore(to_shared(d, src.v[r]), shared_at(t, 0, index_of(src, n, r)));
  sync_group();
  Regs out;
  out.wgmma = to_wgmma;
  out.rows = shape[0];
  out.cols = shape.size() > 1 ? shape[1] : 1;
  for (int64_t r = 0; r < per_thread(n); ++r)
    out.v.push_back(from_shared(d, b_.CreateLoad(t, shared_at(t, 0, index_of(out, n, r)))));
  sync_group();
  return out;
}

// Moves a tile into another layout: dst element i takes src element source_of(i).
Regs Lowering::exchange(const Regs& src, DType d, int64_t n_src, int64_t n_dst,
                        const std::function<Value*(Value*)>& source_of, SourceLoc loc) {
  llvm::Type* t = shared_type(d);
  claim_shared(n_src * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), loc);
  stage(src, d, n_src, 0);
  sync_group();
  Regs out;
  for (int64_t r = 0; r < per_thread(n_dst); ++r)
    out.v.push_back(from_shared(d, b_.CreateLoad(t, shared_at(t, 0, source_of(flat_index(n_dst, r))))));
  sync_group();
  return out;
}

bool Lowering::elementwise_op(Op op) {
  auto c = ir::op_category(op);
  return c == ir::OpCategory::Unary || c == ir::OpCategory::Binary || c == ir::OpCategory::Compare ||
         op == Op::Fma || op == Op::Select || op == Op::Cast;
}

bool Lowering::uniform_node(const ir::Node& n) {
  return n.op == Op::Constant || (n.op == Op::Broadcast && n.operands[0]->type.numel() == 1);
}

// Whether a node's value lives in the wgmma layout (decided before lowering, so that Vars get it too):
// async_dot results, Vars assigned one, and elementwise ops on such values (with constants).
bool Lowering::produces_wgmma(const ir::Node& n) {
  if (n.op == Op::AsyncDot || n.op == Op::AsyncDotWait) return true;
  if (n.op == Op::VarGet) return wgmma_vars_.count(n.operands[0].get()) > 0;
  if (n.op == Op::Slice)
    return n.attrs.ints[0] == 1 && n.attrs.ints[1] % 8 == 0 && n.attrs.ints[2] % 8 == 0 && produces_wgmma(*n.operands[0]);
  if (!elementwise_op(n.op)) return false;
  bool any = false;
  for (const NodeRef& o : n.operands) {
    if (produces_wgmma(*o))
      any = true;
    else if (!uniform_node(*o))
      return false;
  }
  return any;
}

void Lowering::find_wgmma_vars(const ir::Region& r, bool& changed) {
  for (const NodeRef& n : r.body) {
    if (n->op == Op::VarSet && produces_wgmma(*n->operands[1]) && wgmma_vars_.insert(n->operands[0].get()).second)
      changed = true;
    for (const ir::Region& inner : n->regions) find_wgmma_vars(inner, changed);
  }
}

// Converts this node's wgmma-layout operands to the blocked layout unless the node keeps them (then
// returns whether its own result is in the wgmma layout).
bool Lowering::prepare_layouts(const NodeRef& n) {
  converted_.clear();
  const auto& o = n->operands;
  bool any = false, all = true;
  for (const NodeRef& x : o) {
    auto it = regs_.find(x.get());
    if (it == regs_.end()) continue;
    if (it->second.wgmma && !it->second.uniform)
      any = true;
    else if (!it->second.uniform)
      all = false;
  }
  if (!any) return false;
  if (elementwise_op(n->op) && all) return true;
  if (n->op == Op::AsyncDot || n->op == Op::AsyncDotWait || n->op == Op::VarSet || n->op == Op::VarDecl ||
      n->op == Op::LocalStore || n->op == Op::LocalStoreRemote || n->op == Op::Slice)
    return false;  // these handle the wgmma layout themselves
  for (const NodeRef& x : o) {
    const Regs& r = raw(x);
    if (r.wgmma && !r.uniform) converted_[x.get()] = relayout(r, x->type.dtype, x->type.shape, false, n->loc);
  }
  return false;
}

// `x`'s registers in the layout of Var `var`.
Regs Lowering::in_var_layout(const NodeRef& x, const ir::Node* var, SourceLoc loc) {
  const Regs& r = raw(x);
  bool want = wgmma_vars_.count(var) > 0;
  if (r.uniform || r.wgmma == want) {
    Regs out = r;
    out.wgmma = want;
    out.rows = want ? x->type.shape[0] : 0;
    out.cols = want ? x->type.shape[1] : 0;
    return out;
  }
  return relayout(r, x->type.dtype, x->type.shape, want, loc);
}

void Lowering::broadcast(const NodeRef& n) {
  const NodeRef& src = n->operands[0];
  int64_t n_src = src->type.numel();
  if (n_src == 1) {
    regs_[n.get()] = splat(regs(src).v[0], n->type.numel());
    return;
  }
  const ir::Shape& to = n->type.shape;
  const ir::Shape& from = src->type.shape;
  std::vector<int64_t> to_st = strides(to), from_st = strides(from);
  size_t offset = to.size() - from.size();
  regs_[n.get()] = exchange(regs(src), n->type.dtype, n_src, n->type.numel(), [&](Value* i) {
    Value* j = i32c(0);
    for (size_t k = offset; k < to.size(); ++k) {
      if (from[k - offset] == 1) continue;
      Value* c = b_.CreateURem(b_.CreateUDiv(i, i32c(to_st[k])), i32c(to[k]));
      j = b_.CreateAdd(j, b_.CreateMul(c, i32c(from_st[k - offset])));
    }
    return j;
  }, n->loc);
}

// A static part of a tile. Columns of a wgmma-layout tile in steps of 8 are a subset of its registers;
// anything else goes through shared memory.
void Lowering::slice(const NodeRef& n) {
  const NodeRef& src = n->operands[0];
  int64_t axis = n->attrs.ints[0], start = n->attrs.ints[1], size = n->attrs.ints[2];
  const Regs& r = raw(src);
  if (r.wgmma && !r.uniform && axis == 1 && start % 8 == 0 && size % 8 == 0) {
    Regs out;
    out.wgmma = true;
    out.rows = r.rows;
    out.cols = size;
    for (int64_t block = 0; block < r.rows / 64; ++block)
      for (int64_t k = 0; k < size / 2; ++k) out.v.push_back(r.v[block * r.cols / 2 + start / 2 + k]);
    regs_[n.get()] = std::move(out);
    return;
  }
  if (r.uniform) {
    regs_[n.get()] = splat(r.v[0], n->type.numel());
    return;
  }
  Regs blocked = r.wgmma ? relayout(r, src->type.dtype, src->type.shape, false, n->loc) : r;
  std::vector<int64_t> src_st = strides(src->type.shape), dst_st = strides(n->type.shape);
  regs_[n.get()] = exchange(blocked, n->type.dtype, src->type.numel(), n->type.numel(), [&](Value* i) {
    Value* j = i32c(0);
    for (size_t k = 0; k < n->type.shape.size(); ++k) {
      Value* c = b_.CreateURem(b_.CreateUDiv(i, i32c(dst_st[k])), i32c(n->type.shape[k]));
      if (static_cast<int64_t>(k) == axis) c = b_.CreateAdd(c, i32c(start));
      j = b_.CreateAdd(j, b_.CreateMul(c, i32c(src_st[k])));
    }
    return j;
  }, n->loc);
}

void Lowering::permute(const NodeRef& n) {
  const NodeRef& src = n->operands[0];
  std::vector<int64_t> src_st = strides(src->type.shape), dst_st = strides(n->type.shape);
  regs_[n.get()] = exchange(regs(src), n->type.dtype, src->type.numel(), n->type.numel(), [&](Value* i) {
    Value* j = i32c(0);
    for (size_t k = 0; k < n->type.shape.size(); ++k) {
      Value* c = b_.CreateURem(b_.CreateUDiv(i, i32c(dst_st[k])), i32c(n->type.shape[k]));
      j = b_.CreateAdd(j, b_.CreateMul(c, i32c(src_st[n->attrs.ints[k]])));
    }
    return j;
  }, n->loc);
}

}  // namespace weft::codegen::nvptx::detail
