// IR -> per-thread LLVM IR for NVPTX.
//
// Layout: a program instance is one block of T = 32 * num_warps threads. A tile of N elements (N and T
// powers of two) is spread over the threads in a blocked layout: thread t holds R = max(1, N / T)
// registers in chunks of V = clamp(N / T, 1, 8) consecutive elements; register r = c * V + j is flat
// element ((c * T + t) * V + j) mod N. A warp's chunk c is one contiguous run of memory when the tile is
// (16-byte accesses per thread), and when N < T threads hold copies. Every tile
// with the same element count has the same layout, so elementwise ops and reshapes need no data
// movement; broadcasts, permutes, reductions and dot exchange data through shared memory. Rank-0 values
// are uniform: every thread holds the same value, so control flow on them never diverges.
#include "codegen/nvptx/lower_nvptx.h"

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include <functional>
#include <unordered_map>

#include "codegen/element_ops.h"
#include "codegen/llvm_builders.h"
#include "codegen/nvptx/mma_tiles.h"
#include "codegen/nvptx/ptx_instructions.h"
#include "passes/access_patterns.h"

namespace weft::codegen::nvptx {
namespace {

using ir::NodeRef;
using ir::Op;
using llvm::Value;

constexpr unsigned kGlobal = 1;
constexpr unsigned kShared = 3;
constexpr int64_t kMaxSharedBytes = 227 * 1024;  // per block on sm_90
constexpr int64_t kMaxVector = 8;                // consecutive elements per thread in the blocked layout
constexpr int64_t kMaxAccessBytes = 16;          // the widest global load/store of one thread

struct Regs {
  std::vector<Value*> v;  // see the layout above
};

std::vector<int64_t> strides(const ir::Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

class Lowering {
 public:
  Lowering(const ir::Function& f, llvm::LLVMContext& c, int threads, const std::string& symbol)
      : f_(f), c_(c), b_(c), ops_(b_, MathTarget::Nvptx, kGlobal), ptx_(b_), patterns_(f), threads_(threads) {
    mod_ = std::make_unique<llvm::Module>(symbol, c);
    std::vector<llvm::Type*> params(f.params.size(), b_.getInt64Ty());
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    fn_ = llvm::Function::Create(type, llvm::Function::ExternalLinkage, symbol, *mod_);
    fn_->setCallingConv(llvm::CallingConv::PTX_Kernel);
    fn_->addFnAttr("nvvm.maxntid", std::to_string(threads));
    fn_->addFnAttr(llvm::Attribute::NoUnwind);
    smem_ = new llvm::GlobalVariable(*mod_, llvm::ArrayType::get(b_.getInt8Ty(), 0), false,
                                     llvm::GlobalValue::ExternalLinkage, nullptr, "weft_shared", nullptr,
                                     llvm::GlobalValue::NotThreadLocal, kShared);
    smem_->setAlignment(llvm::Align(16));
    entry_ = llvm::BasicBlock::Create(c, "entry", fn_);
    b_.SetInsertPoint(entry_);
    tid_ = ptx_.thread_index();
  }

  LoweredKernel run() {
    for (size_t i = 0; i < f_.params.size(); ++i)
      regs_[f_.params[i].get()] = {{ops_.from_slot(f_.params[i]->type.dtype, fn_->getArg(i))}};
    region(f_.body);
    b_.CreateRetVoid();
    std::string problems;
    llvm::raw_string_ostream os(problems);
    if (llvm::verifyModule(*mod_, &os))
      throw InternalError(fmt::format("NVPTX lowering of kernel '{}' produced invalid LLVM IR: {}", f_.name, problems));
    LoweredKernel out;
    out.symbol = fn_->getName().str();
    out.module = std::move(mod_);
    out.shared_bytes = shared_bytes_;
    return out;
  }

 private:
  // ---- layout ------------------------------------------------------------------------------------------

  int64_t per_thread(int64_t n) const { return std::max<int64_t>(1, n / threads_); }
  int64_t vector_width(int64_t n) const { return std::clamp<int64_t>(n / threads_, 1, kMaxVector); }
  Value* i32c(int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); }
  // Flat element index of register r of this thread, in a tile of n elements.
  Value* flat_index(int64_t n, int64_t r) {
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
  Value* same_value_reg(const NodeRef& x, size_t r) {
    const std::vector<Value*>& v = regs(x).v;
    int64_t k = std::min(patterns_.of(x.get()).constancy, vector_width(x->type.numel()));
    if (k <= 1 || x->type.numel() < threads_ * vector_width(x->type.numel())) return v[r];
    return v[r - r % static_cast<size_t>(k)];
  }
  Regs splat(Value* v, int64_t n) { return {std::vector<Value*>(per_thread(n), v)}; }
  const Regs& regs(const NodeRef& n) { return regs_.at(n.get()); }

  // ---- shared memory -----------------------------------------------------------------------------------

  llvm::Type* shared_type(DType d) {  // pointers travel as integers
    return d.pointer ? b_.getInt64Ty() : ops_.compute_type(d)->isIntegerTy(1) ? b_.getInt8Ty() : ops_.compute_type(d);
  }
  Value* to_shared(DType d, Value* v) {
    if (d.pointer) return b_.CreatePtrToInt(v, b_.getInt64Ty());
    return v->getType()->isIntegerTy(1) ? b_.CreateZExt(v, b_.getInt8Ty()) : v;
  }
  Value* from_shared(DType d, Value* v) {
    if (d.pointer) return b_.CreateIntToPtr(v, ops_.compute_type(d));
    return d.is_bool() ? b_.CreateICmpNE(v, b_.getInt8(0)) : v;
  }
  // Address of element `index` (i32) of an array of `t` starting `byte_offset` into shared memory.
  Value* shared_at(llvm::Type* t, int64_t byte_offset, Value* index) {
    Value* base = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), smem_, byte_offset);
    return b_.CreateInBoundsGEP(t, base, b_.CreateZExt(index, b_.getInt64Ty()));
  }
  int64_t reserve_shared(int64_t bytes, SourceLoc loc) {
    shared_bytes_ = std::max(shared_bytes_, bytes);
    if (shared_bytes_ > kMaxSharedBytes)
      throw Error(fmt::format("this operation needs {} bytes of shared memory to exchange data between threads, more "
                              "than the {} a block can have; use smaller tiles",
                              bytes, kMaxSharedBytes),
                  loc);
    return bytes;
  }
  // Shared memory from offset 0 for an operation that writes it first: threads still reading the partials
  // of the last whole-block reduction (which ends without a barrier) must be done.
  void claim_shared(int64_t bytes, SourceLoc loc) {
    settle_shared();
    reserve_shared(bytes, loc);
  }
  void settle_shared() {
    if (!partials_unsettled_) return;
    ptx_.barrier();
    partials_unsettled_ = false;
  }
  // Writes a tile's elements to shared memory (as `t`) starting at `byte_offset`.
  void stage(const Regs& src, DType d, int64_t n, int64_t byte_offset) {
    llvm::Type* t = shared_type(d);
    for (size_t r = 0; r < src.v.size(); ++r)
      b_.CreateStore(to_shared(d, src.v[r]), shared_at(t, byte_offset, flat_index(n, r)));
  }

