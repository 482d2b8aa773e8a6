// async_load on NVPTX: one thread's chunk of a tile copied from global into shared memory with cp.async
// (lower_nvptx_shared.cpp computes the addresses; the instructions come from ptx_instructions.cpp).
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <vector>

#include "codegen/nvptx/ptx_instructions.h"

namespace weft::codegen::nvptx {

// `src.size()` consecutive elements of the blocked layout (a power of two), as one thread copies them.
struct AsyncCopyChunk {
  int64_t elem_bytes = 4;
  llvm::Type* memory_type = nullptr;   // of one element, as memory holds it
  std::vector<llvm::Value*> src;       // global pointers, one per element
  std::vector<llvm::Value*> dst;       // shared pointers (address space 3), one per element
  std::vector<llvm::Value*> masks;     // i1 per element; empty: unmasked
  bool one_mask = false;               // masks[0] is proven to hold for the whole chunk
  bool consecutive = false;            // src is proven consecutive (its alignment perhaps not)
  bool proven = false;                 // src is proven consecutive and aligned to the copy size
  std::vector<llvm::Value*> fill;      // memory-type values of masked-off elements; empty: zeros
  int evict = 0;                       // weft::Evict: an L2 policy on each cp.async (0: none)
};

// Copies the chunk as pieces of up to 16 bytes (cp.async.cg for 16, .ca for 4 or 8) when its sources are
// consecutive and aligned (proven, else checked at run time) and its masks are all set or proven equal;
// otherwise element by element: cp.async of 4 or 8 bytes, or, for 1- and 2-byte elements (cp.async moves
// at least 4), a plain load and st.shared. A masked-off element reads nothing: cp.async's src-size of 0
// zero-fills it, or, with fill values, it is stored directly. The destinations of a piece must be
// consecutive (the buffer layouts keep 16-byte units whole).
void emit_async_copy(llvm::IRBuilder<>& b, PtxInstructions& ptx, const AsyncCopyChunk& chunk);

}  // namespace weft::codegen::nvptx
