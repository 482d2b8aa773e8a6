// NVPTX lowering: the register layouts (blocked, Acc, AccRows: lowering.h), which layout each value takes,
// index tiles computed in any layout, and tiles moved between layouts through shared memory (relayout,
// exchange: broadcast, slice, permute).
#include "codegen/nvptx/lowering.h"

#include <fmt/format.h>

#include <bit>

#include "codegen/llvm_builders.h"
#include "ir/walk.h"

namespace weft::codegen::nvptx::detail {

// The per-thread parts of the layouts' index arithmetic (functions of tid_ alone: lane, warp, tid * V, the
// accumulator layout's row and column of lane 0's element): made once per basic block and group, and
// shared by every register of every tile the block handles, which then add only their constant offsets.
// (One chain of instructions per element left thousands of duplicates for CSE and instcombine to remove.)
// A value made earlier in the same block dominates every later use there.
Value* Lowering::thread_value(int kind, int64_t arg, const std::function<Value*()>& make) {
  auto key = std::make_tuple(b_.GetInsertBlock(), tid_, kind, arg);
  auto it = thread_values_.find(key);
  if (it != thread_values_.end()) return it->second;
  Value* v = make();
  thread_values_.emplace(key, v);
  return v;
}

// tid_ read again through an asm LLVM does not move (PtxInstructions::thread_index_in_place): what is
// computed from it stays in the region being lowered. Everything computed from tid_ is loop-invariant,
// and LICM hoists it out of every loop around its use, where it stays live across the loop's body: the
// addresses of an epilogue's stores (acc_pair_offset), made once, would hold a register each through a
// persistent kernel's whole tile loop. Made once per region where the statement's first block is still
// the insertion block (it then dominates the rest of the region: statements run in sequence, and nested
// regions join again), else once per block.
Value* Lowering::tid_in_region() {
  auto make = [&] {
    Value* t = ptx_.thread_index_in_place();
    bool power_of_two = (threads_ & (threads_ - 1)) == 0;
    // With threads_ a power of two and a group start that is a multiple of it, the mask alone gives t.
    if (tid_ != block_tid_ && (!power_of_two || !group_starts_at_multiple_of(threads_))) t = b_.CreateSub(t, group_start());
    // t < threads_: the mask tells LLVM so.
    return power_of_two ? b_.CreateAnd(t, i32c(threads_ - 1)) : t;
  };
  if (b_.GetInsertBlock() != statement_block_) return thread_value(kTidInRegion, 0, make);
  Value*& v = region_tids_[tid_];
  if (!v) v = make();
  return v;
}

// The first thread of the group tid_ counts from: 0 outside tasks, else what async_tasks subtracted from
// block_tid_.
Value* Lowering::group_start() {
  if (tid_ == block_tid_) return i32c(0);
  auto* sub = llvm::dyn_cast<llvm::BinaryOperator>(tid_);
  if (sub && sub->getOpcode() == llvm::Instruction::Sub && sub->getOperand(0) == block_tid_) return sub->getOperand(1);
  return b_.CreateSub(block_tid_, tid_);
}

// Whether the group starts at a multiple of n (a power of two): then tid_ and block_tid_ agree in their low
// log2(n) bits, and what uses only those bits need not keep the group's start live (a warp group's lane).
bool Lowering::group_starts_at_multiple_of(int64_t n) {
  return tid_ == block_tid_ || known_zeros(group_start()).countr_one() >= unsigned(std::countr_zero(uint64_t(n)));
}

Value* Lowering::lane() {
  return thread_value(kLane, 0, [&] { return b_.CreateAnd(group_starts_at_multiple_of(32) ? block_tid_ : tid_, i32c(31)); });
}
Value* Lowering::warp() { return thread_value(kWarp, 0, [&] { return b_.CreateLShr(tid_, i32c(5)); }); }

// Flat element index of register r of this thread, in a tile of n elements.
Value* Lowering::flat_index(int64_t n, int64_t r) {
  if (n == 1) return i32c(0);
  int64_t v = vector_width(n), chunk = r / v, j = r % v;
  if (n < threads_ * v) {  // threads hold copies: wrap around
    Value* base = thread_value(kTidTimes, v, [&] { return b_.CreateMul(tid_, i32c(v)); });
    return b_.CreateAnd(add_const(base, chunk * threads_ * v + j), i32c(n - 1));
  }
  // No wrap-around, and no signed overflow (n <= 2^20): LLVM can then see that a chunk's elements are
  // consecutive, and fold the run-time check of the 16-byte accesses.
  Value* base = thread_value(kTidTimesNsw, v, [&] { return b_.CreateNSWMul(tid_, i32c(v)); });
  return add_const(base, chunk * threads_ * v + j, /*nsw=*/true);
}

// Where the access-pattern analysis proves that a blocked tile of n elements runs in steps of one along
// `contiguity` flat elements: for each register, an earlier register whose element lies in the same run
// for every thread, and how many elements further on its own is ({r, 0}: none, compute it). Thread t's
// register r holds flat element ((r / V) * T + t) * V + r % V (mod n where threads hold copies: flat_index).
std::vector<Lowering::RunStep> Lowering::run_steps(int64_t n, int64_t contiguity) {
  int64_t count = per_thread(n), v = vector_width(n);
  std::vector<RunStep> steps;
  for (int64_t r = 0; r < count; ++r) steps.push_back({r, 0});
  if (contiguity <= 1 || n == 1) return steps;
  auto flat = [&](int64_t r, int64_t t) {
    int64_t f = ((r / v) * threads_ + t) * v + r % v;
    return n < threads_ * v ? f & (n - 1) : f;
  };
  std::vector<int64_t> bases;  // registers computed in full, in order
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t from : bases) {
      bool same_run = true;
      int64_t delta = flat(r, 0) - flat(from, 0);
      for (int64_t t = 0; same_run && t < threads_; ++t)
        same_run = flat(r, t) / contiguity == flat(from, t) / contiguity && flat(r, t) - flat(from, t) == delta;
      if (same_run) {
        steps[r] = {from, delta};
        break;
      }
    }
    if (steps[r].from == r) bases.push_back(r);
  }
  return steps;
}