  // Moves a tile into another layout: dst element i takes src element source_of(i).
  Regs exchange(const Regs& src, DType d, int64_t n_src, int64_t n_dst, const std::function<Value*(Value*)>& source_of,
                SourceLoc loc) {
    llvm::Type* t = shared_type(d);
    claim_shared(n_src * static_cast<int64_t>(mod_->getDataLayout().getTypeAllocSize(t)), loc);
    stage(src, d, n_src, 0);
    ptx_.barrier();
    Regs out;
    for (int64_t r = 0; r < per_thread(n_dst); ++r)
      out.v.push_back(from_shared(d, b_.CreateLoad(t, shared_at(t, 0, source_of(flat_index(n_dst, r))))));
    ptx_.barrier();
    return out;
  }

  // ---- nodes -------------------------------------------------------------------------------------------

  void region(const ir::Region& r) {
    for (const NodeRef& n : r.body) node(n);
  }

  void elementwise(const NodeRef& n, const std::function<Value*(size_t r)>& element) {
    Regs out;
    for (int64_t r = 0; r < per_thread(n->type.numel()); ++r) out.v.push_back(ops_.round(n->type.dtype, element(r)));
    regs_[n.get()] = std::move(out);
  }

  void node(const NodeRef& n) {
    DType d = n->type.dtype;
    const auto& o = n->operands;
    auto at = [&](size_t i, size_t r) { return same_value_reg(o[i], r); };
    switch (ir::op_category(n->op)) {
      case ir::OpCategory::Unary:
        return elementwise(n, [&](size_t r) { return ops_.unary(n->op, d, at(0, r)); });
      case ir::OpCategory::Binary:
        return elementwise(n, [&](size_t r) { return ops_.binary(n->op, d, at(0, r), at(1, r)); });
      case ir::OpCategory::Compare:
        return elementwise(n, [&](size_t r) { return ops_.compare(n->op, o[0]->type.dtype, at(0, r), at(1, r)); });
      default: break;
    }
    switch (n->op) {
      case Op::ProgramId: regs_[n.get()] = {{ptx_.block_index(n->axis())}}; return;
      case Op::NumPrograms: regs_[n.get()] = {{ptx_.grid_size(n->axis())}}; return;
      case Op::Constant: regs_[n.get()] = splat(ops_.constant(d, n->attrs.number), n->type.numel()); return;
      case Op::Arange: {
        int64_t start = n->attrs.ints[0];
        return elementwise(n, [&](size_t r) { return b_.CreateAdd(flat_index(n->type.numel(), r), i32c(start)); });
      }
      case Op::Fma: return elementwise(n, [&](size_t r) { return ops_.fma(at(0, r), at(1, r), at(2, r)); });
      case Op::Select: return elementwise(n, [&](size_t r) { return b_.CreateSelect(at(0, r), at(1, r), at(2, r)); });
      case Op::Cast: return elementwise(n, [&](size_t r) { return ops_.cast(o[0]->type.dtype, d, at(0, r)); });
      case Op::PtrAdd: {
        llvm::Type* pointee = ops_.memory_type(DType{d.scalar, false});
        return elementwise(
            n, [&](size_t r) { return b_.CreateGEP(pointee, at(0, r), b_.CreateSExt(at(1, r), b_.getInt64Ty())); });
      }
      case Op::Reshape: regs_[n.get()] = regs(o[0]); return;  // same element count, same layout
      case Op::Broadcast: return broadcast(n);
      case Op::Permute: return permute(n);
      case Op::Load: return load(n);
      case Op::Store: return store(n);
      case Op::ReduceSum:
      case Op::ReduceMax:
      case Op::ReduceMin:
      case Op::ArgMax:
      case Op::ArgMin: return reduce(n);
      case Op::Dot: return dot(n);
      case Op::For: return for_loop(n);
      case Op::If: return if_else(n);
      case Op::VarDecl: {
        std::vector<Value*> slots;
        llvm::IRBuilder<> eb(entry_, entry_->begin());
        for (Value* v : regs(o[0]).v) {
          slots.push_back(eb.CreateAlloca(v->getType()));
          b_.CreateStore(v, slots.back());
        }
        vars_[n.get()] = std::move(slots);
        return;
      }
      case Op::VarGet: {
        Regs out;
        for (Value* slot : vars_.at(o[0].get())) out.v.push_back(b_.CreateLoad(ops_.compute_type(d), slot));
        regs_[n.get()] = std::move(out);
        return;
      }
      case Op::VarSet: {
        const std::vector<Value*>& slots = vars_.at(o[0].get());
        for (size_t r = 0; r < slots.size(); ++r) b_.CreateStore(at(1, r), slots[r]);
        return;
      }
      default: break;
    }
    throw InternalError(fmt::format("NVPTX lowering: no rule for op '{}'", ir::op_name(n->op)));
  }

