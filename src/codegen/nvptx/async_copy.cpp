#include "codegen/nvptx/async_copy.h"

#include <algorithm>

#include "codegen/llvm_builders.h"

namespace weft::codegen::nvptx {
namespace {

using llvm::Value;

constexpr int64_t kMaxCopyBytes = 16;  // the widest cp.async
constexpr int64_t kMinCopyBytes = 4;   // the narrowest

class ChunkCopy {
 public:
  ChunkCopy(llvm::IRBuilder<>& b, PtxInstructions& ptx, const AsyncCopyChunk& c)
      : b_(b), ptx_(ptx), c_(c), width_(static_cast<int64_t>(c.src.size())), eb_(c.elem_bytes) {}

  void run() {
    if (width_ == 1 || width_ * eb_ < kMinCopyBytes) return by_element();
    // A mask proven equal over the chunk goes into each copy's src-size; per-element masks must all be set.
    Value* shared_mask = c_.one_mask && !c_.masks.empty() ? c_.masks[0] : nullptr;
    Value* ok = c_.proven ? nullptr : consecutive_and_aligned();
    if (!c_.masks.empty() && !c_.one_mask)
      for (Value* m : c_.masks) ok = ok ? b_.CreateAnd(ok, m) : m;
    if (!ok) return whole(shared_mask);
    emit_if(b_, ok, [&] { whole(shared_mask); }, [&] { by_element(); });
  }

 private:
  Value* i32c(int64_t v) { return b_.getInt32(static_cast<uint32_t>(v)); }
  int64_t piece_elems() const { return std::min(width_, kMaxCopyBytes / eb_); }

  Value* consecutive_and_aligned() {
    Value* first = b_.CreatePtrToInt(c_.src[0], b_.getInt64Ty());
    Value* ok = b_.CreateICmpEQ(b_.CreateAnd(first, b_.getInt64(piece_elems() * eb_ - 1)), b_.getInt64(0));
    for (int64_t j = 1; j < width_ && !c_.consecutive; ++j) {
      Value* gap = b_.CreateSub(b_.CreatePtrToInt(c_.src[j], b_.getInt64Ty()), first);
      ok = b_.CreateAnd(ok, b_.CreateICmpEQ(gap, b_.getInt64(j * eb_)));
    }
    return ok;
  }

  Value* fill(int64_t j) { return c_.fill.empty() ? llvm::Constant::getNullValue(c_.memory_type) : c_.fill[j]; }

  // cp.async of elements [j, j + count) (4, 8 or 16 bytes); where `mask` (null: always) is false, nothing
  // is read and the elements become the fill values.
  void copy(int64_t j, int64_t count, Value* mask) {
    int bytes = static_cast<int>(count * eb_);
    Value* dst = b_.CreatePtrToInt(c_.dst[j], b_.getInt32Ty());
    Value* src = b_.CreatePtrToInt(c_.src[j], b_.getInt64Ty());
    Value* policy = c_.evict ? ptx_.l2_eviction_policy(c_.evict) : nullptr;  // pure: LLVM shares one per chunk
    if (!mask) return ptx_.cp_async(dst, src, bytes, i32c(bytes), policy);
    if (c_.fill.empty()) return ptx_.cp_async(dst, src, bytes, b_.CreateSelect(mask, i32c(bytes), i32c(0)), policy);
    emit_if(b_, mask, [&] { ptx_.cp_async(dst, src, bytes, i32c(bytes), policy); }, [&] {
      for (int64_t e = 0; e < count; ++e) b_.CreateStore(c_.fill[j + e], c_.dst[j + e]);
    });
  }

  // A 1- or 2-byte element, synchronously.
  void copy_now(int64_t j, Value* mask) {
    auto read = [&] { b_.CreateStore(b_.CreateLoad(c_.memory_type, c_.src[j]), c_.dst[j]); };
    if (!mask) return read();
    emit_if(b_, mask, read, [&] { b_.CreateStore(fill(j), c_.dst[j]); });
  }

  void whole(Value* mask) {
    for (int64_t j = 0; j < width_; j += piece_elems()) copy(j, piece_elems(), mask);
  }

  void by_element() {
    for (int64_t j = 0; j < width_; ++j) {
      Value* mask = c_.masks.empty() ? nullptr : c_.masks[j];
      if (eb_ >= kMinCopyBytes)
        copy(j, 1, mask);
      else
        copy_now(j, mask);
    }
  }

  llvm::IRBuilder<>& b_;
  PtxInstructions& ptx_;
  const AsyncCopyChunk& c_;
  int64_t width_, eb_;
};

}  // namespace

void emit_async_copy(llvm::IRBuilder<>& b, PtxInstructions& ptx, const AsyncCopyChunk& chunk) {
  ChunkCopy(b, ptx, chunk).run();
}

}  // namespace weft::codegen::nvptx
