// NVPTX lowering: shared buffers and their views (swizzled stages, accumulator matrices stored and read in
// place, gathers and scatters) and the copies into them (bulk copies, remote stores, async_load).
#include "codegen/nvptx/lowering.h"

#include <cmath>

#include "codegen/nvptx/async_copy.h"
#include "passes/shared_layouts.h"

namespace weft::codegen::nvptx::detail {

// The 32-bit shared-state-space address of byte `offset` of the block's shared memory.
Value* Lowering::shared_address(Value* offset) {
  return b_.CreateAdd(b_.CreatePtrToInt(smem_, b_.getInt32Ty()), offset);
}

// Byte `byte` (i32) of a stage, where the buffer's swizzle puts it (passes/shared_layouts.h).
Value* Lowering::swizzle(Value* byte, int swizzle_bytes) {
  if (!swizzle_bytes) return byte;
  Value* row_bits = b_.CreateAnd(b_.CreateLShr(byte, i32c(7)), i32c(swizzle_bytes / 16 - 1));
  return b_.CreateXor(byte, b_.CreateShl(row_bits, i32c(4)));
}

// The shared-memory address of element `flat` (i32, row-major) of a view of a buffer stage, where the
// buffer's layout puts it: transposed views, column panels and the swizzle (passes/shared_layouts.h).
// `base`: the block's shared memory (or, for a remote store, the same memory in another block).
Value* Lowering::view_element(const NodeRef& view, DType d, Value* flat, Value* base) {
  const passes::SharedAllocation& alloc = allocations_.of(passes::root_allocation(view.get()));
  bool transposed = view->op == Op::LocalTrans;
  // Panels: a view's columns are stored in [rows, P] blocks.
  const ir::Shape& stored = transposed ? view->operands[0]->type.shape : view->type.shape;
  int64_t panel = stored.size() == 2 && alloc.panel && alloc.panel < stored[1] ? alloc.panel : 0;
  if (transposed) {  // the view is [C, R] of storage [R, C]
    int64_t R = view->type.shape[1], C = view->type.shape[0];
    flat = b_.CreateAdd(b_.CreateMul(b_.CreateURem(flat, i32c(R)), i32c(C)), b_.CreateUDiv(flat, i32c(R)));
  }
  if (panel) {  // (r, c) -> (c / P) * R * P + r * P + c % P
    Value* r = b_.CreateUDiv(flat, i32c(stored[1]));
    Value* c = b_.CreateURem(flat, i32c(stored[1]));
    flat = b_.CreateAdd(b_.CreateAdd(b_.CreateMul(b_.CreateUDiv(c, i32c(panel)), i32c(stored[0] * panel)),
                                     b_.CreateMul(r, i32c(panel))),
                        b_.CreateURem(c, i32c(panel)));
  }
  Value* byte = swizzle(index_mul(flat, d.bytes()), alloc.swizzle);
  return b_.CreateInBoundsGEP(b_.getInt8Ty(), base ? base : smem_,
                              b_.CreateZExt(index_add(regs(view).v[0], byte, false), b_.getInt64Ty()));
}

// Where register r (the first of a column pair) of an Acc tile stored to `view` goes, computed from its row and
// column instead of its flat index (view_element): no division by the row length or the panel width, no
// per-register swizzle arithmetic. Row and column are each a per-thread part plus a constant (acc_row,
// acc_col: row_base = 16 warp + lane / 4 in [0, 64), col_base = 2 (lane % 4) in {0, 2, 4, 6}); panels are
// multiples of 8 columns, so a register's panel is static and its byte in the stage is tb + kb before the
// swizzle, tb = row_base * row_bytes + col_base * elem_bytes per thread, kb a constant. Swizzled, that is
// ((tb | x) ^ kx) + ka (tb ^ x for stmatrix, whose 16-byte column offsets share bits with x),
// x = ((tb >> 7) & mask) << 4 per thread, kb split into the swizzle's bits (kx) and the rest (ka, a constant
// offset of the store's address), or failing that into the bits tb may have (ka) and those it never has (kx) —
// checked here against passes::paneled_index and passes::swizzled for every (row_base, col_base) a thread can
// have. So a column group costs one xor and one 64-bit add, its pairs a store each ([%rd + ka]); the
// flat-index route left ~15 instructions per register for instcombine to untangle, the largest part of its
// work on the GEMM and attention epilogues.
// `how` = Matrices2 / Matrices4: the addresses stmatrix takes instead, for the n8 column group of register r
// (r its first) and, for Matrices4, the next: lane l gives row l % 8 of matrix l / 8, matrices in the order
// (rows 0-7, group i), (rows 8-15, i), (rows 0-7, i + 1), (rows 8-15, i + 1) of the warp's 16 rows, so its
// row_base = 16 warp + lane % 16 and col_base = 8 (lane / 16) (lanes 16-31 unused by Matrices2); each
// address must also be 16-byte aligned, which the same check covers (rows of 8 elements stay whole).
// Null (view_element then) where the formula is not exact or the view is not the tile's own [rows, cols].
std::optional<Lowering::AccPairOffset> Lowering::acc_pair_offset(const NodeRef& view, DType d, const Regs& value, int64_t r,
                                                                 AccStore how) {
  const passes::SharedAllocation& alloc = allocations_.of(passes::root_allocation(view.get()));
  const ir::Shape& shape = view->type.shape;
  if (view->op == Op::LocalTrans || shape.size() != 2 || shape[0] != value.rows || shape[1] != value.cols || threads_ != 128)
    return std::nullopt;
  int64_t R = shape[0], C = shape[1], eb = d.bytes();
  int64_t panel = alloc.panel && alloc.panel < C ? alloc.panel : 0;
  if (panel % 8) return std::nullopt;
  int64_t per_block = value.cols / 2, block = r / per_block, q = r % per_block, i = q / 4, e = q % 4;
  int64_t row_c = block * 64 + (e >= 2 ? 8 : 0), col_c = 8 * i + (e & 1);
  int64_t row_bytes = (panel ? panel : C) * eb;
  const bool matrices = how != AccStore::Pairs;
  if (matrices && (e != 0 || eb != 2 || row_bytes % 16)) return std::nullopt;
  int64_t kb = passes::paneled_index(row_c, col_c, R, C, panel) * eb;
  int sw = alloc.swizzle;
  int64_t mask = sw ? sw / 16 - 1 : 0;
  auto tb_of = [&](int64_t row_base, int64_t col_base) { return row_base * row_bytes + col_base * eb; };
  auto x_of = [&](int64_t tb) { return ((tb >> 7) & mask) << 4; };
  // The thread parts (row_base, col_base) to check: every one a lane can have, those lanes whose address
  // the instruction reads.
  std::vector<int64_t> col_bases = how == AccStore::Pairs ? std::vector<int64_t>{0, 2, 4, 6}
                                   : how == AccStore::Matrices4 ? std::vector<int64_t>{0, 8}
                                                                : std::vector<int64_t>{0};
  int64_t may = 0;       // the bits tb may have
  bool overlap = false;  // some tb has bits of its x (a 16-byte column offset, stmatrix): xor them, else or
  for (int64_t rb = 0; rb < 64; ++rb)
    for (int64_t cb : col_bases) {
      int64_t tb = tb_of(rb, cb);
      may |= tb;
      overlap |= (tb & x_of(tb)) != 0;
    }
  if (overlap && !matrices) return std::nullopt;  // (pairs of 4-byte elements: kept on view_element's route)
  auto exact = [&](int64_t ka, int64_t kx) {
    for (int64_t rb = 0; rb < 64; ++rb)
      for (int64_t cb : col_bases) {
        int64_t tb = tb_of(rb, cb), x = x_of(tb);
        int64_t want = passes::swizzled(passes::paneled_index(rb + row_c, cb + col_c, R, C, panel) * eb, sw);
        if (((tb ^ x) ^ kx) + ka != want || (matrices && want % 16)) return false;
      }
    return true;
  };
  // The splits of kb tried, best first: only the swizzle's bits xored (the rest a constant offset of the
  // store's address), the bits tb may have added, all of kb added.
  int64_t x_bits = mask << 4, key = row_bytes * 16 + eb;
  AccPairOffset out;
  bool found = false;
  for (int64_t kx : {kb & x_bits, kb & ~may, int64_t(0)})
    if (!found && exact(kb & ~kx, kx)) {
      out = {kb & ~kx, kx, key};
      found = true;
    }
  if (!found) return std::nullopt;
  // From tid_in_region, not tid_: LICM would otherwise hoist every address of the tile (a register each,
  // 16-64 per epilogue) out of a persistent kernel's tile loop (ptxas then spilled in the D 64 attention
  // kernel); recomputed per tile they cost a few instructions there.
  out.tx = thread_value(kAccStoreBase, (out.key * 256 + mask) * 2 + matrices, [&] {
    Value* t = tid_in_region();
    Value* lane = b_.CreateAnd(t, i32c(31)), *warp = b_.CreateLShr(t, i32c(5));
    Value* row_base = matrices ? b_.CreateAdd(b_.CreateShl(warp, i32c(4)), b_.CreateAnd(lane, i32c(15)))
                               : b_.CreateAdd(b_.CreateShl(warp, i32c(4)), b_.CreateLShr(lane, i32c(2)));
    Value* col_base = matrices ? b_.CreateShl(b_.CreateLShr(lane, i32c(4)), i32c(3))
                               : b_.CreateShl(b_.CreateAnd(lane, i32c(3)), i32c(1));
    Value* tb = b_.CreateAdd(b_.CreateMul(row_base, i32c(row_bytes)), b_.CreateMul(col_base, i32c(eb)));
    if (!sw) return tb;
    Value* x = b_.CreateShl(b_.CreateAnd(b_.CreateLShr(tb, i32c(7)), i32c(mask)), i32c(4));
    return overlap ? b_.CreateXor(tb, x) : b_.CreateOr(tb, x, "", /*IsDisjoint=*/true);
  });
  out.disjoint = (out.kx & x_bits) == 0;
  return out;
}

// An AccPairOffset's byte in its stage before ka: tx ^ kx (an or where they share no bit).
Value* Lowering::acc_in_stage(const AccPairOffset& at) {
  if (at.kx == 0) return at.tx;
  return at.disjoint ? b_.CreateOr(at.tx, i32c(at.kx), "", /*IsDisjoint=*/true) : b_.CreateXor(at.tx, i32c(at.kx));
}

// An Acc tile of 16-bit elements into `view` with stmatrix: per 64-row block, one .x4 per two n8 column groups
// (.x2 for a last odd one), 16 bytes per lane each where st.shared would take four 4-byte stores, the
// elements converted two at a time (pack_pair). False, with nothing emitted, where some address is not
// exact (acc_pair_offset): the caller then stores pairs.
bool Lowering::store_acc_matrices(const NodeRef& view, DType d, const Regs& value) {
  if (d.bytes() != 2 || value.cols % 8 || value.rows % 64) return false;
  // stmatrix's sources are quads of consecutive registers, which leaves ptxas less freedom: a task held to few
  // registers keeps the stores per pair (attention D 64 with four consumers of 112 registers spilled 4 bytes
  // with stmatrix, none without).
  if (task_registers_ && task_registers_ < kStmatrixMinRegisters) return false;
  struct Matrices {
    AccPairOffset at;
    int64_t first, groups;  // the first register, n8 column groups (1 or 2)
  };
  std::vector<Matrices> stores;
  const int64_t per_block = value.cols / 2, groups = value.cols / 8;
  for (int64_t block = 0; block < value.rows / 64; ++block)
    for (int64_t g = 0; g < groups; g += 2) {
      int64_t count = std::min<int64_t>(2, groups - g), first = block * per_block + 4 * g;
      std::optional<AccPairOffset> at =
          acc_pair_offset(view, d, value, first, count == 2 ? AccStore::Matrices4 : AccStore::Matrices2);
      if (!at) return false;
      stores.push_back({*at, first, count});
    }
  Value* stage = shared_address(regs(view).v[0]);
  for (const Matrices& m : stores) {
    std::vector<Value*> words;  // (rows 0-7, group g), (rows 8-15, g), then the same of g + 1
    for (int64_t k = 0; k < 2 * m.groups; ++k)
      words.push_back(pack_pair(d, value.v[static_cast<size_t>(m.first + 2 * k)], value.v[static_cast<size_t>(m.first + 2 * k + 1)]));
    ptx_.store_matrices(b_.CreateAdd(stage, acc_in_stage(m.at)), m.at.ka, words);
  }
  return true;
}

// Loads (or stores) a tile from (to) a stage of a shared buffer. In the blocked layout each chunk of V
// consecutive elements is one aligned vector access of at most 16 bytes per piece (buffers are 1024-byte
// aligned, a chunk starts at a multiple of V, and a swizzle moves whole 16-byte units); transposed views
// and wgmma-layout values go element by element.
// `remote_rank`: store into the same stage of that block of the cluster (st.shared::cluster).
void Lowering::shared_tile(const NodeRef& view, const NodeRef& n, DType d, int64_t numel, const Regs* value,
                           Value* remote_rank) {
  Value* base = remote_rank ? ptx_.map_shared_pointer_to_rank(smem_, remote_rank) : smem_;
  int swz = allocations_.of(passes::root_allocation(view.get())).swizzle;
  bool transposed = view->op == Op::LocalTrans;
  llvm::Type* mt = ops_.memory_type(d);
  int64_t eb = d.bytes();
  // A wgmma-layout value holds pairs of neighbouring columns (registers 2i, 2i + 1): one access each.
  bool pairs = value && value->in(Layout::Acc) && !transposed;
  int64_t width = transposed ? 1 : pairs ? 2 : vector_width(numel), per = std::min(width, piece_elems(d));
  auto* piece = llvm::FixedVectorType::get(mt, static_cast<unsigned>(per));
  llvm::Align align(static_cast<uint64_t>(per * eb));
  Regs out;
  if (value) sync_group();  // earlier reads of this group are done before anything is overwritten
  // 16-bit elements in the wgmma layout: stmatrix where every address is exact, else a store per pair.
  bool stored = pairs && !remote_rank && store_acc_matrices(view, d, *value);
  Value* stage = nullptr;  // base plus the stage's offset, for acc_pair_offset's addresses
  for (int64_t first = 0; !stored && first < per_thread(numel); first += width) {
    for (int64_t j = 0; j < width; j += per) {
      std::optional<AccPairOffset> pair = pairs ? acc_pair_offset(view, d, *value, first + j) : std::nullopt;
      Value* at;
      if (pair) {
        if (!stage) stage = b_.CreateInBoundsGEP(b_.getInt8Ty(), base, b_.CreateZExt(regs(view).v[0], b_.getInt64Ty()));
        Value* in_stage = acc_in_stage(*pair);
        // ka last: a constant offset of the address (st.shared [%rd + ka]), shared by the pairs of one in_stage.
        at = b_.CreateConstInBoundsGEP1_64(
            b_.getInt8Ty(), b_.CreateInBoundsGEP(b_.getInt8Ty(), stage, b_.CreateZExt(in_stage, b_.getInt64Ty())), pair->ka);
      } else {
        at = view_element(view, d, value ? index_of(*value, numel, first + j) : flat_index(numel, first + j), base);
      }
      if (value) {
        Value* vec = llvm::PoisonValue::get(piece);
        for (int64_t e = 0; e < per; ++e)
          vec = b_.CreateInsertElement(vec, ops_.to_memory(d, value->v[first + j + e]), static_cast<uint64_t>(e));
        b_.CreateAlignedStore(vec, at, align);
      } else {
        Value* vec = b_.CreateAlignedLoad(piece, at, align);
        for (int64_t e = 0; e < per; ++e)
          out.v.push_back(ops_.to_compute(d, b_.CreateExtractElement(vec, static_cast<uint64_t>(e))));
      }
    }
  }
  if (!value) {
    regs_[n.get()] = std::move(out);
    return;
  }
  // A swizzled buffer is read by TMA or wgmma (the async proxy): each thread fences its own writes
  // before the group syncs.
  if (swz && remote_rank)
    ptx_.fence_proxy_async_shared_cluster();
  else if (swz)
    ptx_.fence_proxy_async_shared();
  sync_group();  // the whole tile is written before any thread of the group reads it (or arrives)
}

// local_gather (view, indices) and local_scatter (view, values, indices), blocked layout: each thread reads
// (writes) the view's element of each index it holds, its own coordinates with the `axis` one replaced by
// the index (view_element then applies transposition, panels and the swizzle). An index is taken modulo the
// axis's size (a power of two: its low bits), so a bad one (the CPU backend reports it) never reaches another
// buffer or a barrier. A scatter waits, as local_store does, for the group's earlier reads before it writes,
// and syncs the group after.
void Lowering::local_gather_scatter(const NodeRef& n) {
  const bool scatter = n->op == Op::LocalScatter;
  const auto& o = n->operands;
  const NodeRef& view = o[0];
  const NodeRef& indices = o[scatter ? 2 : 1];
  const ir::Shape& ishape = indices->type.shape;
  const ir::Shape& vshape = view->type.shape;
  const int64_t axis = n->attrs.ints[0], count = indices->type.numel();
  const DType d = view->type.dtype;
  std::vector<int64_t> vst = strides(vshape);
  if (scatter) sync_group();
  Regs out;
  for (int64_t r = 0; r < per_thread(count); ++r) {
    std::vector<Value*> c = coordinates(Layout::Blocked, ishape, r);
    c[static_cast<size_t>(axis)] = b_.CreateAnd(reg_at(indices, r), i32c(vshape[static_cast<size_t>(axis)] - 1));
    Value* address = view_element(view, d, linear_index(c, vst));
    if (scatter)
      b_.CreateStore(ops_.to_memory(d, reg_at(o[1], r)), address);
    else
      out.v.push_back(ops_.to_compute(d, b_.CreateLoad(ops_.memory_type(d), address)));
  }
  if (!scatter) {
    out.uniform = count == 1;
    regs_[n.get()] = std::move(out);
    return;
  }
  if (allocations_.of(passes::root_allocation(view.get())).swizzle) ptx_.fence_proxy_async_shared();
  sync_group();
}

// async_load_bulk (pointer, view, barrier) and async_store_bulk (pointer, view): one thread's cp.async.bulk,
// the load completing on the barrier as a TMA load does, the store (after every thread's proxy fence and a
// sync of the group, as a TMA store) in a bulk group. cp.async.bulk needs a 16-byte aligned global address:
// where the access patterns do not prove it (a pointer argument seen 16-byte aligned, offsets of 16-byte
// multiples), the thread tests the address and copies a misaligned one itself, element by element — the
// load then reports its bytes on the barrier with complete_tx, after fences that make them visible to the
// waiting threads and to the async proxy (wgmma, TMA) — so a misaligned pointer is slower, never a fault.
void Lowering::bulk_copy(const NodeRef& n) {
  const bool load = n->op == Op::AsyncLoadBulk;
  const auto& o = n->operands;
  Value* global = regs(o[0]).v[0];
  Value* offset = regs(o[1]).v[0];
  Value* smem = shared_address(offset);
  const DType d = o[1]->type.dtype;
  const int64_t bytes = o[1]->type.numel() * d.bytes();
  const bool aligned = patterns_.of(o[0].get()).divisor >= 16;
  Value* bar = load ? shared_address(regs(o[2]).v[0]) : nullptr;
  auto bulk = [&] {
    if (load) {
      ptx_.bulk_load(smem, global, i32c(bytes), bar);
    } else {
      ptx_.bulk_store(global, smem, i32c(bytes));
      ptx_.bulk_commit_group();
    }
  };
  auto by_thread = [&] {
    copy_bytes_one_thread(global, offset, bytes, d, load);
    if (!load) return;
    ptx_.fence_proxy_async_shared();
    ptx_.fence_acq_rel("cta");
    ptx_.mbarrier_complete_tx(bar, i32c(bytes));
  };
  auto issue = [&]() -> Value* {
    if (aligned) {
      bulk();
      return nullptr;
    }
    Value* low = b_.CreateAnd(b_.CreatePtrToInt(global, b_.getInt64Ty()), b_.getInt64(15));
    branch_values(b_.CreateICmpEQ(low, b_.getInt64(0)), 0, [&](std::vector<Value*>&) { bulk(); },
                  [&](std::vector<Value*>&) { by_thread(); });
    return nullptr;
  };
  if (load) {
    guarded(one_thread_of_group(), issue, nullptr);
    return;
  }
  ptx_.fence_proxy_async_shared();  // this thread's writes to the view, visible to the copy engine
  once_per_group([&] { issue(); });
}

// async_remote_shmem_store (view, value, barrier, rank), blocked layout: each element once, by the thread that
// holds it (in a tile smaller than the group, threads t < count: a copy stored twice would complete its bytes
// twice), st.async to its place in the view (view_element: transposition, panels, swizzle) mapped to block
// `rank`, completing on that block's barrier. No sync: the values come from registers, and st.async orders
// nothing before it — the receiver's wait on the barrier is what makes the elements visible there.
void Lowering::remote_store_async(const NodeRef& n) {
  const auto& o = n->operands;
  const NodeRef& view = o[0];
  const DType d = view->type.dtype;
  const int64_t count = o[1]->type.numel();
  Value* rank = regs(o[3]).v[0];
  Value* bar = ptx_.map_shared_to_rank(shared_address(regs(o[2]).v[0]), rank);
  llvm::Type* bits = b_.getIntNTy(static_cast<unsigned>(8 * d.bytes()));
  auto store_all = [&]() -> Value* {
    for (int64_t r = 0; r < per_thread(count); ++r) {
      Value* at = view_element(view, d, flat_index(count, r));
      Value* there = ptx_.map_shared_to_rank(b_.CreatePtrToInt(at, b_.getInt32Ty()), rank);
      ptx_.st_async(there, b_.CreateBitCast(ops_.to_memory(d, reg_at(o[1], r)), bits), bar);
    }
    return nullptr;
  };
  if (count < threads_)
    guarded(b_.CreateICmpULT(tid_, i32c(count)), store_all, nullptr);
  else
    store_all();
}

// `bytes` between global memory at `global` and the shared memory at `shared_offset`, one element of `d` at a
// time by this thread (ld.global + st.shared, or the reverse), in a loop.
void Lowering::copy_bytes_one_thread(Value* global, Value* shared_offset, int64_t bytes, DType d, bool to_shared) {
  llvm::Type* t = b_.getIntNTy(static_cast<unsigned>(8 * d.bytes()));
  llvm::Align align(static_cast<uint64_t>(d.bytes()));
  Value* shared = b_.CreateInBoundsGEP(b_.getInt8Ty(), smem_, b_.CreateZExt(shared_offset, b_.getInt64Ty()));
  llvm::BasicBlock* before = b_.GetInsertBlock();
  auto* body = llvm::BasicBlock::Create(c_, "copy.element", fn_);
  auto* done = llvm::BasicBlock::Create(c_, "copy.done", fn_);
  b_.CreateBr(body);
  b_.SetInsertPoint(body);
  llvm::PHINode* i = b_.CreatePHI(b_.getInt64Ty(), 2);
  i->addIncoming(b_.getInt64(0), before);
  Value* from = b_.CreateGEP(t, to_shared ? global : shared, i);
  Value* to = b_.CreateGEP(t, to_shared ? shared : global, i);
  b_.CreateAlignedStore(b_.CreateAlignedLoad(t, from, align), to, align);
  Value* next = b_.CreateAdd(i, b_.getInt64(1));
  i->addIncoming(next, b_.GetInsertBlock());
  b_.CreateCondBr(b_.CreateICmpULT(next, b_.getInt64(bytes / d.bytes())), body, done);
  b_.SetInsertPoint(done);
}

// async_load (ptrs, view[, mask[, other]]): each thread copies its own chunks of the blocked layout
// (async_copy.cpp), after the group's earlier reads of shared memory, as local_store does.
void Lowering::async_load(const NodeRef& n) {
  const auto& o = n->operands;
  DType d = o[1]->type.dtype;
  int64_t numel = o[0]->type.numel(), width = vector_width(numel);
  bool proven = width > 1 && chunks_proven(o[0], d, width);
  // A fill of constant +0 is cp.async's own zero-fill (-0.0 is not: its sign bit is set).
  auto positive_zero = [](const ir::Node& x) {
    const ir::Node& c = x.op == Op::Broadcast ? *x.operands[0] : x;
    return c.op == Op::Constant && c.attrs.number == 0 && !std::signbit(c.attrs.number);
  };
  bool zero_fill = o.size() < 4 || positive_zero(*o[3]);
  // A destination inside the 16-byte unit of the one before it is that address plus a constant: the buffer
  // layouts keep 16-byte units whole (swizzles move whole units, panels are multiples of them), as the whole
  // pieces' copies already assume; transposed views go element by element.
  int64_t panel = allocations_.of(passes::root_allocation(o[1].get())).panel;
  bool units_whole = o[1]->op != Op::LocalTrans && panel * d.bytes() % kMaxAccessBytes == 0;
  int64_t unit = piece_elems(d);
  sync_group();
  for (int64_t first = 0; first < per_thread(numel); first += width) {
    Chunk c = chunk_of(o, 2, first, width);
    AsyncCopyChunk copy{d.bytes(), ops_.memory_type(d), c.ptrs, {}, c.masks, c.one_mask, c.consecutive, proven, {}};
    copy.evict = n->attrs.ints.empty() ? 0 : static_cast<int>(n->attrs.ints[0]);  // async_load(..., Evict)
    for (int64_t j = 0; j < width; ++j) {
      if (units_whole && j % unit != 0)
        copy.dst.push_back(b_.CreateConstInBoundsGEP1_64(ops_.memory_type(d), copy.dst[j - j % unit], j % unit));
      else
        copy.dst.push_back(view_element(o[1], d, flat_index(numel, first + j)));
      if (!zero_fill) copy.fill.push_back(ops_.to_memory(d, regs(o[3]).v[first + j]));
    }
    emit_async_copy(b_, ptx_, copy);
  }
}

}  // namespace weft::codegen::nvptx::detail
