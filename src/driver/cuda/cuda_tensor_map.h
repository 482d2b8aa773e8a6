// TMA descriptors on CUDA: a weft::tma descriptor encoded as a CUtensorMap by cuTensorMapEncodeTiled.
#pragma once

#include <string>

#include "driver/cuda/cuda_api.h"
#include "driver/tma_descriptor.h"

namespace weft::driver::cuda {

// The arguments of cuTensorMapEncodeTiled for a descriptor, in the driver's order: dimension 0 is the
// innermost (weft's lists are outermost first), strides are in bytes and omit the innermost (the element).
struct TensorMapArguments {
  CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  cuuint32_t rank = 0;
  void* global_address = nullptr;
  cuuint64_t global_dims[5] = {};
  cuuint64_t global_strides[4] = {};  // of dimensions 1 .. rank - 1
  cuuint32_t box_dims[5] = {};
  cuuint32_t element_strides[5] = {};  // 1: every element of the box
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;  // zeros

  std::string str() const;  // every argument, for error messages
};
TensorMapArguments tensor_map_arguments(const detail::TmaDescriptor& d);

// `d`'s CUtensorMap, encoded by the first call (thread-safe; the current context must be the device's)
// and kept in `d`. Throws weft::Error at d's tma() line naming the call, the driver's error and every field.
const CUtensorMap& encoded_tensor_map(const detail::TmaDescriptor& d);

}  // namespace weft::driver::cuda
