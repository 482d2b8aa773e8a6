// weft — TMA descriptors on the host: `weft::tma` describes a tensor in a Buffer for a kernel's
// `TensorDesc<T>` parameter (async.h).
//
//   Buffer<bf16> a = dev.alloc<bf16>(M * K);
//   gemm.launch(grid, tma(a, {M, K}, {128, 64}), ...);             // row-major [M, K], boxes of 128 x 64
//   tma(a, {M, K}, {128, 32}, {.swizzle = 64});                     // an explicit swizzle (bytes)
//   tma(a, {M, 64}, {128, 64}, {.strides = {K, 1}, .offset = 64});  // columns 64..127 of a: a strided view
//
// Every rule of the hardware (those cuTensorMapEncodeTiled enforces) is checked here, on every backend,
// so that a descriptor the CPU backend accepts is one the GPU accepts too. A broken rule is a weft::Error
// at the line of the tma() call naming the rule, the offending value and what to change, and listing every
// field of the descriptor.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/runtime.h"
#include "weft/tile.h"

namespace weft {

struct TmaOptions {
  // Elements between neighbours along each dimension, outermost first; empty: row-major in `shape`. The
  // innermost must be 1 (TMA reads rows of consecutive elements); the others, in bytes, multiples of 16.
  std::vector<int64_t> strides = {};
  // How a box is laid out in shared memory: 0 (none), 32, 64 or 128 bytes. -1 picks 128, 64 or 32 when the
  // box's inner dimension is exactly that many bytes (the layout wgmma wants), else 0.
  int swizzle = -1;
  // Elements from the start of the buffer to the tensor's element (0, ..., 0).
  int64_t offset = 0;
};

namespace detail {

// A checked descriptor, shared by the copies of a Tma: its fields, what each backend's launches pass
// (defined in src/driver/tma_descriptor.h, out of the public headers).
struct TmaDescriptor;

// The fields of a descriptor once checked, outermost dimension first.
struct TmaFields {
  DType dtype{};
  Shape shape;                   // elements per dimension
  std::vector<int64_t> strides;  // elements; the innermost is 1
  Shape box;                     // the tile one copy moves
  int swizzle = 0;               // bytes: 0, 32, 64 or 128
  int64_t offset = 0;            // elements from the buffer's start
};

// Checks the rules and builds the descriptor of the tensor at `buffer_address` (+ options.offset) in a
// buffer of `buffer_bytes` on `backend`. Throws weft::Error located at `loc`.
std::shared_ptr<const TmaDescriptor> make_tma_descriptor(Backend* backend, void* buffer_address, size_t buffer_bytes,
                                                         DType dtype, Shape shape, Shape box, const TmaOptions& options,
                                                         SourceLoc loc);
const TmaFields& tma_fields(const TmaDescriptor&);

}  // namespace detail

// A TMA descriptor of a tensor of T in a Buffer: pass it at launch for a TensorDesc<T> parameter. Copies
// are cheap and share one descriptor (and, on the GPU, one encoded CUtensorMap). It keeps its buffer alive.
template <class T> class Tma {
 public:
  // Made by weft::tma.
  Tma(Buffer<T> buffer, std::shared_ptr<const detail::TmaDescriptor> descriptor)
      : buffer_(std::move(buffer)), descriptor_(std::move(descriptor)) {}

  const Shape& shape() const { return fields().shape; }
  const std::vector<int64_t>& strides() const { return fields().strides; }  // elements, outermost first
  const Shape& box() const { return fields().box; }
  int swizzle() const { return fields().swizzle; }  // bytes
  int rank() const { return static_cast<int>(fields().shape.size()); }
  const Buffer<T>& buffer() const { return buffer_; }
  const detail::TmaDescriptor& descriptor() const { return *descriptor_; }

 private:
  const detail::TmaFields& fields() const { return detail::tma_fields(*descriptor_); }
  Buffer<T> buffer_;
  std::shared_ptr<const detail::TmaDescriptor> descriptor_;
};

// The descriptor of a tensor of `shape` (outermost first, row-major unless options.strides says
// otherwise) in `buffer`, copied in boxes of `box` elements. Out-of-bounds elements of a box read as zero
// and are not written. Throws weft::Error, at the caller's line, for a descriptor the hardware rejects.
template <class T>
Tma<T> tma(const Buffer<T>& buffer, Shape shape, Shape box, TmaOptions options = {},
           SourceLoc loc = SourceLoc::current()) {
  return Tma<T>(buffer, detail::make_tma_descriptor(buffer.backend(), buffer.data(), buffer.bytes(), dtype_of<T>,
                                                    std::move(shape), std::move(box), options, loc));
}

}  // namespace weft