  void broadcast(const NodeRef& n) {
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

  void permute(const NodeRef& n) {
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

  // Runs `body` only where `cond` holds; returns the phi of its value and `otherwise`.
  Value* guarded(Value* cond, const std::function<Value*()>& body, Value* otherwise) {
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

  // One chunk of V registers accesses memory as whole 16-byte pieces when its pointers are consecutive,
  // the first is aligned and every mask is set; otherwise element by element. What the access-pattern
  // analysis proves (pointers from arange and 16-byte-aligned arguments) is not checked again at run time;
  // the rest is.
  struct Chunk {
    std::vector<Value*> ptrs;
    std::vector<Value*> masks;  // empty: unmasked
    bool one_mask = false;      // proven equal over the chunk (`cols < n`, n a multiple of it): masks[0] says all
  };
  int64_t piece_elems(DType d) { return std::max<int64_t>(1, kMaxAccessBytes / d.bytes()); }
  bool chunks_proven(const NodeRef& ptrs, DType d, int64_t width) {
    passes::AccessPattern p = patterns_.of(ptrs.get());
    int64_t align = std::min(width, piece_elems(d)) * d.bytes();
    return p.contiguity >= width && p.divisor % align == 0;
  }
  Value* whole_chunk_ok(const Chunk& c, DType d, bool proven) {
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
    for (int64_t j = 1; j < width; ++j) {
      Value* gap = b_.CreateSub(b_.CreatePtrToInt(c.ptrs[j], b_.getInt64Ty()), first);
      ok = b_.CreateAnd(ok, b_.CreateICmpEQ(gap, b_.getInt64(j * d.bytes())));
    }
    return ok;
  }
  // Element p of chunk `c` as a run of `width` consecutive pieces: calls f(piece pointer, piece type, first j).
  void for_each_piece(const Chunk& c, DType d, const std::function<void(Value*, llvm::FixedVectorType*, int64_t)>& f) {
    int64_t width = static_cast<int64_t>(c.ptrs.size()), per = std::min(width, piece_elems(d));
    auto* piece = llvm::FixedVectorType::get(ops_.memory_type(d), static_cast<unsigned>(per));
    for (int64_t j = 0; j < width; j += per) f(c.ptrs[j], piece, j);
  }
  Chunk chunk_of(const std::vector<NodeRef>& o, size_t mask_operand, int64_t first, int64_t width) {
    Chunk c;
    // A chunk is `width` consecutive flat elements starting at a multiple of `width`: the analysis's runs.
    c.one_mask = o.size() > mask_operand && patterns_.of(o[mask_operand].get()).constancy >= width;
    for (int64_t j = 0; j < width; ++j) {
      c.ptrs.push_back(regs(o[0]).v[first + j]);
      if (o.size() > mask_operand) c.masks.push_back(regs(o[mask_operand]).v[first + j]);
    }
    return c;
  }

  void load(const NodeRef& n) {
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
      if (width == 1)
        element_wise(vals);
      else if (proven && c.masks.empty())
        whole(vals);
      else if (proven && c.one_mask)  // all or nothing: no element-wise fallback
        vals = branch_values(c.masks[0], width, whole, [&](std::vector<Value*>& none) {
          for (int64_t j = 0; j < width; ++j) none.push_back(otherwise(j));
        });
      else
        vals = branch_values(whole_chunk_ok(c, d, proven), width, whole, element_wise);
      for (Value* v : vals) out.v.push_back(v);
    }
    regs_[n.get()] = std::move(out);
  }

  void store(const NodeRef& n) {
    const auto& o = n->operands;
    DType d = o[1]->type.dtype;
    int64_t width = vector_width(o[0]->type.numel());
    for (int64_t first = 0; first < per_thread(o[0]->type.numel()); first += width) {
      Chunk c = chunk_of(o, 2, first, width);
      auto value = [&](int64_t j) { return ops_.to_memory(d, regs(o[1]).v[first + j]); };
      auto element_wise = [&] {
        for (int64_t j = 0; j < width; ++j) {
          auto write = [&]() -> Value* {
            b_.CreateStore(value(j), c.ptrs[j]);
            return nullptr;
          };
          if (c.masks.empty())
            write();
          else
            guarded(c.masks[j], write, nullptr);
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

  // if (cond) fast(values) else slow(values); returns the `count` values merged by phis.
  std::vector<Value*> branch_values(Value* cond, int64_t count, const std::function<void(std::vector<Value*>&)>& fast,
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

  // ---- reductions --------------------------------------------------------------------------------------

  struct Partial {
    Value* value;
    Value* index;  // argmax/argmin only
  };

  Partial combine(Op op, DType d, Partial a, Partial b) {
    switch (op) {
      case Op::ReduceSum: return {ops_.binary(Op::Add, d, a.value, b.value), nullptr};
      case Op::ReduceMax: return {ops_.binary(Op::Max, d, a.value, b.value), nullptr};
      case Op::ReduceMin: return {ops_.binary(Op::Min, d, a.value, b.value), nullptr};
      default: {  // the extreme value, the first index on ties
        Value* strictly = ops_.compare(op == Op::ArgMax ? Op::Gt : Op::Lt, d, b.value, a.value);
        Value* tie = b_.CreateAnd(ops_.compare(Op::Eq, d, b.value, a.value), b_.CreateICmpSLT(b.index, a.index));
        Value* take_b = b_.CreateOr(strictly, tie);
        return {b_.CreateSelect(take_b, b.value, a.value), b_.CreateSelect(take_b, b.index, a.index)};
      }
    }
  }

  // A whole tile down to one value, when every element has a single owner (no copies): each thread
  // combines its own registers, each warp by shuffles, the warps through shared memory — no staging.
  void reduce_to_scalar(const NodeRef& n) {
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

  bool reduces_to_scalar(const ir::Node& n) const {
    bool reduction = n.op == Op::ReduceSum || n.op == Op::ReduceMax || n.op == Op::ReduceMin || n.op == Op::ArgMax ||
                     n.op == Op::ArgMin;
    return reduction && n.type.shape.empty() && n.operands[0]->type.numel() >= threads_;
  }
  bool has_block_reduction(const ir::Region& r) const {
    for (const NodeRef& n : r.body) {
      if (reduces_to_scalar(*n) && threads_ > 32) return true;
      for (const ir::Region& inner : n->regions)
        if (has_block_reduction(inner)) return true;
    }
    return false;
  }

  void reduce(const NodeRef& n) {
    const NodeRef& x = n->operands[0];
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
    ptx_.barrier();

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
    ptx_.barrier();

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
      ptx_.barrier();
      out.v[0] = from_shared(rd, b_.CreateLoad(st, shared_at(st, 0, flat_index(outputs, 0))));
      ptx_.barrier();
    }
    regs_[n.get()] = std::move(out);
  }

  // The per-warp partials of a whole-block reduction, combined with one barrier: every lane writes its
  // warp's partial (one value to one address: no branch), every thread reads them all. Two scratch
  // buffers take turns, so the next such reduction may write while slow threads still read this one
  // (its barrier then settles those reads); any other use of shared memory settles them first. The turn
  // is a run-time value (constant-folded outside loops), so a loop with one reduction per iteration
  // alternates too: unsettled reads are always on the buffer the turn does not point at.
  Partial combine_block_warps(Op op, DType d, Partial p, SourceLoc loc) {
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
    Value* values = b_.CreateInBoundsGEP(b_.getInt8Ty(), smem_, b_.CreateZExt(b_.CreateMul(turn, i32c(2 * slot)), b_.getInt64Ty()));
    Value* indices = b_.CreateConstInBoundsGEP1_64(b_.getInt8Ty(), values, slot);
    Value* warp = b_.CreateLShr(tid_, i32c(5));
    b_.CreateStore(p.value, b_.CreateInBoundsGEP(t, values, warp));
    if (p.index) b_.CreateStore(p.index, b_.CreateInBoundsGEP(i32, indices, warp));
    ptx_.barrier();
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
  Partial combine_warps(Op op, DType d, Partial p, int64_t group, int64_t at) {
    llvm::Type* t = ops_.compute_type(d);
    Value* warp = b_.CreateUDiv(tid_, i32c(32));
    int64_t values_at = at, indices_at = at + threads_ * 8;
    guarded(b_.CreateICmpEQ(b_.CreateURem(tid_, i32c(32)), i32c(0)), [&]() -> Value* {
      b_.CreateStore(p.value, shared_at(t, values_at, warp));
      if (p.index) b_.CreateStore(p.index, shared_at(b_.getInt32Ty(), indices_at, warp));
      return nullptr;
    }, nullptr);
    ptx_.barrier();
    int64_t warps = group / 32;
    Value* first = b_.CreateMul(b_.CreateUDiv(warp, i32c(warps)), i32c(warps));
    auto partial_of = [&](Value* w) -> Partial {
      return {b_.CreateLoad(t, shared_at(t, values_at, w)),
              p.index ? b_.CreateLoad(b_.getInt32Ty(), shared_at(b_.getInt32Ty(), indices_at, w)) : nullptr};
    };
    Partial r = partial_of(first);
    for (int64_t w = 1; w < warps; ++w) r = combine(op, d, r, partial_of(b_.CreateAdd(first, i32c(w))));
    ptx_.barrier();
    return r;
  }

  // ---- dot -------------------------------------------------------------------------------------------------

  void dot(const NodeRef& n) {
    const NodeRef& a = n->operands[0];
    const NodeRef& bm = n->operands[1];
    int64_t M = a->type.shape[0], K = a->type.shape[1], N = bm->type.shape[1];
    ScalarType s = a->type.dtype.scalar;
    if ((s == ScalarType::bf16 || s == ScalarType::f16) && M % 16 == 0 && N % 8 == 0 && K % 16 == 0)
      return dot_tensor_cores(n);
    dot_cuda_cores(n);
  }

  // Tensor cores: A and B staged in shared memory, each warp computes 16x8 tiles of C with mma.sync
  // m16n8k16 over K (mma_tiles.cpp), C goes back to the tile layout through shared memory. (The operands and the result
  // take a trip through shared memory because tiles keep one layout; Hopper's wgmma path keeps them put.)
  void dot_tensor_cores(const NodeRef& n) {
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
        b_.CreateStore(b_.CreateBitCast(ops_.to_memory(d, r.v[k]), i16), shared_at(i16, at, flat_index(x->type.numel(), k)));
    };
    stage_bits(a, 0);
    stage_bits(bm, b_at);
    bool has_acc = n->operands.size() == 3;
    if (has_acc) stage(regs(n->operands[2]), DType{ScalarType::f32, false}, M * N, c_at);
    ptx_.barrier();
    emit_mma_tiles(b_, ptx_, {smem_, entry_, tid_, threads_}, {M, N, K, 0, b_at, c_at, d.scalar == ScalarType::bf16, has_acc});
    ptx_.barrier();
    Regs out;
    for (int64_t r = 0; r < per_thread(M * N); ++r)
      out.v.push_back(b_.CreateLoad(f32, shared_at(f32, c_at, flat_index(M * N, r))));
    ptx_.barrier();
    regs_[n.get()] = std::move(out);
  }

  // CUDA cores: A and B staged in shared memory as f32, each thread computes its own elements of C.
  void dot_cuda_cores(const NodeRef& n) {
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
    ptx_.barrier();
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
    ptx_.barrier();
    Regs out;
    for (int64_t r = 0; r < outputs; ++r) out.v.push_back(b_.CreateLoad(f32, acc[r]));
    regs_[n.get()] = std::move(out);
  }

  // ---- control flow ------------------------------------------------------------------------------------

  // for (i = begin; i < end; i += step) body(i), on i32 values known to be uniform.
  void counted_loop(Value* begin, Value* end, Value* step, const std::function<void(Value*)>& body) {
    emit_loop(b_, begin, end, step, body);
  }

  // Whether reduction partials may be unread where control flow joins: wherever they may be on one path.
  void for_loop(const NodeRef& n) {
    auto bound = [&](size_t k) { return regs(n->operands[k]).v[0]; };
    bool before = partials_unsettled_, in_body = has_block_reduction(n->regions[0]);
    emit_for(b_, bound(0), bound(1), bound(2), [&](Value* i) {
      regs_[n->regions[0].args[0].get()] = {{i}};
      partials_unsettled_ = before || in_body;  // from before the loop or from the last iteration
      region(n->regions[0]);
    });
    partials_unsettled_ = partials_unsettled_ || before;  // the loop may not run
  }

  void if_else(const NodeRef& n) {
    bool before = partials_unsettled_, after_then = false;
    emit_if(b_, regs(n->operands[0]).v[0], [&] {
      region(n->regions[0]);
      after_then = partials_unsettled_;
      partials_unsettled_ = before;
    }, [&] {
      if (n->regions.size() > 1) region(n->regions[1]);
    });
    partials_unsettled_ = partials_unsettled_ || after_then;
  }

  const ir::Function& f_;
  llvm::LLVMContext& c_;
  llvm::IRBuilder<> b_;
  ElementOps ops_;
  PtxInstructions ptx_;
  passes::AccessPatterns patterns_;
  int64_t threads_;
  std::unique_ptr<llvm::Module> mod_;
  llvm::Function* fn_ = nullptr;
  llvm::BasicBlock* entry_ = nullptr;
  llvm::GlobalVariable* smem_ = nullptr;
  Value* tid_ = nullptr;
  int64_t shared_bytes_ = 0;
  Value* scratch_turn_ = nullptr;    // i32 slot: the buffer (0, 1) the next whole-block reduction writes
  bool partials_unsettled_ = false;  // threads may still read the last partials (no barrier since)
  std::unordered_map<const ir::Node*, Regs> regs_;
  std::unordered_map<const ir::Node*, std::vector<Value*>> vars_;
};

}  // namespace

LoweredKernel lower_to_nvptx(const ir::Function& f, llvm::LLVMContext& context, int threads, const std::string& symbol) {
  return Lowering(f, context, threads, symbol).run();
}

}  // namespace weft::codegen::nvptx
