// Our own declarations of the small part of the CUDA driver API weft uses, so that building weft needs no
// CUDA toolkit: libcuda.so.1 is opened at run time (cuda_driver.cpp) and its functions are looked up by
// the names in WEFT_CUDA_DRIVER_SYMBOLS below.
//
// Numeric values were checked against cuda.h of CUDA 13.0; the driver API keeps them stable across
// releases. Declare only what weft calls. Everything lives in weft::driver::cuda, so these names never
// collide with a real cuda.h that a user's program includes.
#pragma once

#include <cstddef>

namespace weft::driver::cuda {

// ---- handles -------------------------------------------------------------------------------------------
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // 64-bit builds only (weft supports no other)
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
using cuuint32_t = unsigned int;
using cuuint64_t = unsigned long long;

// A TMA descriptor, opaque: 128 bytes, 64-byte aligned (what cuTensorMapEncodeTiled writes and a kernel
// receives by value as a grid-constant parameter).
struct alignas(64) CUtensorMap {
  cuuint64_t opaque[16];
};
static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) == 64);

// ---- enums ---------------------------------------------------------------------------------------------
// Unscoped with a fixed underlying type: every value the driver returns is representable, named or not.
enum CUresult : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_ASSERT = 710,
  CUDA_ERROR_HARDWARE_STACK_ERROR = 714,
  CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
  CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  CUDA_ERROR_INVALID_ADDRESS_SPACE = 717,
  CUDA_ERROR_INVALID_PC = 718,
  CUDA_ERROR_LAUNCH_FAILED = 719,
};

enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum CUfunction_attribute : int {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,  // static shared memory
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

enum CUjit_option : int {
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_LOG_VERBOSE = 12,
};

enum CUstreamCaptureMode : int {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

// Launch attributes of cuLaunchKernelEx (CUDA 12.0): weft sets the thread-block cluster shape and
// programmatic stream serialization (a kernel that calls wait_for_prior_grid).
enum CUlaunchAttributeID : int {
  CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6,
};

// A union of 64 bytes in cuda.h; weft uses its clusterDim and programmaticStreamSerializationAllowed members.
union CUlaunchAttributeValue {
  char pad[64];
  struct {
    unsigned x, y, z;
  } clusterDim;
  int programmaticStreamSerializationAllowed;
};
static_assert(sizeof(CUlaunchAttributeValue) == 64);

struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};
static_assert(sizeof(CUlaunchAttribute) == 72);

struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;     // in blocks
  unsigned blockDimX, blockDimY, blockDimZ;  // in threads
  unsigned sharedMemBytes;                   // dynamic shared memory per block
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned numAttrs;
};
static_assert(sizeof(CUlaunchConfig) == 56);

// Tensor maps (cuTensorMapEncodeTiled). The driver has no signed 8- or 16-bit type: a copy moves bits, so
// weft's i8 and i16 use UINT8 and UINT16.
enum CUtensorMapDataType : int {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
  CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
  CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
  CU_TENSOR_MAP_DATA_TYPE_INT32 = 3,
  CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4,
  CU_TENSOR_MAP_DATA_TYPE_INT64 = 5,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8,
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
};

enum CUtensorMapInterleave : int {
  CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
};

enum CUtensorMapSwizzle : int {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_32B = 1,
  CU_TENSOR_MAP_SWIZZLE_64B = 2,
  CU_TENSOR_MAP_SWIZZLE_128B = 3,
};

enum CUtensorMapL2promotion : int {
  CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
  CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1,
  CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2,
  CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
};

enum CUtensorMapFloatOOBfill : int {
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,  // out-of-bounds elements read as zero
  CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1,
};

// Flags of cuStreamCreate and cuEventCreate.
inline constexpr unsigned CU_STREAM_DEFAULT = 0x0;
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
inline constexpr unsigned CU_EVENT_DEFAULT = 0x0;
// Flags of cuMemHostAlloc: map the pinned host memory into the device's address space.
inline constexpr unsigned CU_MEMHOSTALLOC_DEVICEMAP = 0x02;