// A blocked tile of pointers (a PtrAdd): `pointer(r)` makes register r's pointer in full; where the
// analysis proves a run of consecutive elements, later registers of the run are an earlier register's
// pointer plus a constant instead. So a chunk's elements (and often all of a thread's) are one address and
// constant offsets, which the code generator folds into each access ([%rd+16]); from the per-register
// sext(row * n + tid * V + j) LLVM could not tell that without straight-line strength reduction, and the
// masked chunks' run-time check that the pointers are consecutive stayed in the PTX.
Regs Lowering::pointers_in_runs(const ir::Node& n, const std::function<Value*(int64_t r)>& pointer) {
  llvm::Type* pointee = ops_.memory_type(DType{n.type.dtype.scalar, false});
  Regs out;
  for (const RunStep& s : run_steps(n.type.numel(), patterns_.of(&n).contiguity)) {
    int64_t r = static_cast<int64_t>(out.v.size());
    out.v.push_back(s.from == r ? pointer(r) : b_.CreateConstGEP1_64(pointee, out.v[s.from], s.delta));
  }
  return out;
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
// Both from tid_in_region: a tile's columns (a register each, 32 for 128 columns) and rows are loop-invariant,
// and LICM hoisted them out of the loop that masks by them, where they stayed live (ptxas spilled 4-24 bytes
// in causal attention kernels); recomputed in the loop they cost an instruction each.
// The offsets go in with `or disjoint` where the bits they set are clear in the base (bit 3 of a row, and
// the block's bits 6 and up where the warp group has 4 warps; bit 0 and bits 3 and up of a column): what
// instcombine would make of an add, stated here so that no pass has to prove it (SASS: 21 of the suite's
// kernels shorter, none longer; and without the pipeline's first instcombine, D 64 causal attention no longer
// hoists `row + 8` out of its mask loop: benchmarks/NOTES.md, session 31).
Value* Lowering::acc_row(int64_t block, bool lower_half) {
  Value* base = thread_value(kAccRowBase, 0, [&] {
    Value* t = tid_in_region();
    Value* quad = b_.CreateLShr(b_.CreateAnd(t, i32c(31)), i32c(2));  // lane / 4: bits 0-2
    return disjoint_or(b_.CreateShl(b_.CreateLShr(t, i32c(5)), i32c(4)), quad);  // warp * 16: bits 4+
  });
  if (block == 0 && !lower_half) return base;
  return thread_value(kAccRow, block * 2 + lower_half, [&] {
    Value* row = lower_half ? disjoint_or(base, i32c(8)) : base;
    if (block == 0) return row;
    return threads_ <= 128 ? disjoint_or(row, i32c(block * 64)) : add_const(row, block * 64);
  });
}
Value* Lowering::acc_col(int64_t eighth, int64_t e) {
  Value* base = thread_value(kAccColBase, 0, [&] {
    return b_.CreateShl(b_.CreateAnd(tid_in_region(), i32c(3)), i32c(1));  // 2 (lane % 4): bits 1-2
  });
  if (eighth == 0 && !(e & 1)) return base;
  return thread_value(kAccCol, eighth * 2 + (e & 1), [&] { return disjoint_or(base, i32c(8 * eighth + (e & 1))); });
}
// The flat index (row * cols + col) of register r of an Acc tile.
Value* Lowering::acc_index(int64_t cols, int64_t r) {
  int64_t per_block = cols / 2, block = r / per_block, q = r % per_block, i = q / 4, e = q % 4;
  Value* row = acc_row(block, e >= 2);
  Value* col = acc_col(i, e);
  return index_add(index_mul(row, cols), col, false);
}

Value* Lowering::index_of(const Regs& r, int64_t n, int64_t k) {
  switch (r.layout) {
    case Layout::Acc: return acc_index(r.cols, k);
    case Layout::AccRows: return acc_row(k / 2, k % 2 == 1);
    default: return flat_index(n, k);
  }
}

// index_of as a per-thread part and a constant, or nullopt where threads of the blocked layout hold copies
// (the index wraps around). The per-thread part is made once per basic block (thread_value), so the
// registers' shared-memory addresses become one address and constant offsets (scratch_register).
std::optional<std::pair<Value*, int64_t>> Lowering::index_parts(const Regs& r, int64_t n, int64_t k) {
  switch (r.layout) {
    case Layout::Acc: {
      int64_t per_block = r.cols / 2, block = k / per_block, q = k % per_block, i = q / 4, e = q % 4;
      Value* base = thread_value(kAccIndexBase, r.cols, [&] {
        return b_.CreateAdd(b_.CreateMul(acc_row(0, false), i32c(r.cols)), acc_col(0, 0));
      });
      return std::make_pair(base, (block * 64 + (e >= 2 ? 8 : 0)) * r.cols + 8 * i + (e & 1));
    }
    case Layout::AccRows: return std::make_pair(acc_row(0, false), k / 2 * 64 + (k % 2 == 1 ? 8 : 0));
    default: {
      if (n == 1) return std::make_pair(i32c(0), int64_t(0));
      int64_t v = vector_width(n);
      if (n < threads_ * v) return std::nullopt;
      Value* base = thread_value(kTidTimesNsw, v, [&] { return b_.CreateNSWMul(tid_, i32c(v)); });
      return std::make_pair(base, k / v * threads_ * v + k % v);
    }
  }
}

int64_t Lowering::register_count(Layout layout, const ir::Shape& shape) const {
  int64_t n = numel(shape);
  switch (layout) {
    case Layout::Acc: return n / 128;
    case Layout::AccRows: return shape[0] / 32;  // two rows per 64
    default: return per_thread(n);
  }
}

Regs Lowering::empty_regs(Layout layout, const ir::Shape& shape) const {
  Regs r;
  r.layout = layout;
  if (layout != Layout::Blocked) {
    r.rows = shape[0];
    r.cols = layout == Layout::Acc ? shape[1] : 1;
  }
  return r;
}

Regs Lowering::splat_in(Value* v, Layout layout, const ir::Shape& shape) const {
  Regs r = empty_regs(layout, shape);
  r.v.assign(static_cast<size_t>(register_count(layout, shape)), v);
  r.uniform = true;
  return r;
}

// The coordinates (i32, outermost first) of the element register r holds in a tile of `shape`.
std::vector<Value*> Lowering::coordinates(Layout layout, const ir::Shape& shape, int64_t r) {
  if (layout == Layout::Acc) {
    int64_t per_block = shape[1] / 2, block = r / per_block, q = r % per_block;
    return {acc_row(block, q % 4 >= 2), acc_col(q / 4, q % 4)};
  }
  if (layout == Layout::AccRows) {
    Value* row = acc_row(r / 2, r % 2 == 1);
    return shape.size() == 1 ? std::vector<Value*>{row} : std::vector<Value*>{row, i32c(0)};
  }
  if (shape.size() > 1)
    if (std::optional<std::vector<Value*>> c = blocked_coordinates(shape, r)) return *c;
  Value* flat = flat_index(numel(shape), r);
  if (shape.size() == 1) return {flat};
  std::vector<int64_t> st = strides(shape);
  std::vector<Value*> c;
  for (size_t k = 0; k < shape.size(); ++k)
    c.push_back(b_.CreateURem(b_.CreateUDiv(flat, i32c(st[k])), i32c(shape[k])));
  return c;
}

// The coordinates of register r of a blocked tile whose dimensions, like the block's threads, are powers of
// two: its flat index is tid V (bits log2 V up to log2 (T V)) or'd with a constant (its chunk's start, bits from
// log2 (T V) up, and its place in the chunk, bits under log2 V), so each coordinate, (flat >> s) & mask, is the
// thread's part (tid V >> s) & mask, made once per block, or'd with the constant's. What instcombine makes of
// the division and remainder of each register's flat index, written so (without it, the first instcombine of
// the pipeline was needed to merge the registers' copies of the thread's part). nullopt where the tile's
// threads hold copies (it wraps around) or a size is not a power of two.
std::optional<std::vector<Value*>> Lowering::blocked_coordinates(const ir::Shape& shape, int64_t r) {
  int64_t n = numel(shape), v = vector_width(n);
  if (n < threads_ * v || !is_pow2(threads_)) return std::nullopt;
  for (int64_t d : shape)
    if (!is_pow2(d)) return std::nullopt;
  int64_t c = r / v * threads_ * v + r % v;  // flat_index's constant
  std::vector<int64_t> st = strides(shape);
  std::vector<Value*> out;
  for (size_t k = 0; k < shape.size(); ++k) {
    int s = std::countr_zero(static_cast<uint64_t>(st[k]));
    int64_t mask = shape[k] - 1, constant = (c >> s) & mask;
    if ((int64_t(1) << s) >= threads_ * v || mask == 0) {  // the thread's part is 0
      out.push_back(i32c(constant));
      continue;
    }
    // (keyed by V, s and the mask: tiles of other sizes have other parts)
    int64_t key = (v * 64 + s) * 64 + std::countr_zero(static_cast<uint64_t>(shape[k]));
    Value* part = thread_value(kBlockedCoordinate, key, [&] {
      Value* base = thread_value(kTidTimesNsw, v, [&] { return b_.CreateNSWMul(tid_, i32c(v)); });
      return b_.CreateAnd(s == 0 ? base : b_.CreateLShr(base, i32c(s)), i32c(mask));
    });
    out.push_back(constant == 0 ? part : disjoint_or(part, i32c(constant)));
  }
  return out;
}

// The same tile in another layout, through the group's scratch shared memory.
Regs Lowering::relayout(const Regs& src, DType d, const ir::Shape& shape, Layout to, SourceLoc loc) {
  int64_t n = numel(shape);
  if (src.uniform) return splat_in(src.v[0], to, shape);
  llvm::Type* t = shared_type(d);
  reserve_shared(n * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), loc);
  for (size_t r = 0; r < src.v.size(); ++r) b_.CreateStore(to_shared(d, src.v[r]), scratch_register(t, 0, src, n, r));
  sync_group();
  Regs out = empty_regs(to, shape);
  for (int64_t r = 0; r < register_count(to, shape); ++r)
    out.v.push_back(from_shared(d, b_.CreateLoad(t, scratch_register(t, 0, out, n, r))));
  sync_group();
  return out;
}

