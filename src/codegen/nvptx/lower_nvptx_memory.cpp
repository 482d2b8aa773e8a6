// NVPTX lowering: global memory (loads and stores in 16-byte pieces, atomics) and the group's scratch in
// shared memory; shared buffers, their views and the copies into them are in lower_nvptx_shared.cpp.
#include "codegen/nvptx/lowering.h"

#include <fmt/format.h>

#include "ir/atomics.h"

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

bool Lowering::global_pointer(Value* p) {
  return p->getType()->isPointerTy() && p->getType()->getPointerAddressSpace() == 1;
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
  for (Value* word : funnel_words(w, offset)) {
    out.push_back(ops_.to_compute_half_of(d, word, false));
    out.push_back(ops_.to_compute_half_of(d, word, true));
  }
}

// The 16 bytes at byte `offset` (even, 0 to 14) of the 32 that words w[0..7] hold, as four words: with
// offset = 4 q + 2 h, word i is w[i + q], or (h) the high half of that and the low half of the next.
std::vector<Value*> Lowering::funnel_words(const std::vector<Value*>& w, Value* offset) {
  Value* odd_word = b_.CreateICmpNE(b_.CreateAnd(offset, i32c(4)), i32c(0));  // q & 1
  Value* two_words = b_.CreateICmpNE(b_.CreateAnd(offset, i32c(8)), i32c(0));  // q & 2
  Value* half = b_.CreateICmpNE(b_.CreateAnd(offset, i32c(2)), i32c(0));       // h
  std::vector<Value*> by_one, by_q, out;  // words moved down by q & 1, then by q
  for (int j = 0; j < 7; ++j) by_one.push_back(b_.CreateSelect(odd_word, w[j + 1], w[j]));
  for (int i = 0; i < 5; ++i) by_q.push_back(b_.CreateSelect(two_words, by_one[i + 2], by_one[i]));
  for (int i = 0; i < 4; ++i) {
    // (by_q[i] >> 16) | (by_q[i + 1] << 16): one funnel shift (shf.r.wrap).
    Value* joined = b_.CreateIntrinsic(llvm::Intrinsic::fshr, {b_.getInt32Ty()}, {by_q[i + 1], by_q[i], i32c(16)});
    out.push_back(b_.CreateSelect(half, joined, by_q[i]));
  }
  return out;
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
        if (c.masks.empty()) {
          vals.push_back(read());
          continue;
        }
        // A masked element: a predicated load where the type allows (no branch: fewer blocks for LLVM to
        // optimize), else a guarded one.
        Value* v = global_pointer(c.ptrs[j]) ? ptx_.load_global_if(c.masks[j], mt, c.ptrs[j]) : nullptr;
        vals.push_back(v ? b_.CreateSelect(c.masks[j], ops_.to_compute(d, v), otherwise(j))
                         : guarded(c.masks[j], read, otherwise(j)));
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
        else if (!global_pointer(c.ptrs[j]) || !ptx_.store_global_if(cond, value(j), c.ptrs[j]))
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
    // (The lane path's block stores are st.global: only for pointers into global memory, which every Ptr is.)
    if (width > 1 && !proven && !owner && c.consecutive && d.bytes() == 2 && width * d.bytes() == kMaxAccessBytes &&
        global_pointer(c.ptrs[0])) {
      std::vector<Value*> words;
      const std::vector<Value*>& v = regs(o[1]).v;
      for (int64_t e = 0; e < width; e += 2) words.push_back(ops_.to_memory_pair(d, v[first + e], v[first + e + 1]));
      store_across_lanes(c, d, words, value);
    } else if (width == 1)
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

// A chunk of eight consecutive 16-bit elements (`words`: four 32-bit words) stored where its address may not
// be 16-byte aligned (a row of any length), by a warp all of whose lanes store such a chunk: one 16-byte
// store where the chunk is aligned and whole in its mask; else each lane stores the aligned block that holds
// its chunk's head, joined with the tail of the previous lane's chunk (shuffled up), where that chunk is the
// 16 bytes just before and both are whole in their masks; what no block covers (a warp's first lane's head,
// its last lane's tail, chunks partly in the mask) goes element by element. Stored element by element, eight
// 2-byte stores 16 bytes apart across the lanes would write each of the warp's sectors eight times
// (layernorm over rows of 2047: 51% of the copy's bandwidth with only the output rows odd;
// benchmarks/NOTES.md session 24).
void Lowering::store_across_lanes(const Chunk& c, DType d, const std::vector<Value*>& words,
                                  const std::function<Value*(int64_t)>& value) {
  llvm::Type* i32 = b_.getInt32Ty();
  llvm::Type* i64 = b_.getInt64Ty();
  auto* block = llvm::FixedVectorType::get(i32, 4);
  auto store_block = [&](const std::vector<Value*>& w, Value* ptr) {
    Value* vec = llvm::PoisonValue::get(block);
    for (unsigned e = 0; e < 4; ++e) vec = b_.CreateInsertElement(vec, w[e], e);
    b_.CreateAlignedStore(vec, ptr, llvm::Align(16));
  };
  Value* address = b_.CreatePtrToInt(c.ptrs[0], i64);
  Value* offset = b_.CreateAnd(b_.CreateTrunc(address, i32), i32c(15));
  Value* whole = whole_chunk_ok(c, d, true);  // in its mask (the alignment is tested below)
  // The lane path where any lane of the warp needs it (a branch every lane takes alike, so that all of them
  // shuffle): the previous lane's words, address and wholeness first.
  Value* aligned_whole = b_.CreateAnd(b_.CreateICmpEQ(offset, i32c(0)), whole);
  Value* any_not = b_.CreateICmpNE(ptx_.vote_ballot(b_.CreateNot(aligned_whole)), i32c(0));
  branch_values(any_not, 0, [&](std::vector<Value*>&) {
    std::vector<Value*> pair;  // the previous lane's chunk, then this one: 32 bytes
    for (Value* w : words) pair.push_back(ptx_.shuffle_up(w, 1));
    for (Value* w : words) pair.push_back(w);
    Value* previous_follows = b_.CreateICmpEQ(b_.CreateAdd(ptx_.shuffle_up(address, 1), b_.getInt64(16)), address);
    Value* previous_whole = b_.CreateICmpNE(ptx_.shuffle_up(b_.CreateZExt(whole, i32), 1), i32c(0));
    Value* first_lane = b_.CreateICmpEQ(lane(), i32c(0)), *last_lane = b_.CreateICmpEQ(lane(), i32c(31));
    Value* head = b_.CreateAnd(b_.CreateAnd(b_.CreateNot(first_lane), b_.CreateICmpNE(offset, i32c(0))),
                               b_.CreateAnd(previous_follows, b_.CreateAnd(previous_whole, whole)));
    Value* next_head = b_.CreateAnd(b_.CreateNot(last_lane),
                                    b_.CreateICmpNE(ptx_.shuffle_down(b_.CreateZExt(head, i32), 1), i32c(0)));
    ptx_.store_global_block_if(aligned_whole, words, c.ptrs[0]);  // (a lane whose chunk is aligned and whole)
    Value* start = b_.CreateGEP(b_.getInt8Ty(), c.ptrs[0], b_.CreateNeg(b_.CreateZExt(offset, i64)));
    ptx_.store_global_block_if(head, funnel_words(pair, b_.CreateSub(i32c(16), offset)), start);
    // Elements before byte 16 - offset are in the head block, the rest in the next lane's: bit j of `left` is
    // set where element j is in no block this warp stores (integer bits, not a tree of i1 selects: cheaper for
    // LLVM to optimize).
    Value* head_elements = b_.CreateLShr(b_.CreateSub(i32c(16), offset), i32c(1));
    Value* head_bits = b_.CreateSub(b_.CreateShl(i32c(1), head_elements), i32c(1));
    Value* left = b_.CreateOr(b_.CreateSelect(head, i32c(0), head_bits),
                              b_.CreateSelect(next_head, i32c(0), b_.CreateXor(head_bits, i32c(0xff))));
    left = b_.CreateSelect(aligned_whole, i32c(0), left);
    for (int64_t j = 0; j < static_cast<int64_t>(c.ptrs.size()); ++j) {
      Value* cond = b_.CreateICmpNE(b_.CreateAnd(left, i32c(1 << j)), i32c(0));
      if (!c.masks.empty()) cond = b_.CreateAnd(cond, c.masks[c.one_mask ? 0 : j]);
      if (!global_pointer(c.ptrs[j]) || !ptx_.store_global_if(cond, value(j), c.ptrs[j]))
        guarded(cond, [&]() -> Value* {
          b_.CreateStore(value(j), c.ptrs[j]);
          return nullptr;
        }, nullptr);
    }
  }, [&](std::vector<Value*>&) { store_block(words, c.ptrs[0]); });
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

}  // namespace weft::codegen::nvptx::detail