// ---- the symbol table ----------------------------------------------------------------------------------
// X(required, member, symbol, fallback_symbol, parameters)
//   required:        false when weft works without it (the loader leaves the member null if absent)
//   member:          the CudaDriver member; also names the function-pointer type `member_fn`
//   symbol:          the exported name, versioned where the driver has versions (what cuda.h's #defines
//                    map the plain names to)
//   fallback_symbol: an older name tried when `symbol` is absent, or nullptr
//   parameters:      the parameter list; every function returns CUresult
#define WEFT_CUDA_DRIVER_SYMBOLS(X)                                                                           \
  X(true, cuGetErrorName, "cuGetErrorName", nullptr, (CUresult error, const char** name))                      \
  X(true, cuGetErrorString, "cuGetErrorString", nullptr, (CUresult error, const char** text))                  \
  X(true, cuInit, "cuInit", nullptr, (unsigned flags))                                                         \
  X(true, cuDriverGetVersion, "cuDriverGetVersion", nullptr, (int* version))                                   \
  X(true, cuDeviceGetCount, "cuDeviceGetCount", nullptr, (int* count))                                         \
  X(true, cuDeviceGet, "cuDeviceGet", nullptr, (CUdevice * device, int ordinal))                               \
  X(true, cuDeviceGetName, "cuDeviceGetName", nullptr, (char* name, int length, CUdevice device))              \
  X(true, cuDeviceGetAttribute, "cuDeviceGetAttribute", nullptr,                                               \
    (int* value, CUdevice_attribute attribute, CUdevice device))                                               \
  X(true, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", nullptr, (CUcontext * context, CUdevice device)) \
  X(true, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", nullptr, (CUdevice device))               \
  X(true, cuCtxGetCurrent, "cuCtxGetCurrent", nullptr, (CUcontext * context))                                  \
  X(true, cuCtxSetCurrent, "cuCtxSetCurrent", nullptr, (CUcontext context))                                    \
  X(true, cuCtxSynchronize, "cuCtxSynchronize", nullptr, ())                                                   \
  X(true, cuMemAlloc, "cuMemAlloc_v2", nullptr, (CUdeviceptr * address, size_t bytes))                         \
  X(true, cuMemFree, "cuMemFree_v2", nullptr, (CUdeviceptr address))                                           \
  /* Pinned host memory mapped into the device: GPU debug mode's record of a timed-out wait (it must */     \
  /* survive the trap that makes the context unusable). */                                                  \
  X(true, cuMemHostAlloc, "cuMemHostAlloc", nullptr, (void** host, size_t bytes, unsigned flags))              \
  X(true, cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", nullptr,                                  \
    (CUdeviceptr * device, void* host, unsigned flags))                                                        \
  X(true, cuMemFreeHost, "cuMemFreeHost", nullptr, (void* host))                                               \
  X(true, cuMemcpyHtoD, "cuMemcpyHtoD_v2", nullptr, (CUdeviceptr dst, const void* src, size_t bytes))          \
  X(true, cuMemcpyDtoH, "cuMemcpyDtoH_v2", nullptr, (void* dst, CUdeviceptr src, size_t bytes))                \
  X(true, cuMemcpyDtoD, "cuMemcpyDtoD_v2", nullptr, (CUdeviceptr dst, CUdeviceptr src, size_t bytes))          \
  X(true, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", nullptr,                                                  \
    (CUdeviceptr dst, const void* src, size_t bytes, CUstream stream))                                         \
  X(true, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", nullptr,                                                  \
    (void* dst, CUdeviceptr src, size_t bytes, CUstream stream))                                               \
  X(true, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", nullptr,                                                  \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream))                                         \
  /* Copies between the memory of two devices (Buffer::copy_from); optional: weft goes through host memory */ \
  /* without it. */                                                                                          \
  X(false, cuMemcpyPeer, "cuMemcpyPeer", nullptr,                                                              \
    (CUdeviceptr dst, CUcontext dst_context, CUdeviceptr src, CUcontext src_context, size_t bytes))            \
  X(true, cuModuleLoadDataEx, "cuModuleLoadDataEx", nullptr,                                                  \
    (CUmodule * module, const void* image, unsigned num_options, CUjit_option* options, void** values))         \
  X(true, cuModuleUnload, "cuModuleUnload", nullptr, (CUmodule module))                                        \
  X(true, cuModuleGetFunction, "cuModuleGetFunction", nullptr,                                                 \
    (CUfunction * function, CUmodule module, const char* name))                                                \
  X(true, cuFuncGetAttribute, "cuFuncGetAttribute", nullptr,                                                   \
    (int* value, CUfunction_attribute attribute, CUfunction function))                                         \
  X(true, cuFuncSetAttribute, "cuFuncSetAttribute", nullptr,                                                   \
    (CUfunction function, CUfunction_attribute attribute, int value))                                          \
  /* CUDA 12.0 and later; optional so that an older driver still runs kernels without TMA. */              \
  X(false, cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled", nullptr,                                          \
    (CUtensorMap * tensor_map, CUtensorMapDataType data_type, cuuint32_t rank, void* global_address,           \
     const cuuint64_t* global_dims, const cuuint64_t* global_strides, const cuuint32_t* box_dims,              \
     const cuuint32_t* element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,           \
     CUtensorMapL2promotion l2_promotion, CUtensorMapFloatOOBfill oob_fill))                                   \
  X(true, cuLaunchKernel, "cuLaunchKernel", nullptr,                                                           \
    (CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,                 \
     unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream, void** params, void** extra)) \
  /* CUDA 12.0 and later; optional: only launches in thread-block clusters need it. */                       \
  X(false, cuLaunchKernelEx, "cuLaunchKernelEx", nullptr,                                                      \
    (const CUlaunchConfig* config, CUfunction function, void** params, void** extra))                         \
  X(true, cuStreamCreate, "cuStreamCreate", nullptr, (CUstream * stream, unsigned flags))                      \
  X(true, cuStreamDestroy, "cuStreamDestroy_v2", nullptr, (CUstream stream))                                   \
  X(true, cuStreamSynchronize, "cuStreamSynchronize", nullptr, (CUstream stream))                              \
  X(true, cuEventCreate, "cuEventCreate", nullptr, (CUevent * event, unsigned flags))                          \
  X(true, cuEventDestroy, "cuEventDestroy_v2", nullptr, (CUevent event))                                       \
  X(true, cuEventRecord, "cuEventRecord", nullptr, (CUevent event, CUstream stream))                           \
  X(true, cuEventSynchronize, "cuEventSynchronize", nullptr, (CUevent event))                                  \
  X(true, cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime",                                   \
    (float* milliseconds, CUevent start, CUevent end))                                                         \
  /* CUDA graphs: weft's own launches only need to be capturable; these serve tests and benchmarks. */        \
  X(false, cuStreamBeginCapture, "cuStreamBeginCapture_v2", nullptr,                                           \
    (CUstream stream, CUstreamCaptureMode mode))                                                               \
  X(false, cuStreamEndCapture, "cuStreamEndCapture", nullptr, (CUstream stream, CUgraph * graph))              \
  X(false, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", nullptr,                                \
    (CUgraphExec * exec, CUgraph graph, unsigned long long flags))                                             \
  X(false, cuGraphLaunch, "cuGraphLaunch", nullptr, (CUgraphExec exec, CUstream stream))                       \
  X(false, cuGraphExecDestroy, "cuGraphExecDestroy", nullptr, (CUgraphExec exec))                              \
  X(false, cuGraphDestroy, "cuGraphDestroy", nullptr, (CUgraph graph))

// Function-pointer types: cuInit_fn, cuMemAlloc_fn, …
#define WEFT_CUDA_DECLARE_FN_TYPE(required, member, symbol, fallback, parameters) \
  using member##_fn = CUresult(*) parameters;
WEFT_CUDA_DRIVER_SYMBOLS(WEFT_CUDA_DECLARE_FN_TYPE)
#undef WEFT_CUDA_DECLARE_FN_TYPE

}  // namespace weft::driver::cuda