// Moves a tile into another layout: the element of `dst` (blocked) at coordinates c takes src element
// source_of(c) (a flat index).
Regs Lowering::exchange(const Regs& src, DType d, int64_t n_src, const ir::Shape& dst,
                        const std::function<Value*(const std::vector<Value*>&)>& source_of, SourceLoc loc) {
  llvm::Type* t = shared_type(d);
  claim_shared(n_src * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), loc);
  stage(src, d, n_src, 0);
  sync_group();
  Regs out;
  for (int64_t r = 0; r < per_thread(numel(dst)); ++r)
    out.v.push_back(from_shared(d, b_.CreateLoad(t, shared_at(t, 0, source_of(coordinates(Layout::Blocked, dst, r))))));
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

// ---- which layout each value takes ----------------------------------------------------------------------
//
// Decided before lowering (so that Vars get one layout for the whole kernel): async_dot results are Acc;
// a row reduction (sum, max, min along axis 1) of an Acc tile is AccRows, and so are [rows] <-> [rows, 1]
// reshapes of it; a broadcast of an AccRows [rows, 1] along the columns is Acc again; elementwise ops
// whose non-uniform operands share one layout keep it; a Var takes the layout of the values assigned to it.
// Index tiles (aranges and what is computed from them and scalars alone: masks, offsets, pointer grids)
// adapt to whatever layout uses them: they are recomputed from each register's coordinates instead of
// being moved.

