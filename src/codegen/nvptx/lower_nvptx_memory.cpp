// NVPTX lowering: shared memory (the group's scratch, shared buffers and their views) and global memory
// (loads and stores in 16-byte pieces, async_load).
#include "codegen/nvptx/lowering.h"

#include <fmt/format.h>

#include <cmath>

#include "codegen/nvptx/async_copy.h"
#include "ir/atomics.h"
#include "passes/shared_layouts.h"

namespace weft::codegen::nvptx::detail {

llvm::Type* Lowering::shared_type(DType d) {  // pointers travel as integers
  return d.pointer ? b_.getInt64Ty() : ops_.compute_type(d)->isIntegerTy(1) ? b_.getInt8Ty() : ops_.compute_type(d);
}

Value* Lowering::to_shared(DType d, Value* v) {
  if (d.pointer) return b_.CreatePtrToInt(v, b_.getInt64Ty());
  return v->getType()->isIntegerTy(1) ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
}

Value* Lowering::from_shared(DType d, Value* v) {
  if (d.pointer) return b_.CreateIntToPtr(v, ops_.compute_type(d));
  return d.is_bool() ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
}

// Address of element `index` (i32) of an array of `t` starting `byte_offset` into shared memory.
// The group's scratch shared memory.
Value* Lowering::scratch_base() {
  return b_.CreateInBoundsGEP(b_.getInt8Ty(), smem_, b_.CreateZExt(scratch_, b_.getInt64Ty()));
}

// Address of element `index` (i32) of an array of `t` starting `byte_offset` into the group's scratch.
Value* Lowering::shared_at(llvm::Type* t, int64_t byte_offset, Value* index) {
  return shared_element(t, b_.CreateAdd(scratch_, i32c(byte_offset)), index);
}

// Address of element `index` of an array of `t` at `byte_offset` (i32) of the block's shared memory.
Value* Lowering::shared_element(llvm::Type* t, Value* byte_offset, Value* index) {
  Value* base = b_.CreateInBoundsGEP(b_.getInt8Ty(), smem_, b_.CreateZExt(byte_offset, b_.getInt64Ty()));
  return b_.CreateInBoundsGEP(t, base, b_.CreateZExt(index, b_.getInt64Ty()));
}

// Where register k of a tile of n elements in the layout of `r` goes in an array of `t` at `byte_offset` into
// the group's scratch: the thread's own first element plus a constant (index_parts), which the code generator
// folds into each access ([%rd+1024]); from the index of each register, zero-extended, LLVM could not see
// that without straight-line strength reduction.
Value* Lowering::scratch_register(llvm::Type* t, int64_t byte_offset, const Regs& r, int64_t n, int64_t k) {
  std::optional<std::pair<Value*, int64_t>> parts = index_parts(r, n, k);
  if (!parts) return shared_at(t, byte_offset, index_of(r, n, k));
  return b_.CreateConstInBoundsGEP1_64(t, shared_at(t, byte_offset, parts->first), parts->second);
}

int64_t Lowering::reserve_shared(int64_t bytes, SourceLoc loc) {
  scratch_bytes_ = std::max(scratch_bytes_, bytes);
  if (scratch_start_ + scratch_bytes_ > kMaxSharedBytes)
    throw Error(fmt::format("this operation needs {} bytes of shared memory to exchange data between threads, and "
                            "the kernel's allocations {}: more than the {} a block can have; use smaller tiles",
                            bytes, allocations_.bytes, kMaxSharedBytes),
                loc);
  return bytes;
}

// Shared memory from offset 0 for an operation that writes it first: threads still reading the partials
// of the last whole-block reduction (which ends without a barrier) must be done.
void Lowering::claim_shared(int64_t bytes, SourceLoc loc) {
  settle_shared();
  reserve_shared(bytes, loc);
}

void Lowering::settle_shared() {
  if (!partials_unsettled_) return;
  sync_group();
  partials_unsettled_ = false;
}

// Writes a tile's elements to shared memory (as `t`) starting at `byte_offset`.
void Lowering::stage(const Regs& src, DType d, int64_t n, int64_t byte_offset) {
  llvm::Type* t = shared_type(d);
  Regs blocked;  // (src may be uniform: its registers are still stored where the blocked layout puts them)
  for (size_t r = 0; r < src.v.size(); ++r)
    b_.CreateStore(to_shared(d, src.v[r]), scratch_register(t, byte_offset, blocked, n, static_cast<int64_t>(r)));
}

// Runs `body` only where `cond` holds; returns the phi of its value and `otherwise`.
Value* Lowering::guarded(Value* cond, const std::function<Value*()>& body, Value* otherwise) {
  auto* then_block = llvm::BasicBlock::Create(c_, "guarded", fn_);
  auto* join = llvm::BasicBlock::Create(c_, "guarded.end", fn_);
  llvm::BasicBlock* before = b_.GetInsertBlock();
  b_.CreateCondBr(cond, then_block, join);
  b_.SetInsertPoint(then_block);
  Value* v = body();
  llvm::BasicBlock* then_end = b_.GetInsertBlock();
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  if (!otherwise) return nullptr;
  llvm::PHINode* phi = b_.CreatePHI(otherwise->getType(), 2);
  phi->addIncoming(v, then_end);
  phi->addIncoming(otherwise, before);
  return phi;
}

int64_t Lowering::piece_elems(DType d) { return std::max<int64_t>(1, kMaxAccessBytes / d.bytes()); }

bool Lowering::chunks_proven(const NodeRef& ptrs, DType d, int64_t width) {
  passes::AccessPattern p = patterns_.of(ptrs.get());
  int64_t align = std::min(width, piece_elems(d)) * d.bytes();
  return p.contiguity >= width && p.divisor % align == 0;
}

// Whether each chunk's pointers are proven consecutive (their alignment perhaps not: a row of unknown length).
bool Lowering::chunks_consecutive(const NodeRef& ptrs, int64_t width) {
  return width > 1 && patterns_.of(ptrs.get()).contiguity >= width;
}

Value* Lowering::whole_chunk_ok(const Chunk& c, DType d, bool proven) {
  Value* ok = b_.getTrue();
  for (Value* m : c.masks) {
    ok = b_.CreateAnd(ok, m);
    if (c.one_mask) break;
  }
  if (proven) return ok;
  int64_t width = static_cast<int64_t>(c.ptrs.size());
  int64_t align = std::min(width, piece_elems(d)) * d.bytes();
  Value* first = b_.CreatePtrToInt(c.ptrs[0], b_.getInt64Ty());
  ok = b_.CreateAnd(ok, b_.CreateICmpEQ(b_.CreateAnd(first, b_.getInt64(align - 1)), b_.getInt64(0)));
  for (int64_t j = 1; j < width && !c.consecutive; ++j) {
    Value* gap = b_.CreateSub(b_.CreatePtrToInt(c.ptrs[j], b_.getInt64Ty()), first);
    ok = b_.CreateAnd(ok, b_.CreateICmpEQ(gap, b_.getInt64(j * d.bytes())));
  }
  return ok;
}

// Element p of chunk `c` as a run of `width` consecutive pieces: calls f(piece pointer, piece type, first j).
void Lowering::for_each_piece(const Chunk& c, DType d,
                              const std::function<void(Value*, llvm::FixedVectorType*, int64_t)>& f) {
  int64_t width = static_cast<int64_t>(c.ptrs.size()), per = std::min(width, piece_elems(d));
  auto* piece = llvm::FixedVectorType::get(ops_.memory_type(d), static_cast<unsigned>(per));
  for (int64_t j = 0; j < width; j += per) f(c.ptrs[j], piece, j);
}

Lowering::Chunk Lowering::chunk_of(const std::vector<NodeRef>& o, size_t mask_operand, int64_t first,
                                   int64_t width) {
  Chunk c;
  // A chunk is `width` consecutive flat elements starting at a multiple of `width`: the analysis's runs.
  c.one_mask = o.size() > mask_operand && patterns_.of(o[mask_operand].get()).constancy >= width;
  c.consecutive = chunks_consecutive(o[0], width);
  for (int64_t j = 0; j < width; ++j) {
    c.ptrs.push_back(regs(o[0]).v[first + j]);
    if (o.size() > mask_operand) c.masks.push_back(regs(o[mask_operand]).v[first + j]);
  }
  return c;
}

// The 16-bit elements of a chunk of 16 consecutive bytes at a 2-byte aligned address a: the aligned 16-byte
// blocks at a & ~15 and 16 bytes on, read whole, and the chunk's four words taken from their eight. Both
// blocks hold bytes of the chunk when a is not 16-byte aligned, so they lie in memory the kernel may read
// (no page ends inside an aligned 16-byte block); where a may be aligned (`may_be_aligned`), the second read
// is of the first block again when it is (a & 15 = 0 takes the first block's words as they are). With
// a & 15 = 4 q + 2 h, word i of the chunk is block word i + q, or (h) the high half of that and the low half
// of the next.
void Lowering::shifted_chunk(const Chunk& c, DType d, std::vector<Value*>& out, bool may_be_aligned) {
  llvm::Type* i32 = b_.getInt32Ty();
  Value* offset = b_.CreateAnd(b_.CreateTrunc(b_.CreatePtrToInt(c.ptrs[0], b_.getInt64Ty()), i32), i32c(15));
  Value* first = b_.CreateGEP(b_.getInt8Ty(), c.ptrs[0], b_.CreateNeg(b_.CreateZExt(offset, b_.getInt64Ty())));
  Value* next = may_be_aligned ? b_.CreateSelect(b_.CreateICmpNE(offset, i32c(0)), b_.getInt64(16), b_.getInt64(0))
                               : b_.getInt64(16);
  auto* block = llvm::FixedVectorType::get(i32, 4);
  std::vector<Value*> w;
  for (Value* at : {static_cast<Value*>(b_.getInt64(0)), next}) {
    Value* v = b_.CreateAlignedLoad(block, b_.CreateGEP(b_.getInt8Ty(), first, at), llvm::Align(16));
    for (unsigned e = 0; e < 4; ++e) w.push_back(b_.CreateExtractElement(v, e));
  }
  Value* odd_word = b_.CreateICmpNE(b_.CreateAnd(offset, i32c(4)), i32c(0));  // q & 1
  Value* two_words = b_.CreateICmpNE(b_.CreateAnd(offset, i32c(8)), i32c(0));  // q & 2
  Value* half = b_.CreateICmpNE(b_.CreateAnd(offset, i32c(2)), i32c(0));       // h
  std::vector<Value*> by_one, by_q;  // block words moved down by q & 1, then by q
  for (int j = 0; j < 7; ++j) by_one.push_back(b_.CreateSelect(odd_word, w[j + 1], w[j]));
  for (int i = 0; i < 5; ++i) by_q.push_back(b_.CreateSelect(two_words, by_one[i + 2], by_one[i]));
  for (int i = 0; i < 4; ++i) {
    Value* joined = b_.CreateOr(b_.CreateLShr(by_q[i], 16), b_.CreateShl(by_q[i + 1], 16));
    Value* word = b_.CreateSelect(half, joined, by_q[i]);
    out.push_back(ops_.to_compute_half_of(d, word, false));
    out.push_back(ops_.to_compute_half_of(d, word, true));
  }
}

void Lowering::load(const NodeRef& n) {
  DType d = n->type.dtype;
  const auto& o = n->operands;
  llvm::Type* mt = ops_.memory_type(d);
  int64_t width = vector_width(n->type.numel());
  Regs out;
  for (int64_t first = 0; first < per_thread(n->type.numel()); first += width) {
    Chunk c = chunk_of(o, 1, first, width);
    auto otherwise = [&](int64_t j) {
      return o.size() == 3 ? regs(o[2]).v[first + j] : llvm::Constant::getNullValue(ops_.compute_type(d));
    };
    auto element_wise = [&](std::vector<Value*>& vals) {
      for (int64_t j = 0; j < width; ++j) {
        auto read = [&] { return ops_.to_compute(d, b_.CreateLoad(mt, c.ptrs[j])); };
        vals.push_back(c.masks.empty() ? read() : guarded(c.masks[j], read, otherwise(j)));
      }
    };
    auto whole = [&](std::vector<Value*>& fast) {
      for_each_piece(c, d, [&](Value* p, llvm::FixedVectorType* piece, int64_t) {
        unsigned count = piece->getNumElements();
        llvm::Align align(count * d.bytes());
        if (d.bytes() != 2 || count % 2 != 0) {
          auto* load = b_.CreateAlignedLoad(piece, p, align);
          for (unsigned e = 0; e < count; ++e) fast.push_back(ops_.to_compute(d, b_.CreateExtractElement(load, e)));
          return;
        }
        // 16-bit elements as 32-bit words, halves taken with integer ops: bf16 -> f32 is then one shl
        // (low half) or and (high half) per element instead of an unpack, a zero extension and a shift.
        auto* words = b_.CreateAlignedLoad(llvm::FixedVectorType::get(b_.getInt32Ty(), count / 2), p, align);
        for (unsigned e = 0; e < count; ++e)
          fast.push_back(ops_.to_compute_half_of(d, b_.CreateExtractElement(words, e / 2), e % 2 == 1));
      });
    };
    std::vector<Value*> vals;
    bool proven = width > 1 && chunks_proven(o[0], d, width);
    // Consecutive 16-bit elements of one 16-byte chunk at an address that is not 16-byte aligned (a row
    // of odd length): the two aligned blocks around it, shifted (element by element, a warp's lanes would
    // read 2-byte pieces 16 bytes apart, eight times the L1 requests).
    auto misaligned = [&](std::vector<Value*>& slow) {
      if (!c.consecutive || d.bytes() != 2 || width * d.bytes() != kMaxAccessBytes) return element_wise(slow);
      Value* all = b_.getTrue();
      for (Value* m : c.masks) all = b_.CreateAnd(all, m);
      slow = branch_values(all, width, [&](std::vector<Value*>& v) { shifted_chunk(c, d, v, false); }, element_wise);
    };
    // Unmasked 16-bit chunks of consecutive elements whose alignment is not proven: the shifted read alone,
    // aligned or not, without a branch. A branch per chunk would put each chunk's shifts (which wait for its
    // loads) before the next chunk's loads, leaving one chunk in flight per thread (the plain-load GEMM over
    // rows of odd length: 370 instructions a step at 22 cycles each, 0.86 TB/s; benchmarks/NOTES.md session
    // 24); straight-line, the loads of all chunks go out before the first shift waits.
    const bool straight = !proven && c.masks.empty() && c.consecutive && d.bytes() == 2 &&
                          width * d.bytes() == kMaxAccessBytes;
    if (width == 1)
      element_wise(vals);
    else if (straight)
      shifted_chunk(c, d, vals, true);
    else if (proven && c.masks.empty())
      whole(vals);
    else if (proven && c.one_mask)  // all or nothing: no element-wise fallback
      vals = branch_values(c.masks[0], width, whole, [&](std::vector<Value*>& none) {
        for (int64_t j = 0; j < width; ++j) none.push_back(otherwise(j));
      });
    else
      vals = branch_values(whole_chunk_ok(c, d, proven), width, whole, misaligned);
    for (Value* v : vals) out.v.push_back(v);
  }
  regs_[n.get()] = std::move(out);
}

// A store of one value per row of an accumulator (a row reduction: the LSE of attention) whose pointers and
// mask are index tiles is done where the rows are, each thread storing its rows' registers: no exchange through
// shared memory into the blocked layout first (the four lanes of a row store the same value at one address,
// which the memory system merges).
bool Lowering::store_from_rows(const ir::Node& n) {
  auto computed_anywhere = [&](const ir::Node& x) { return uniform_node(x) || x.type.numel() <= 1 || index_tile(x); };
  if (layout_of(*n.operands[1]) != Layout::AccRows || !computed_anywhere(*n.operands[0])) return false;
  return n.operands.size() < 3 || computed_anywhere(*n.operands[2]);
}

void Lowering::store(const NodeRef& n) {
  const auto& o = n->operands;
  DType d = o[1]->type.dtype;
  if (regs(o[1]).in(Layout::AccRows) && store_from_rows(*n)) {
    const Regs& values = regs(o[1]);
    auto reg = [&](const NodeRef& x, size_t r) {  // a uniform pointer or mask holds one value for all registers
      const Regs& x_regs = regs(x);
      return x_regs.uniform || x_regs.v.size() == 1 ? x_regs.v[0] : x_regs.v.at(r);
    };
    for (size_t r = 0; r < values.v.size(); ++r) {
      auto write = [&]() -> Value* {
        b_.CreateStore(ops_.to_memory(d, values.v[r]), reg(o[0], r));
        return nullptr;
      };
      if (o.size() > 2)
        guarded(reg(o[2], r), write, nullptr);
      else
        write();
    }
    return;
  }
  int64_t width = vector_width(o[0]->type.numel());
  // A tile smaller than the group (a rank-0 store included): threads t and t + count hold copies of
  // element t, and only t < count stores it, so that a program's read-modify-write of one address (load,
  // then store) writes once, what that thread read, whatever the other warps read meanwhile.
  const int64_t count = o[0]->type.numel();
  Value* owner = count < threads_ ? b_.CreateICmpULT(tid_, i32c(count)) : nullptr;
  for (int64_t first = 0; first < per_thread(o[0]->type.numel()); first += width) {
    Chunk c = chunk_of(o, 2, first, width);
    auto value = [&](int64_t j) { return ops_.to_memory(d, regs(o[1]).v[first + j]); };
    auto element_wise = [&] {
      for (int64_t j = 0; j < width; ++j) {
        auto write = [&]() -> Value* {
          b_.CreateStore(value(j), c.ptrs[j]);
          return nullptr;
        };
        Value* cond = c.masks.empty() ? owner : owner ? b_.CreateAnd(owner, c.masks[j]) : c.masks[j];
        if (!cond)
          write();
        else
          guarded(cond, write, nullptr);
      }
    };
    auto whole = [&](std::vector<Value*>&) {
      for_each_piece(c, d, [&](Value* p, llvm::FixedVectorType* piece, int64_t j0) {
        unsigned count = piece->getNumElements();
        llvm::Align align(count * d.bytes());
        if (d.bytes() == 2 && count % 2 == 0) {  // as 32-bit words: bf16 pairs round in one cvt.rn.bf16x2.f32
          Value* words = llvm::PoisonValue::get(llvm::FixedVectorType::get(b_.getInt32Ty(), count / 2));
          for (unsigned e = 0; e < count; e += 2) {
            const std::vector<Value*>& v = regs(o[1]).v;
            words = b_.CreateInsertElement(words, ops_.to_memory_pair(d, v[first + j0 + e], v[first + j0 + e + 1]), e / 2);
          }
          b_.CreateAlignedStore(words, p, align);
          return;
        }
        Value* vec = llvm::PoisonValue::get(piece);
        for (unsigned e = 0; e < count; ++e) vec = b_.CreateInsertElement(vec, value(j0 + e), e);
        b_.CreateAlignedStore(vec, p, align);
      });
    };
    std::vector<Value*> none;
    bool proven = width > 1 && chunks_proven(o[0], d, width);
    if (width == 1)
      element_wise();
    else if (proven && c.masks.empty())
      whole(none);
    else if (proven && c.one_mask)
      guarded(c.masks[0], [&]() -> Value* {
        whole(none);
        return nullptr;
      }, nullptr);
    else
      branch_values(whole_chunk_ok(c, d, proven), 0, whole, [&](std::vector<Value*>&) { element_wise(); });
  }
}

// The PTX type of an atomic's operation on `d`: add counts (u32, u64) or sums floats, max and min compare
// signed, the rest work on bits (b32, b64; f32 and f64 exchanged as their bits).
static const char* atom_type(const ir::AtomicInfo& info, DType d) {
  const bool wide = d.bytes() == 8;
  if (!info.cas && info.op == AtomicOp::add) {
    if (d.scalar == ScalarType::f16) return "noftz.f16";  // add.noftz.f16: the 16-bit adds keep subnormals
    if (d.scalar == ScalarType::bf16) return "noftz.bf16";
    return d.is_float() ? (wide ? "f64" : "f32") : (wide ? "u64" : "u32");
  }
  if (!info.cas && (info.op == AtomicOp::max || info.op == AtomicOp::min)) return wide ? "s64" : "s32";
  return wide ? "b64" : "b32";
}

// Whether any node reads `n`'s value (the program's nodes' operands, made once).
bool Lowering::value_used(const ir::Node& n) {
  if (!used_values_) {
    used_values_.emplace();
    std::function<void(const ir::Region&)> walk = [&](const ir::Region& r) {
      for (const NodeRef& x : r.body) {
        for (const NodeRef& o : x->operands) used_values_->insert(o.get());
        for (const ir::Region& inner : x->regions) walk(inner);
      }
    };
    walk(f_.body);
  }
  return used_values_->count(&n) > 0;
}

// Atomics (weft/ops.h): each element by the one thread that holds it in the blocked layout. In a tile smaller
// than the group, threads t and t + count hold copies of element t: only t < count (thread 0 for a rank-0
// pointer) does the atomic, and the old values reach the copies through the group's scratch, between two
// barriers (after the second, the scratch is free again). The program's order: a release waits at a barrier
// for the group's earlier accesses first, an acquire makes the group wait at one for the atomics (CUTLASS's
// semaphore: bar.sync, then one thread's red.release.gpu; one thread's ld.acquire.gpu, then bar.sync). When
// nothing reads the old values, none is handed round, and a relaxed or release add, max, min, and, or or xor
// is a `red` (no round trip to the thread).
void Lowering::atomic(const NodeRef& n) {
  const auto& o = n->operands;
  const ir::AtomicInfo info = ir::atomic_info(*n);
  const size_t values = info.cas ? 2 : 1;
  const bool masked = o.size() > 1 + values;
  const DType d = n->type.dtype;
  const int64_t count = o[0]->type.numel();
  const bool copies = count < threads_, used = value_used(*n);
  const bool reduction = !used && !info.cas && info.op != AtomicOp::xchg && !info.acquire();
  llvm::Type* t = ops_.compute_type(d);
  llvm::Type* bits = d.is_float() ? b_.getIntNTy(static_cast<unsigned>(8 * d.bytes())) : t;
  const bool half = d.scalar == ScalarType::f16 || d.scalar == ScalarType::bf16;
  // The old values are handed round as `t` (f16 and bf16: f32), not in memory's width.
  if (copies && used) claim_shared(count * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), n->loc);
  if (info.release()) sync_group();
  Value* owner = copies ? b_.CreateICmpULT(tid_, i32c(count)) : nullptr;
  Regs out;
  out.uniform = count == 1;
  for (size_t r = 0; r < static_cast<size_t>(per_thread(count)); ++r) {
    auto update = [&]() -> Value* {
      Value* value = reg_at(o[values], r);
      // f16 and bf16 compute in f32: the value rounded to its 16 bits (a .b16 register), the old value widened.
      if (half) value = b_.CreateBitCast(ops_.to_memory(d, value), b_.getInt16Ty());
      const char* order = ir::order_name(info.order), *scope = ir::scope_name(info.scope);
      if (reduction) {
        ptx_.red(ir::atomic_name(info), atom_type(info, d), order, scope, reg_at(o[0], r), value);
        return llvm::Constant::getNullValue(t);
      }
      Value* compare = info.cas ? reg_at(o[1], r) : nullptr;
      const bool as_bits = d.is_float() && info.op == AtomicOp::xchg;
      if (as_bits) value = b_.CreateBitCast(value, bits);
      Value* old = ptx_.atom(info.cas ? "cas" : info.op == AtomicOp::xchg ? "exch" : ir::atomic_name(info),
                             atom_type(info, d), order, scope, reg_at(o[0], r), value, compare);
      if (half) return ops_.to_compute(d, b_.CreateBitCast(old, ops_.memory_type(d)));
      return as_bits ? b_.CreateBitCast(old, t) : old;
    };
    Value* cond = masked ? reg_at(o[1 + values], r) : nullptr;
    if (owner) cond = cond ? b_.CreateAnd(owner, cond) : owner;
    out.v.push_back(cond ? guarded(cond, update, llvm::Constant::getNullValue(t)) : update());
  }
  if (copies && used) {
    guarded(owner, [&]() -> Value* {
      b_.CreateStore(out.v[0], shared_at(t, 0, tid_));
      return nullptr;
    }, nullptr);
    sync_group();
    out.v[0] = b_.CreateLoad(t, shared_at(t, 0, flat_index(count, 0)));
    sync_group();
  } else if (info.acquire()) {
    sync_group();
  }
  regs_[n.get()] = std::move(out);
}

