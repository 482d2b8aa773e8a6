// Pass: the byte layout of each shared-memory buffer — which swizzle its stages use.
//
// A 2-D buffer whose stages are viewed by columns (cols(), e.g. filled by TMA boxes narrower than a row)
// keeps its columns in panels: element (r, c) of an [R, C] stage with panels of P columns is at element
// (c / P) * R * P + r * P + c % P; a wgmma B operand stored K x N (N contiguous), or A operand stored K x M
// (read through local_trans), is paneled by the swizzle width. A buffer that TMA fills or drains takes its descriptor's swizzle (the copy engine writes that layout);
// a buffer that wgmma reads needs the swizzle its row width allows (rows of 128, 64 or 32 bytes, swizzled
// as wide). Other buffers are plain row-major. Two uses that want different layouts are an error that
// names both lines. Within each 1024-byte-aligned group of 8 rows (of 128 bytes for a 128-byte swizzle),
// the swizzle XORs the 16-byte chunk index with the row index: physical = logical ^ ((logical >> 7) &
// mask) << 4, mask 7, 3 or 1 for 128-, 64- and 32-byte swizzles (the layouts of the PTX ISA's TMA and
// wgmma sections).
#pragma once

#include <cstdint>
#include <unordered_map>

#include "ir/node.h"

namespace weft::passes {

struct SharedLayouts {
  std::unordered_map<const ir::Node*, int> swizzle;      // LocalAlloc -> swizzle bytes (0, 32, 64, 128)
  std::unordered_map<const ir::Node*, int64_t> panels;   // LocalAlloc -> columns per panel (absent: none)

  int of(const ir::Node* alloc) const {
    auto it = swizzle.find(alloc);
    return it == swizzle.end() ? 0 : it->second;
  }
  int64_t panel_of(const ir::Node* alloc) const {
    auto it = panels.find(alloc);
    return it == panels.end() ? 0 : it->second;
  }
};

// The LocalAlloc a view (LocalView, LocalTrans) comes from.
const ir::Node* root_allocation(const ir::Node* view);

SharedLayouts assign_shared_layouts(const ir::Function& f);

// Where element (r, c) of an [R, C] stage is stored (in elements), with panels of P columns (0: none).
inline int64_t paneled_index(int64_t r, int64_t c, int64_t R, int64_t C, int64_t P) {
  if (P == 0 || P == C) return r * C + c;
  return (c / P) * R * P + r * P + c % P;
}

// The byte offset within a stage where the swizzle puts logical byte `offset`.
inline int64_t swizzled(int64_t offset, int swizzle_bytes) {
  if (swizzle_bytes == 0) return offset;
  int64_t mask = swizzle_bytes / 16 - 1;
  return offset ^ (((offset >> 7) & mask) << 4);
}

}  // namespace weft::passes