// Whether `n` is a tile computed from aranges, constants and scalars alone. Like the other analyses below
// (lazy, layout_or_unknown, element_at), it visits operands in post-order on an explicit stack (ir/walk.h),
// never by recursion: a chain of ops may be a million deep.
bool Lowering::index_tile(const ir::Node& n) {
  auto tile = [](const ir::Node& x) { return x.type.kind == ir::Type::Kind::Value && x.type.numel() > 1; };
  if (!tile(n)) return false;
  auto it = index_memo_.find(&n);
  if (it != index_memo_.end()) return it->second;
  auto deps = [&](const ir::Node& x) {
    std::vector<const ir::Node*> d;
    if (x.op == Op::Broadcast || x.op == Op::Reshape || elementwise_op(x.op) || x.op == Op::PtrAdd)
      for (const NodeRef& o : x.operands)
        if (tile(*o) && !index_memo_.count(o.get())) d.push_back(o.get());
    return d;
  };
  for (const ir::Node* m : ir::post_order(n, deps)) index_memo_[m] = index_tile_of(*m);
  return index_memo_.at(&n);
}

// index_tile of `n` once its operands' are known.
bool Lowering::index_tile_of(const ir::Node& n) {
  auto scalar_or_index = [&](const NodeRef& o) { return o->type.numel() == 1 || uniform_node(*o) || index_tile(*o); };
  if (n.op == Op::Arange) return true;
  if (n.op == Op::Broadcast || n.op == Op::Reshape) return index_tile(*n.operands[0]);
  if (!elementwise_op(n.op) && n.op != Op::PtrAdd) return false;
  bool any = false, all = true;
  for (const NodeRef& o : n.operands) {
    any = any || index_tile(*o);
    all = all && scalar_or_index(o);
  }
  return any && all;
}

