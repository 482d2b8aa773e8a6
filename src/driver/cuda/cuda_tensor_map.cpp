#include "driver/cuda/cuda_tensor_map.h"

#include <fmt/format.h>

#include "driver/cuda/cuda_driver.h"

namespace weft::driver::cuda {
namespace {

CUtensorMapDataType data_type_of(DType d) {
  switch (d.scalar) {
    case ScalarType::i8:
    case ScalarType::f8e4m3:  // TMA copies bytes: 8-bit floats travel as UINT8
    case ScalarType::f8e5m2: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case ScalarType::i16: return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case ScalarType::i32: return CU_TENSOR_MAP_DATA_TYPE_INT32;
    case ScalarType::i64: return CU_TENSOR_MAP_DATA_TYPE_INT64;
    case ScalarType::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case ScalarType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case ScalarType::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    case ScalarType::f64: return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
    case ScalarType::i1: break;  // refused by weft::tma
  }
  throw InternalError(fmt::format("a TMA descriptor of {} reached the CUDA backend", d.str()));
}

CUtensorMapSwizzle swizzle_of(int bytes) {
  switch (bytes) {
    case 0: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  throw InternalError(fmt::format("a TMA descriptor with swizzle {} reached the CUDA backend", bytes));
}

template <class T> std::string list(const T* values, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", values[i]);
  return "{" + s + "}";
}

}  // namespace

TensorMapArguments tensor_map_arguments(const detail::TmaDescriptor& d) {
  const detail::TmaFields& f = d.fields;
  const int rank = static_cast<int>(f.shape.size());
  const int64_t e = f.dtype.bytes();
  TensorMapArguments a;
  a.data_type = data_type_of(f.dtype);
  a.rank = static_cast<cuuint32_t>(rank);
  a.global_address = d.address;
  a.swizzle = swizzle_of(f.swizzle);
  for (int i = 0; i < rank; ++i) {
    const int outer_first = rank - 1 - i;  // weft's index of the driver's dimension i
    a.global_dims[i] = static_cast<cuuint64_t>(f.shape[outer_first]);
    a.box_dims[i] = static_cast<cuuint32_t>(f.box[outer_first]);
    a.element_strides[i] = 1;
    if (i > 0) a.global_strides[i - 1] = static_cast<cuuint64_t>(f.strides[outer_first] * e);
  }
  return a;
}

std::string TensorMapArguments::str() const {
  return fmt::format("cuTensorMapEncodeTiled(data type {}, rank {}, address {}, dims {}, strides {} bytes, box {}, "
                     "element strides {}, interleave {}, swizzle {}, L2 promotion {}, OOB fill {}), innermost "
                     "dimension first",
                     static_cast<int>(data_type), rank, fmt::ptr(global_address), list(global_dims, rank),
                     list(global_strides, rank ? rank - 1 : 0), list(box_dims, rank), list(element_strides, rank),
                     static_cast<int>(interleave), static_cast<int>(swizzle), static_cast<int>(l2_promotion),
                     static_cast<int>(oob_fill));
}

const CUtensorMap& encoded_tensor_map(const detail::TmaDescriptor& d) {
  static_assert(sizeof(d.cuda_map) == sizeof(CUtensorMap) && alignof(CUtensorMap) == 64);
  auto* map = reinterpret_cast<CUtensorMap*>(d.cuda_map);
  // A failed call throws out of call_once, which then lets the next launch try again.
  std::call_once(d.cuda_encoded, [&] {
    const TensorMapArguments a = tensor_map_arguments(d);
    const CudaDriver& driver = cuda_driver();
    if (!driver.cuTensorMapEncodeTiled)
      throw Error(fmt::format("this CUDA driver ({}) has no cuTensorMapEncodeTiled, which TMA descriptors need "
                              "(CUDA 12.0 or later); update the NVIDIA driver\n{}",
                              cuda_version_string(driver.version), d.describe()),
                  d.loc);
    CUresult result = driver.cuTensorMapEncodeTiled(map, a.data_type, a.rank, a.global_address, a.global_dims,
                                                    a.global_strides, a.box_dims, a.element_strides, a.interleave,
                                                    a.swizzle, a.l2_promotion, a.oob_fill);
    if (result != CUDA_SUCCESS)
      throw Error(fmt::format("cuTensorMapEncodeTiled failed for the TMA descriptor made here: {}; weft checked the "
                              "documented rules, so this is a rule of this driver or device weft does not know "
                              "(please report it)\n{}\n  the call      {}",
                              cuda_error_text(result), d.describe(), a.str()),
                  d.loc);
  });
  return *map;
}

}  // namespace weft::driver::cuda
