// What a TensorDesc parameter's 64-bit slot points at on the CPU backend: the tensor as the TMA unit sees
// it, for the CPU runtime's TMA copies (async_descriptor_load/store). Built once by weft::tma (it lives in
// the Tma's descriptor, so the Tma must outlive the launch: CPU launches are synchronous).
//
// Semantics the CPU runtime implements, as on the GPU: a copy at coordinates c (outermost first, signed
// 32-bit, possibly negative) moves the box's elements c + i, 0 <= i < box; an element with any coordinate
// outside [0, dims) reads as zero (a load) or is not written (a store). Element (x0, ..., x{rank-1}) lives at
//   base + (x0 * strides[0] + ... + x{rank-1} * strides[rank-1]) * element_bytes.
// Shared memory holds the box row-major. The CPU runtime may ignore `swizzle` (the kernel addresses shared
// memory through the IR, never by swizzled offsets); it is here so that the struct describes the whole
// descriptor.
//
// Plain data of fixed layout (checked below), so JIT-compiled code may read it directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/dtype.h"

namespace weft::detail {

struct TensorDescData {
  static constexpr int kMaxRank = 5;
  void* base = nullptr;          // the address of element (0, ..., 0)
  int64_t dims[kMaxRank] = {};     // elements per dimension, outermost first
  int64_t strides[kMaxRank] = {};  // elements between neighbours, outermost first; strides[rank - 1] == 1
  int32_t box[kMaxRank] = {};      // the box one copy moves, outermost first (the kernel's TensorDesc box)
  int32_t rank = 0;              // 1 to 5; entries past rank are 0
  int32_t element_bytes = 0;     // 1, 2, 4 or 8
  int32_t swizzle = 0;           // bytes: 0, 32, 64 or 128 (the GPU's shared-memory layout of the box)
  ScalarType dtype = ScalarType::f32;
};

static_assert(offsetof(TensorDescData, dims) == 8 && offsetof(TensorDescData, strides) == 48 &&
                  offsetof(TensorDescData, box) == 88 && offsetof(TensorDescData, rank) == 108 &&
                  offsetof(TensorDescData, element_bytes) == 112 && offsetof(TensorDescData, swizzle) == 116 &&
                  offsetof(TensorDescData, dtype) == 120,
              "TensorDescData's layout is read by JIT-compiled code: change both together");

}  // namespace weft::detail