// Index tiles that are never computed in the blocked layout on their own, only where they are used: a
// broadcast of one (which the blocked layout would move through shared memory), and what uses such.
bool Lowering::lazy(const ir::Node& n) {
  if (!index_tile(n)) return false;
  auto it = lazy_memo_.find(&n);
  if (it != lazy_memo_.end()) return it->second;
  auto deps = [&](const ir::Node& x) {
    std::vector<const ir::Node*> d;
    for (const NodeRef& o : x.operands)
      if (index_tile(*o) && !lazy_memo_.count(o.get())) d.push_back(o.get());
    return d;
  };
  for (const ir::Node* m : ir::post_order(n, deps)) {
    bool result = m->op == Op::Broadcast;
    for (const NodeRef& o : m->operands) result = result || (index_tile(*o) && lazy_memo_.at(o.get()));
    lazy_memo_[m] = result;
  }
  return lazy_memo_.at(&n);
}

// Element `coords` of index tile (or scalar) x, computed afresh. A node used several times at the same
// coordinates is computed once (no blow-up on shared subtrees). Each request (a node at some coordinates)
// first asks for the operand elements it reads, on an explicit stack, and is computed once they are known.
Value* Lowering::element_at(const NodeRef& x, const std::vector<Value*>& coords) {
  auto known = [&](const ElementRequest& r) -> Value* {
    if (r.first->type.numel() == 1) return regs_.at(r.first).v[0];
    auto memo = element_memo_.find(r);
    return memo == element_memo_.end() ? nullptr : memo->second;
  };
  struct Frame {
    ElementRequest request;
    std::vector<ElementRequest> reads;
    bool expanded = false;
  };
  std::vector<Frame> stack;
  stack.push_back({{x.get(), coords}, {}, false});
  while (!stack.empty()) {
    Frame& top = stack.back();
    if (known(top.request)) {  // (asked for twice: computed for the first asker)
      stack.pop_back();
      continue;
    }
    if (!top.expanded) {
      top.expanded = true;
      top.reads = element_reads(*top.request.first, top.request.second);
      std::vector<ElementRequest> missing;
      for (const ElementRequest& r : top.reads)  // the last operand on top, computed first (as before)
        if (!known(r)) missing.push_back(r);
      for (ElementRequest& r : missing) stack.push_back({std::move(r), {}, false});  // (top is not used past here)
      continue;
    }
    std::vector<Value*> args;
    for (const ElementRequest& r : top.reads) args.push_back(known(r));
    Value* v = compute_element(*top.request.first, top.request.second, args);
    element_memo_.emplace(std::move(top.request), v);
    stack.pop_back();
  }
  return known({x.get(), coords});
}

// The operand elements compute_element reads for element `coords` of n: elementwise ops read their
// operands at the same coordinates; broadcasts and reshapes their source at coordinates computed here.
std::vector<Lowering::ElementRequest> Lowering::element_reads(const ir::Node& n, const std::vector<Value*>& coords) {
  std::vector<ElementRequest> reads;
  if (n.op == Op::Broadcast) {  // dimensions of size 1 (and missing leading ones) read coordinate 0
    const ir::Node* src = n.operands[0].get();
    const ir::Shape& from = src->type.shape;
    size_t offset = n.type.shape.size() - from.size();
    std::vector<Value*> c;
    for (size_t k = 0; k < from.size(); ++k) c.push_back(from[k] == 1 ? i32c(0) : coords[k + offset]);
    reads.push_back({src, std::move(c)});
  } else if (n.op == Op::Reshape) {
    const ir::Node* src = n.operands[0].get();
    const ir::Shape& from = src->type.shape;
    const ir::Shape& to = n.type.shape;
    std::vector<size_t> from_dims, to_dims;  // the dimensions that are not 1
    for (size_t k = 0; k < from.size(); ++k)
      if (from[k] != 1) from_dims.push_back(k);
    for (size_t k = 0; k < to.size(); ++k)
      if (to[k] != 1) to_dims.push_back(k);
    std::vector<Value*> c(from.size(), i32c(0));
    bool same = from_dims.size() == to_dims.size();
    for (size_t k = 0; same && k < from_dims.size(); ++k) same = from[from_dims[k]] == to[to_dims[k]];
    if (same) {  // expand_dims and the like: the coordinates carry over
      for (size_t k = 0; k < from_dims.size(); ++k) c[from_dims[k]] = coords[to_dims[k]];
    } else {
      std::vector<int64_t> to_st = strides(to), from_st = strides(from);
      Value* flat = linear_index(coords, to_st);
      for (size_t k = 0; k < from.size(); ++k) c[k] = b_.CreateURem(b_.CreateUDiv(flat, i32c(from_st[k])), i32c(from[k]));
    }
    reads.push_back({src, std::move(c)});
  } else if (elementwise_op(n.op) || n.op == Op::PtrAdd) {  // same shape: same coordinates
    for (const NodeRef& o : n.operands) reads.push_back({o.get(), coords});
  }
  return reads;
}