// if (cond) fast(values) else slow(values); returns the `count` values merged by phis.
std::vector<Value*> Lowering::branch_values(Value* cond, int64_t count,
                                            const std::function<void(std::vector<Value*>&)>& fast,
                                            const std::function<void(std::vector<Value*>&)>& slow) {
  auto* fast_block = llvm::BasicBlock::Create(c_, "whole", fn_);
  auto* slow_block = llvm::BasicBlock::Create(c_, "by_element", fn_);
  auto* join = llvm::BasicBlock::Create(c_, "chunk.end", fn_);
  b_.CreateCondBr(cond, fast_block, slow_block);
  std::vector<Value*> fv, sv;
  b_.SetInsertPoint(fast_block);
  fast(fv);
  llvm::BasicBlock* fast_end = b_.GetInsertBlock();
  b_.CreateBr(join);
  b_.SetInsertPoint(slow_block);
  slow(sv);
  llvm::BasicBlock* slow_end = b_.GetInsertBlock();
  b_.CreateBr(join);
  b_.SetInsertPoint(join);
  std::vector<Value*> merged;
  for (int64_t j = 0; j < count; ++j) {
    llvm::PHINode* phi = b_.CreatePHI(fv[j]->getType(), 2);
    phi->addIncoming(fv[j], fast_end);
    phi->addIncoming(sv[j], slow_end);
    merged.push_back(phi);
  }
  return merged;
}

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
  Value* byte = swizzle(b_.CreateMul(flat, i32c(d.bytes())), alloc.swizzle);
  return b_.CreateInBoundsGEP(b_.getInt8Ty(), base ? base : smem_,
                              b_.CreateZExt(b_.CreateAdd(regs(view).v[0], byte), b_.getInt64Ty()));
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
  std::vector<int64_t> ist = strides(ishape), vst = strides(vshape);
  if (scatter) sync_group();
  Regs out;
  for (int64_t r = 0; r < per_thread(count); ++r) {
    Value* flat = flat_index(count, r), *at = i32c(0);
    for (size_t k = 0; k < ishape.size(); ++k) {
      Value* c = static_cast<int64_t>(k) == axis
                     ? b_.CreateAnd(reg_at(indices, r), i32c(vshape[k] - 1))
                     : b_.CreateURem(b_.CreateUDiv(flat, i32c(ist[k])), i32c(ishape[k]));
      at = b_.CreateAdd(at, b_.CreateMul(c, i32c(vst[k])));
    }
    Value* address = view_element(view, d, at);
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
    guarded(b_.CreateICmpEQ(tid_, i32c(0)), issue, nullptr);
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
