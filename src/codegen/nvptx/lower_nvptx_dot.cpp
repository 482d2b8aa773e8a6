// NVPTX lowering: dot (wgmma on Hopper, mma.sync tensor cores, CUDA cores) and async_dot (wgmma on
// shared buffers, or with a in registers).
#include "codegen/nvptx/lowering.h"

#include <fmt/format.h>

#include <array>

#include "codegen/nvptx/mma_tiles.h"
#include "passes/shared_layouts.h"

namespace weft::codegen::nvptx::detail {

void Lowering::dot(const NodeRef& n) {
  const NodeRef& a = n->operands[0];
  const NodeRef& bm = n->operands[1];
  int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
  ScalarType s = a->type.dtype.scalar;
  bool half = s == ScalarType::bf16 || s == ScalarType::f16;
  if (half && threads_ == 128 && M % 64 == 0 && N % 8 == 0 && N <= 256 && K % 16 == 0) return dot_wgmma(n);
  if (half && M % 16 == 0 && N % 8 == 0 && K % 16 == 0) return dot_tensor_cores(n);
  dot_cuda_cores(n);
}

// Hopper, on a group of one warp group: A [M, K] and B [K, N] staged in the group's scratch in wgmma's
// plain (unswizzled) K-major layout — 8 x 8 core matrices of 16-byte rows, the two of each k16 step
// side by side (LBO 128 bytes), 8-row groups K / 8 core matrices apart (SBO) — then one m64nNk16 per 64
// rows and 16 of K, waited for at once. The result stays in the wgmma layout.
void Lowering::dot_wgmma(const NodeRef& n) {
  const NodeRef& a = n->operands[0];
  const NodeRef& bm = n->operands[1];
  DType d = a->type.dtype;
  int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
  int64_t sbo = K / 8 * 128, b_at = M * K * 2;
  // The accumulator first: its conversion uses the scratch the operands go to next.
  Regs acc = n->operands.size() == 3 ? raw(n->operands[2]) : splat(ops_.constant(DType{ScalarType::f32, false}, 0), M * N);
  if (!acc.uniform && acc.layout != Layout::Acc)
    acc = relayout(acc, DType{ScalarType::f32, false}, n->type.shape, Layout::Acc, n->loc);
  claim_shared(b_at + N * K * 2, n->loc);
  llvm::Type* i16 = b_.getInt16Ty();
  // Byte offset of element (row, k) of a K-major operand with `rows` rows.
  auto core_offset = [&](Value* row, Value* k) {
    Value* across = b_.CreateAdd(b_.CreateMul(b_.CreateLShr(row, i32c(3)), i32c(sbo)),
                                 b_.CreateMul(b_.CreateLShr(k, i32c(3)), i32c(128)));
    return b_.CreateAdd(across, b_.CreateAdd(b_.CreateMul(b_.CreateAnd(row, i32c(7)), i32c(16)),
                                             b_.CreateMul(b_.CreateAnd(k, i32c(7)), i32c(2))));
  };
  auto put = [&](Value* v, Value* offset) {
    Value* at = b_.CreateInBoundsGEP(b_.getInt8Ty(), scratch_base(), b_.CreateZExt(offset, b_.getInt64Ty()));
    b_.CreateStore(b_.CreateBitCast(ops_.to_memory(d, v), i16), at);
  };
  const Regs& ar = regs(a);
  for (size_t r = 0; r < ar.v.size(); ++r) {  // A[i][k]: row i
    Value* i = flat_index(M * K, static_cast<int64_t>(r));
    put(ar.v[r], core_offset(b_.CreateUDiv(i, i32c(K)), b_.CreateURem(i, i32c(K))));
  }
  const Regs& br = regs(bm);
  for (size_t r = 0; r < br.v.size(); ++r) {  // B[k][j]: row j of B^T
    Value* i = flat_index(K * N, static_cast<int64_t>(r));
    put(br.v[r], b_.CreateAdd(i32c(b_at), core_offset(b_.CreateURem(i, i32c(N)), b_.CreateUDiv(i, i32c(N)))));
  }
  ptx_.fence_proxy_async_shared();  // the staged operands, visible to the tensor cores
  sync_group();
  ptx_.wgmma_fence();
  Regs out = empty_regs(Layout::Acc, n->type.shape);
  Value* a_base = scratch_;
  Value* b_base = b_.CreateAdd(scratch_, i32c(b_at));
  for (int64_t block = 0; block < M / 64; ++block) {
    std::vector<Value*> acc_block(acc.v.begin() + block * N / 2, acc.v.begin() + (block + 1) * N / 2);
    std::vector<PtxInstructions::WgmmaStep> chain;
    for (int64_t k = 0; k < K / 16; ++k) {
      Value* a_desc = wgmma_descriptor_fields(b_.CreateAdd(a_base, i32c(block * 8 * sbo + k * 256)), 128, sbo, 0);
      Value* b_desc = wgmma_descriptor_fields(b_.CreateAdd(b_base, i32c(k * 256)), 128, sbo, 0);
      chain.push_back({{a_desc}, b_desc, true});
    }
    acc_block = ptx_.wgmma({d.scalar, d.scalar}, static_cast<int>(N), chain, acc_block, false, false);
    out.v.insert(out.v.end(), acc_block.begin(), acc_block.end());
  }
  ptx_.wgmma_commit_group();
  out.v = ptx_.wgmma_wait_group(0, out.v);
  sync_group();  // the scratch is read by the tensor cores until the wait
  regs_[n.get()] = std::move(out);
}

// Tensor cores: A and B staged in shared memory, each warp computes 16x8 tiles of C with mma.sync
// m16n8k16 over K (mma_tiles.cpp), C goes back to the tile layout through shared memory. (The operands and the result
// take a trip through shared memory because tiles keep one layout; Hopper's wgmma path keeps them put.)
void Lowering::dot_tensor_cores(const NodeRef& n) {
  const NodeRef& a = n->operands[0];
  const NodeRef& bm = n->operands[1];
  DType d = a->type.dtype;
  int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
  int64_t b_at = M * K * 2, c_at = (b_at + K * N * 2 + 15) / 16 * 16;
  claim_shared(c_at + M * N * 4, n->loc);
  llvm::Type* i16 = b_.getInt16Ty();
  llvm::Type* f32 = b_.getFloatTy();
  auto stage_bits = [&](const NodeRef& x, int64_t at) {  // 16-bit elements, as they are in memory
    const Regs& r = regs(x);
    for (size_t k = 0; k < r.v.size(); ++k)
      b_.CreateStore(b_.CreateBitCast(ops_.to_memory(d, r.v[k]), i16), scratch_register(i16, at, Regs{}, x->type.numel(), k));
  };
  stage_bits(a, 0);
  stage_bits(bm, b_at);
  bool has_acc = n->operands.size() == 3;
  if (has_acc) stage(regs(n->operands[2]), DType{ScalarType::f32, false}, M * N, c_at);
  sync_group();
  emit_mma_tiles(b_, ptx_, {scratch_base(), entry_, tid_, threads_}, {M, N, K, 0, b_at, c_at, d.scalar == ScalarType::bf16, has_acc});
  sync_group();
  Regs out;
  for (int64_t r = 0; r < per_thread(M * N); ++r)
    out.v.push_back(b_.CreateLoad(f32, scratch_register(f32, c_at, out, M * N, r)));
  sync_group();
  regs_[n.get()] = std::move(out);
}

// CUDA cores: A and B staged in shared memory as f32, each thread computes its own elements of C.
void Lowering::dot_cuda_cores(const NodeRef& n) {
  const NodeRef& a = n->operands[0];
  const NodeRef& bm = n->operands[1];
  int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
  llvm::Type* f32 = b_.getFloatTy();
  DType af{ScalarType::f32, false};
  int64_t b_at = M * K * 4;
  claim_shared(b_at + K * N * 4, n->loc);
  auto as_f32 = [&](const NodeRef& x) {
    Regs r;
    for (Value* v : regs(x).v) r.v.push_back(ops_.cast(x->type.dtype, af, v));
    return r;
  };
  stage(as_f32(a), af, M * K, 0);
  stage(as_f32(bm), af, K * N, b_at);
  sync_group();
  int64_t outputs = per_thread(M * N);
  std::vector<Value*> acc, row, col;
  llvm::IRBuilder<> eb(entry_, entry_->begin());
  for (int64_t r = 0; r < outputs; ++r) {
    acc.push_back(eb.CreateAlloca(f32));
    Value* init = n->operands.size() == 3 ? regs(n->operands[2]).v[r] : llvm::ConstantFP::get(f32, 0.0);
    b_.CreateStore(init, acc[r]);
    Value* i = flat_index(M * N, r);
    row.push_back(b_.CreateMul(b_.CreateUDiv(i, i32c(N)), i32c(K)));
    col.push_back(b_.CreateURem(i, i32c(N)));
  }
  counted_loop(i32c(0), i32c(K), i32c(1), [&](Value* k) {
    Value* b_row = b_.CreateMul(k, i32c(N));
    for (int64_t r = 0; r < outputs; ++r) {
      Value* av = b_.CreateLoad(f32, shared_at(f32, 0, b_.CreateAdd(row[r], k)));
      Value* bv = b_.CreateLoad(f32, shared_at(f32, b_at, b_.CreateAdd(b_row, col[r])));
      b_.CreateStore(ops_.fma(av, bv, b_.CreateLoad(f32, acc[r])), acc[r]);
    }
  });
  sync_group();
  Regs out;
  for (int64_t r = 0; r < outputs; ++r) out.v.push_back(b_.CreateLoad(f32, acc[r]));
  regs_[n.get()] = std::move(out);
}

// The 64-bit wgmma descriptor of an operand in shared memory whose rows (its contiguous dimension) are
// `row_bytes` long, swizzled as wide, starting at byte `offset` (PTX ISA, "Matrix Descriptor"): start
// address >> 4; the leading byte offset: unused (16) for K-major operands, the distance between panels
// (`panel_bytes`) for N-major ones; the stride byte offset: 8 rows; the swizzle mode.
Value* Lowering::wgmma_descriptor(Value* offset, int64_t row_bytes, int64_t panel_bytes) {
  uint64_t mode = row_bytes == 128 ? 1 : row_bytes == 64 ? 2 : 3;
  return wgmma_descriptor_fields(offset, panel_bytes, 8 * row_bytes, mode);
}

// The descriptor from its fields: leading and stride byte offsets, swizzle mode (0: none, 1: 128 bytes,
// 2: 64, 3: 32). Built as zext(low word) | constant high word, so that wgmma_descriptor_plus can step it
// with one 32-bit add.
Value* Lowering::wgmma_descriptor_fields(Value* offset, int64_t lbo, int64_t sbo, uint64_t mode) {
  Value* address = b_.CreateLShr(b_.CreateAnd(shared_address(offset), i32c(0x3FFFF)), i32c(4));
  int64_t lbo_field = ((lbo >> 4) & 0x3FFF) << 16;
  Value* low = b_.CreateOr(address, i32c(lbo_field));
  uint64_t high = (uint64_t((sbo >> 4) & 0x3FFF)) | (mode << 30);
  Value* desc = descriptor_words(low, i32c(static_cast<int32_t>(high)));
  descriptor_parts_[desc] = {address, lbo_field, i32c(static_cast<int32_t>(high))};
  return desc;
}

// A 64-bit descriptor from its two 32-bit words, kept apart (mov.b64 {low, high}) so that a constant high
// word stays a constant: built as an i64 or/add, LLVM folds it into a 64-bit add of every step. (A constant
// high word goes in with its poison twin as one constant vector: the form instcombine would make.)
Value* Lowering::descriptor_words(Value* low, Value* high) {
  llvm::Type* pair = llvm::FixedVectorType::get(b_.getInt32Ty(), 2);
  Value* v;
  if (auto* c = llvm::dyn_cast<llvm::Constant>(high)) {
    v = b_.CreateInsertElement(llvm::ConstantVector::get({llvm::PoisonValue::get(b_.getInt32Ty()), c}), low, uint64_t(0));
  } else {
    v = b_.CreateInsertElement(llvm::PoisonValue::get(pair), low, uint64_t(0));
    v = b_.CreateInsertElement(v, high, uint64_t(1));
  }
  return b_.CreateBitCast(v, b_.getInt64Ty());
}

// The descriptor of the operand `bytes` (a multiple of 16) past the one `desc` describes: its start address
// field (bits 0-13, the address >> 4) plus bytes >> 4. Shared memory ends below 2^18 bytes, so the field
// cannot carry into the leading byte offset above it: the add stays in the low word, where LLVM and ptxas
// see one integer add instead of each step's mask, shift and or. A descriptor made here is stepped from the
// words it was made of (address field + a constant), without taking it apart again.
Value* Lowering::wgmma_descriptor_plus(Value* desc, int64_t bytes) {
  if (bytes == 0) return desc;
  if (bytes % 16 != 0) throw InternalError("wgmma descriptor stepped by a byte count that is not a multiple of 16");
  auto parts = descriptor_parts_.find(desc);
  if (parts != descriptor_parts_.end()) {
    DescriptorParts stepped = parts->second;
    stepped.constant += bytes >> 4;
    Value* out = descriptor_words(b_.CreateAdd(stepped.address, i32c(stepped.constant)), stepped.high);
    descriptor_parts_[out] = stepped;
    return out;
  }
  Value* words = b_.CreateBitCast(desc, llvm::FixedVectorType::get(b_.getInt32Ty(), 2));
  Value* low = b_.CreateAdd(b_.CreateExtractElement(words, uint64_t(0)), i32c(static_cast<int32_t>(bytes >> 4)));
  return descriptor_words(low, b_.CreateExtractElement(words, uint64_t(1)));
}

// Two 16-bit elements (in their compute type) as one 32-bit register, the first in the low half (one
// cvt.rn.{bf16x2,f16x2}.f32 for floats).
Value* Lowering::pack_pair(DType d, Value* lo, Value* hi) {
  auto l = unpacked_halves_.find(lo), h = unpacked_halves_.find(hi);  // the two halves of one word (a packed Var)
  if (l != unpacked_halves_.end() && h != unpacked_halves_.end() && l->second.first == h->second.first &&
      !l->second.second && h->second.second)
    return l->second.first;
  return ops_.to_memory_pair(d, lo, hi);
}

// acc + a @ b with wgmma: per 64 rows of a and 16 of K one m64nNk16 instruction (fp8: 32 of K, m64nNk32); a from swizzled
// shared memory -- stored [M, K] (K-major), or stored [K, M] and seen through local_trans (M-major: wgmma's
// transposed A) -- or from registers; b stored [N, K] and seen through local_trans (K-major) or stored
// [K, N] (N-major).
void Lowering::async_dot(const NodeRef& n) {
  const auto& o = n->operands;
  if (threads_ != 128)
    throw Error(fmt::format("async_dot runs on one warp group (4 warps), but here the group has {} warps; call it in a "
                            "task of 4 warps (or a kernel of num_warps = 4)",
                            threads_ / 32),
                n->loc);
  int64_t M = n->type.shape[0], N = n->type.shape[1], K = o[0]->type.shape[1];
  // a in registers: wgmma's A fragments are the accumulator layout's registers of 16 consecutive
  // columns (8 per thread, in order), so a tile in the wgmma layout feeds them as it is.
  bool a_registers = o[0]->type.kind == ir::Type::Kind::Value;
  Regs a_regs;
  if (a_registers) {
    a_regs = raw(o[0]);
    if (!a_regs.in(Layout::Acc)) a_regs = relayout(a_regs, o[0]->type.dtype, o[0]->type.shape, Layout::Acc, n->loc);
  }
  const passes::SharedAllocation* a_alloc =
      a_registers ? nullptr : &allocations_.of(passes::root_allocation(o[0].get()));
  const passes::SharedAllocation& b_alloc = allocations_.of(passes::root_allocation(o[1].get()));
  // a: stored [M, K] (K-major), or stored [K, M] and seen through local_trans (M-major: wgmma's transposed
  // A, 16-bit types only; the verifier refuses fp8). b: stored [N, K] and seen through local_trans
  // (K-major), or stored [K, N] (N-major: wgmma's transposed B). An M- or N-major operand wider than 128
  // bytes is kept in panels of the swizzle's width (64 columns of 16-bit elements): for a, one panel per
  // 64-row block of M.
  bool a_m_major = !a_registers && o[0]->op == Op::LocalTrans;
  bool b_n_major = o[1]->op != Op::LocalTrans;
  int64_t elem = o[0]->type.dtype.bytes();
  WgmmaTypes types{o[0]->type.dtype.scalar, o[1]->type.dtype.scalar};
  const int64_t KS = types.k();  // K of one instruction: 16 (16-bit types) or 32 (fp8), 32 bytes either way
  // A K-major operand whose K is wider than the 128-byte swizzle is kept in panels of 128-byte rows
  // (passes/shared_layouts): K-step k (KS elements) is then in panel KS k / P, KS k % P elements in.
  auto panel_of = [&](const passes::SharedAllocation* a) { return a && a->panel && a->panel < K ? a->panel : 0; };
  int64_t a_panel = a_m_major ? 0 : panel_of(a_alloc), b_panel = b_n_major ? 0 : panel_of(&b_alloc);
  int64_t a_row = a_m_major ? std::min<int64_t>(M * elem, 128) : a_panel ? a_panel * elem : K * elem;
  int64_t b_row = b_n_major ? std::min<int64_t>(N * elem, 128) : b_panel ? b_panel * elem : K * elem;
  auto k_step_offset = [&](int64_t panel, int64_t rows, int64_t k) {
    int64_t k0 = KS * k;
    return panel ? k0 / panel * rows * panel * elem + k0 % panel * elem : k0 * elem;
  };
  if ((a_alloc && a_alloc->swizzle != a_row) || b_alloc.swizzle != b_row)
    throw InternalError("async_dot: operand buffers without the swizzle of their row width");
  Regs acc = raw(o[2]);
  if (!acc.uniform && acc.layout != Layout::Acc) acc = relayout(acc, o[2]->type.dtype, o[2]->type.shape, Layout::Acc, n->loc);
  Value* a_base = a_registers ? nullptr : regs(o[0]).v[0];
  Value* b_base = regs(o[1]).v[0];
  // Every operand register (A's fragments, the descriptors) is made before wgmma.fence, so that the
  // wgmmas issue back to back and ptxas need not add warpgroup.arrive of its own between them.
  struct Step {
    std::array<Value*, 4> fragment{};
    Value* a_desc = nullptr;
    Value* b_desc = nullptr;
  };
  // Each operand's descriptor is encoded once; the steps add their byte offsets to it.
  Value* b_desc = b_n_major ? wgmma_descriptor(b_base, b_row, K * b_row) : wgmma_descriptor(b_base, b_row);
  // An M- or N-major operand's descriptor: rows (K) 8 apart in the stride byte offset, panels (64 of M or N)
  // K rows of 128 bytes apart in the leading one; its K step is 16 rows.
  Value* a_desc = a_registers ? nullptr
                 : a_m_major  ? wgmma_descriptor(a_base, a_row, K * a_row)
                              : wgmma_descriptor(a_base, a_row);
  std::vector<Step> steps;
  for (int64_t block = 0; block < M / 64; ++block)
    for (int64_t k = 0; k < K / KS; ++k) {
      Step st;
      st.b_desc = wgmma_descriptor_plus(b_desc, b_n_major ? k * 16 * b_row : k_step_offset(b_panel, N, k));
      if (a_registers) {
        for (int p = 0; p < 4; ++p) {
          size_t r = static_cast<size_t>(block * K / 2 + k * 8 + 2 * p);
          st.fragment[p] = pack_pair(o[0]->type.dtype, a_regs.v[r], a_regs.v[r + 1]);
        }
      } else {
        st.a_desc = wgmma_descriptor_plus(a_desc, a_m_major ? block * K * a_row + k * 16 * a_row
                                                             : block * 64 * a_row + k_step_offset(a_panel, M, k));
      }
      steps.push_back(st);
    }
  // An accumulator of zeros is wgmma's scale-d = 0 on the first step: no registers to zero.
  auto* zero = llvm::dyn_cast_or_null<llvm::ConstantFP>(acc.uniform ? acc.v[0] : nullptr);
  bool from_zero = zero && zero->isZero();
  ptx_.wgmma_fence();
  Regs out = empty_regs(Layout::Acc, n->type.shape);
  for (int64_t block = 0; block < M / 64; ++block) {
    std::vector<Value*> d(acc.v.begin() + block * N / 2, acc.v.begin() + (block + 1) * N / 2);
    std::vector<PtxInstructions::WgmmaStep> chain;  // one asm statement for the block's K steps
    for (int64_t k = 0; k < K / KS; ++k) {
      const Step& st = steps[static_cast<size_t>(block * (K / KS) + k)];
      std::vector<Value*> a = a_registers ? std::vector<Value*>(st.fragment.begin(), st.fragment.end())
                                          : std::vector<Value*>{st.a_desc};
      chain.push_back({std::move(a), st.b_desc, k > 0 || !from_zero});
    }
    d = ptx_.wgmma(types, static_cast<int>(N), chain, d, a_m_major, b_n_major);
    out.v.insert(out.v.end(), d.begin(), d.end());
  }
  ptx_.wgmma_commit_group();
  regs_[n.get()] = std::move(out);
}

}  // namespace weft::codegen::nvptx::detail