// Element `coords` of n from the elements element_reads asked for (`args`, in that order).
Value* Lowering::compute_element(const ir::Node& n, const std::vector<Value*>& coords, const std::vector<Value*>& args) {
  DType d = n.type.dtype;
  switch (ir::op_category(n.op)) {
    case ir::OpCategory::Unary: return ops_.round(d, ops_.unary(n.op, d, args[0], approximate(n)));
    case ir::OpCategory::Binary:
      return binary_element(n.op, d, args[0], args[1], /*tile=*/true);
    case ir::OpCategory::Compare: return ops_.compare(n.op, n.operands[0]->type.dtype, args[0], args[1]);
    default: break;
  }
  switch (n.op) {
    case Op::Constant: return ops_.constant(d, n.attrs);
    case Op::Arange: return add_const(coords[0], n.attrs.ints[0]);
    case Op::Fma: return ops_.round(d, ops_.fma(args[0], args[1], args[2]));
    case Op::Select: return ops_.round(d, b_.CreateSelect(args[0], args[1], args[2]));
    case Op::Cast: return ops_.round(d, ops_.cast(n.operands[0]->type.dtype, d, args[0]));
    case Op::PtrAdd:
      return pointer_add(ops_.memory_type(DType{d.scalar, false}), args[0], args[1]);
    case Op::Broadcast:
    case Op::Reshape: return args[0];
    default: break;
  }
  throw InternalError(fmt::format("NVPTX lowering: '{}' is not an index tile", ir::op_name(n.op)));
}

// Index tile x in `layout`: each register computed from its own coordinates.
Regs Lowering::materialize(const NodeRef& x, Layout layout) {
  Regs out = empty_regs(layout, x->type.shape);
  if (layout == Layout::Blocked && x->op == Op::PtrAdd)
    out = pointers_in_runs(*x, [&](int64_t r) { return element_at(x, coordinates(layout, x->type.shape, r)); });
  else
    for (int64_t r = 0; r < register_count(layout, x->type.shape); ++r)
      out.v.push_back(element_at(x, coordinates(layout, x->type.shape, r)));
  element_memo_.clear();  // its values belong where they were made
  return out;
}

Layout Lowering::var_layout(const ir::Node* var) const {
  auto it = var_layouts_.find(var);
  return it == var_layouts_.end() ? Layout::Blocked : it->second;
}

Layout Lowering::layout_of(const ir::Node& n) { return layout_or_unknown(n).value_or(Layout::Blocked); }

// While the Vars' layouts are being decided (deciding_vars_), a Var not decided yet is unknown (nullopt),
// and elementwise ops ignore unknown operands: a loop-carried Var (m = maximum(m, max(s, 1))) takes the
// layout of what it is combined with. Once decided, a Var keeps its layout; one never assigned anything
// but the blocked layout (or only itself) is Blocked.
std::optional<Layout> Lowering::layout_or_unknown(const ir::Node& n) {
  auto needs_layout = [&](const ir::Node& x) {
    return x.type.kind == ir::Type::Kind::Value && x.type.numel() > 1 && !index_tile(x);
  };
  if (!needs_layout(n)) return Layout::Blocked;
  auto it = layout_memo_.find(&n);
  if (it != layout_memo_.end()) return it->second;
  // The operands infer_layout asks about, in post-order (ir/walk.h), so that it finds them known.
  auto deps = [&](const ir::Node& x) {
    std::vector<const ir::Node*> d;
    auto need = [&](const ir::Node* o) {
      if (needs_layout(*o) && !layout_memo_.count(o)) d.push_back(o);
    };
    switch (x.op) {
      case Op::Slice:
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin:
      case Op::Reshape:
      case Op::Broadcast: need(x.operands[0].get()); break;
      default:
        if (elementwise_op(x.op))
          for (const NodeRef& o : x.operands)
            if (!uniform_node(*o)) need(o.get());
        break;
    }
    return d;
  };
  for (const ir::Node* m : ir::post_order(n, deps)) layout_memo_[m] = infer_layout(*m);
  return layout_memo_.at(&n);
}

