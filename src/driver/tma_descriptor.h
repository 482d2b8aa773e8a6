// A checked TMA descriptor (weft::tma): its fields and what each backend passes for it at launch.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "driver/tensor_desc_data.h"
#include "weft/tma.h"

namespace weft::detail {

struct TmaDescriptor {
  TmaFields fields;
  Backend* backend = nullptr;  // where the buffer lives
  void* address = nullptr;     // element (0, ..., 0): the buffer's address + offset elements
  size_t buffer_bytes = 0;
  SourceLoc loc;               // the tma() call, for errors found later (encoding on the GPU)
  // What a kernel specializes on: element type, rank, box and swizzle, packed (see tma.cpp). Equal bits,
  // equal specialization; the launch fast path compares them like Const values.
  uint64_t specialization_bits = 0;

  // The CPU backend's slot points here.
  TensorDescData cpu;

  // The CUDA backend's CUtensorMap (128 bytes, 64-byte aligned), encoded at the first launch on a CUDA
  // device and then reused: a descriptor never changes. See driver/cuda/cuda_tensor_map.h.
  mutable std::once_flag cuda_encoded;
  alignas(64) mutable unsigned char cuda_map[128] = {};

  // Every field on its own line, for error messages.
  std::string describe() const;
};

// `fields` as an Error lists them (also used before they are all checked, so any values are allowed).
std::string describe_tma_fields(const TmaFields& fields, const void* buffer_address, size_t buffer_bytes,
                                const Backend* backend);

}  // namespace weft::detail