std::optional<Layout> Lowering::infer_layout(const ir::Node& n) {
  const ir::Shape& s = n.type.shape;
  auto rows_of_acc = [&](const ir::Node& x) {  // [rows] or [rows, 1], rows a multiple of 64
    const ir::Shape& xs = x.type.shape;
    return (xs.size() == 1 || (xs.size() == 2 && xs[1] == 1)) && xs[0] % 64 == 0;
  };
  // `want` when operand 0 has layout `from`, else Blocked (unknown stays unknown).
  auto if_operand = [&](Layout from, Layout want, bool shape_ok) -> std::optional<Layout> {
    std::optional<Layout> l = layout_or_unknown(*n.operands[0]);
    if (!l) return std::nullopt;
    return shape_ok && *l == from ? want : Layout::Blocked;
  };
  switch (n.op) {
    case Op::AsyncDot:
    case Op::AsyncDotWait: return Layout::Acc;
    case Op::VarGet: {
      auto v = var_layouts_.find(n.operands[0].get());
      if (v != var_layouts_.end()) return v->second;
      return deciding_vars_ ? std::nullopt : std::optional<Layout>(Layout::Blocked);
    }
    case Op::Slice:
      return if_operand(Layout::Acc, Layout::Acc,
                        n.attrs.ints[0] == 1 && n.attrs.ints[1] % 8 == 0 && n.attrs.ints[2] % 8 == 0);
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin: return if_operand(Layout::Acc, Layout::AccRows, n.axis() == 1 && n.operands[0]->type.shape.size() == 2);
    case Op::Reshape: return if_operand(Layout::AccRows, Layout::AccRows, rows_of_acc(n));
    case Op::Broadcast: {
      const ir::Shape& from = n.operands[0]->type.shape;
      return if_operand(Layout::AccRows, Layout::Acc,
                        s.size() == 2 && from.size() == 2 && from[0] == s[0] && from[1] == 1 && s[1] % 8 == 0);
    }
    default: break;
  }
  if (!elementwise_op(n.op)) return Layout::Blocked;
  std::optional<Layout> shared;
  bool unknown = false;
  for (const NodeRef& o : n.operands) {
    if (uniform_node(*o) || o->type.numel() <= 1 || index_tile(*o)) continue;
    std::optional<Layout> l = layout_or_unknown(*o);
    if (!l) {
      unknown = true;
      continue;
    }
    if (shared && *shared != *l) return Layout::Blocked;
    shared = l;
  }
  if (!shared && unknown) return std::nullopt;
  return shared.value_or(Layout::Blocked);
}

void Lowering::decide_var_layouts() {
  deciding_vars_ = true;
  for (bool changed = true; changed;) {
    changed = false;
    layout_memo_.clear();
    find_var_layouts(f_.body, changed);
  }
  deciding_vars_ = false;
  layout_memo_.clear();
}

void Lowering::find_var_layouts(const ir::Region& r, bool& changed) {
  for (const NodeRef& n : r.body) {
    const ir::Node* value = n->op == Op::VarDecl ? n->operands[0].get() : n->op == Op::VarSet ? n->operands[1].get() : nullptr;
    const ir::Node* var = n->op == Op::VarDecl ? n.get() : value ? n->operands[0].get() : nullptr;
    if (value && !var_layouts_.count(var)) {
      std::optional<Layout> l = layout_or_unknown(*value);
      if (l && *l != Layout::Blocked) {
        var_layouts_[var] = *l;
        changed = true;
      }
    }
    for (const ir::Region& inner : n->regions) find_var_layouts(inner, changed);
  }
}

// The layout node `n` (whose result has layout `result`) needs operand i in; none: it takes any layout
// and converts what it must itself.
std::optional<Layout> Lowering::operand_layout(const ir::Node& n, size_t i, Layout result) {
  switch (n.op) {
    case Op::AsyncDot:
    case Op::AsyncDotWait: return std::nullopt;
    case Op::Dot: return i == 2 ? std::nullopt : std::optional<Layout>(Layout::Blocked);
    case Op::VarDecl: return var_layout(&n);
    case Op::VarSet: return i == 1 ? var_layout(n.operands[0].get()) : Layout::Blocked;
    case Op::LocalStore:
    case Op::LocalStoreRemote:  // an Acc tile is stored a column pair at a time
      return i == 1 && layout_of(*n.operands[1]) == Layout::Acc ? Layout::Acc : Layout::Blocked;
    case Op::Store: return store_from_rows(n) ? Layout::AccRows : Layout::Blocked;
    case Op::Slice: return result;
    case Op::ReduceSum:
    case Op::ReduceMax:
    case Op::ReduceMin: return result == Layout::AccRows ? Layout::Acc : Layout::Blocked;
    case Op::Reshape: return result;
    case Op::Broadcast: return result == Layout::Acc ? Layout::AccRows : Layout::Blocked;
    default: return elementwise_op(n.op) ? result : Layout::Blocked;
  }
}

// Brings this node's operands into the layouts it needs (index tiles computed there, other values moved
// through shared memory), as regs() then gives them; returns the node's own layout.
Layout Lowering::prepare_layouts(const NodeRef& n) {
  converted_.clear();
  Layout result = layout_of(*n);
  const auto& o = n->operands;
  for (size_t i = 0; i < o.size(); ++i) {
    const NodeRef& x = o[i];
    if (converted_.count(x.get())) continue;
    std::optional<Layout> want = operand_layout(*n, i, result);
    if (index_tile(*x) && (lazy(*x) || (want && *want != Layout::Blocked))) {
      converted_[x.get()] = materialize(x, want.value_or(Layout::Blocked));
      continue;
    }
    auto it = regs_.find(x.get());
    if (!want || it == regs_.end() || it->second.uniform || it->second.layout == *want) continue;
    converted_[x.get()] = relayout(it->second, x->type.dtype, x->type.shape, *want, n->loc);
  }
  return result;
}

// `x`'s registers in the layout of Var `var`.
Regs Lowering::in_var_layout(const NodeRef& x, const ir::Node* var, SourceLoc loc) {
  Layout want = var_layout(var);
  const Regs& r = regs(x);
  if (r.uniform) return splat_in(r.v[0], want, x->type.shape);
  if (r.layout == want) return r;
  return relayout(r, x->type.dtype, x->type.shape, want, loc);
}

void Lowering::broadcast(const NodeRef& n) {
  const NodeRef& src = n->operands[0];
  int64_t n_src = src->type.numel();
  if (n_src == 1) {
    regs_[n.get()] = splat(regs(src).v[0], n->type.numel());
    return;
  }
  if (regs(src).in(Layout::AccRows) && layout_of(*n) == Layout::Acc) {  // along the rows: no data moves
    const Regs& rows = regs(src);
    Regs out = empty_regs(Layout::Acc, n->type.shape);
    int64_t per_block = n->type.shape[1] / 2;
    for (int64_t r = 0; r < register_count(Layout::Acc, n->type.shape); ++r)
      out.v.push_back(rows.v[static_cast<size_t>(r / per_block * 2 + (r % per_block % 4 >= 2))]);
    regs_[n.get()] = std::move(out);
    return;
  }
  const ir::Shape& to = n->type.shape;
  const ir::Shape& from = src->type.shape;
  std::vector<int64_t> from_st = strides(from);
  size_t offset = to.size() - from.size();
  regs_[n.get()] = exchange(regs(src), n->type.dtype, n_src, to, [&](const std::vector<Value*>& c) {
    std::vector<Value*> from_c;  // the source's coordinates: the destination's last ones, 0 where it has size 1
    for (size_t k = offset; k < to.size(); ++k) from_c.push_back(from[k - offset] == 1 ? i32c(0) : c[k]);
    return linear_index(from_c, from_st);
  }, n->loc);
}

// A static part of a tile. Columns of a wgmma-layout tile in steps of 8 are a subset of its registers;
// anything else goes through shared memory.
void Lowering::slice(const NodeRef& n) {
  const NodeRef& src = n->operands[0];
  int64_t axis = n->attrs.ints[0], start = n->attrs.ints[1], size = n->attrs.ints[2];
  const Regs& r = regs(src);
  if (r.in(Layout::Acc) && axis == 1 && start % 8 == 0 && size % 8 == 0) {
    Regs out = empty_regs(Layout::Acc, n->type.shape);
    for (int64_t block = 0; block < r.rows / 64; ++block)
      for (int64_t k = 0; k < size / 2; ++k) out.v.push_back(r.v[block * r.cols / 2 + start / 2 + k]);
    regs_[n.get()] = std::move(out);
    return;
  }
  if (r.uniform) {
    regs_[n.get()] = splat(r.v[0], n->type.numel());
    return;
  }
  Regs blocked = r.layout != Layout::Blocked ? relayout(r, src->type.dtype, src->type.shape, Layout::Blocked, n->loc) : r;
  std::vector<int64_t> src_st = strides(src->type.shape);
  regs_[n.get()] = exchange(blocked, n->type.dtype, src->type.numel(), n->type.shape, [&](const std::vector<Value*>& c) {
    std::vector<Value*> from_c = c;
    from_c[static_cast<size_t>(axis)] = index_add(c[static_cast<size_t>(axis)], i32c(start), false);
    return linear_index(from_c, src_st);
  }, n->loc);
}

void Lowering::permute(const NodeRef& n) {
  const NodeRef& src = n->operands[0];
  std::vector<int64_t> src_st = strides(src->type.shape), moved_st;  // the source's stride of each destination axis
  for (size_t k = 0; k < n->type.shape.size(); ++k) moved_st.push_back(src_st[static_cast<size_t>(n->attrs.ints[k])]);
  regs_[n.get()] = exchange(regs(src), n->type.dtype, src->type.numel(), n->type.shape,
                            [&](const std::vector<Value*>& c) { return linear_index(c, moved_st); }, n->loc);
}

}  // namespace weft::codegen::nvptx::detail
