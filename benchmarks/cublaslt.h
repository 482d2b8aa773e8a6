// cuBLASLt for the benchmarks, opened at run time with dlopen, so that building weft (and its benchmarks)
// needs no CUDA toolkit, as for the driver (src/driver/cuda/cuda_api.h).
//
// Which library: $WEFT_CUBLASLT if set (a path or a soname; then only that one is tried), else
// libcublasLt.so.13, then libcublasLt.so.12 from the loader's search path. On the GPU machine the copy is
// usually the pip package's (site-packages/nvidia/cu13/lib/ or nvidia/cublas/lib/): scripts/gpu-suite
// finds it and exports WEFT_CUBLASLT.
//
// Below: our own declarations of the few types, enums and functions used. Values as in NVIDIA's
// cublasLt.h, cublas_api.h and library_types.h (CUDA 12 and 13; documented in the cuBLAS manual), which
// keep them stable across releases. They live in bench::cublaslt, so they never collide with real headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "driver/cuda/cuda_api.h"  // CUstream, CUdeviceptr (cudaStream_t is the same CUstream_st*)

namespace bench::cublaslt {

// ---- types and enums of the cuBLASLt API -------------------------------------------------------------
enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
};
enum cublasComputeType_t : int { CUBLAS_COMPUTE_32F = 68 };    // f32 accumulation, no reduced precision
enum cudaDataType_t : int { CUDA_R_32F = 0, CUDA_R_16BF = 14, CUDA_R_8F_E4M3 = 28, CUDA_R_8F_E5M2 = 29 };  // library_types.h
enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasLtMatmulDescAttributes_t : int {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,  // int32_t (a cublasOperation_t)
  CUBLASLT_MATMUL_DESC_TRANSB = 4,  // int32_t
  CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,  // const void* (device f32): multiplies the fp8 operand A
  CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,  // const void* (device f32)
  CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,       // int8_t: 1 keeps fp8 products in the tensor cores' accumulator
};
enum cublasLtMatmulPreferenceAttributes_t : int {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,  // uint64_t
};

using cublasLtHandle_t = struct cublasLtContext*;
using cublasLtMatmulDesc_t = struct cublasLtMatmulDescOpaque*;
using cublasLtMatrixLayout_t = struct cublasLtMatrixLayoutOpaque*;
using cublasLtMatmulPreference_t = struct cublasLtMatmulPreferenceOpaque*;
struct cublasLtMatmulAlgo_t {  // semi-opaque: 64 bytes the library fills in
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;  // what the algorithm needs
  cublasStatus_t state;  // the other fields are valid only if this is CUBLAS_STATUS_SUCCESS
  float wavesCount;
  int reserved[4];
};
static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "layout of cublasLtMatmulHeuristicResult_t");

// X(required, name, return type, parameters): every entry point used, looked up by its exported name.
#define WEFT_CUBLASLT_SYMBOLS(X)                                                                                  \
  X(true, cublasLtCreate, cublasStatus_t, (cublasLtHandle_t * handle))                                            \
  X(true, cublasLtDestroy, cublasStatus_t, (cublasLtHandle_t handle))                                             \
  X(true, cublasLtGetVersion, size_t, ())                                                                         \
  X(false, cublasLtGetStatusName, const char*, (cublasStatus_t status))                                           \
  X(false, cublasLtGetStatusString, const char*, (cublasStatus_t status))                                         \
  X(true, cublasLtMatmulDescCreate, cublasStatus_t,                                                               \
    (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale))                             \
  X(true, cublasLtMatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t desc))                                 \
  X(true, cublasLtMatmulDescSetAttribute, cublasStatus_t,                                                         \
    (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes))              \
  X(true, cublasLtMatrixLayoutCreate, cublasStatus_t,                                                             \
    (cublasLtMatrixLayout_t * layout, cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld))             \
  X(true, cublasLtMatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t layout))                           \
  X(true, cublasLtMatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t * pref))                    \
  X(true, cublasLtMatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t pref))                     \
  X(true, cublasLtMatmulPreferenceSetAttribute, cublasStatus_t,                                                   \
    (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf, size_t bytes))  \
  X(true, cublasLtMatmulAlgoGetHeuristic, cublasStatus_t,                                                         \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,      \
     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,          \
     cublasLtMatmulHeuristicResult_t* results, int* returned))                                                    \
  X(true, cublasLtMatmul, cublasStatus_t,                                                                         \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,                        \
     cublasLtMatrixLayout_t a_layout, const void* b, cublasLtMatrixLayout_t b_layout, const void* beta,           \
     const void* c, cublasLtMatrixLayout_t c_layout, void* d, cublasLtMatrixLayout_t d_layout,                    \
     const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, weft::driver::cuda::CUstream stream))

struct Api {
#define WEFT_CUBLASLT_MEMBER(required, name, ret, params) ret(*name) params = nullptr;
  WEFT_CUBLASLT_SYMBOLS(WEFT_CUBLASLT_MEMBER)
#undef WEFT_CUBLASLT_MEMBER
};

// ---- what the benchmarks use -------------------------------------------------------------------------

// The library, opened, with a handle. Every failure throws std::runtime_error naming the call and status.
// Create it while the CUDA context the matrices live in is current on this thread (weft makes its
// device's primary context current when it allocates a buffer); cuBLASLt then runs in that context.
class CublasLt {
 public:
  // Tries the candidates above in order; the exception lists each one tried and why it failed.
  CublasLt();
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  const std::string& path() const { return path_; }  // the candidate that loaded, as given to dlopen
  size_t version() const { return version_; }         // cublasLtGetVersion(): 130100 for 13.1.0
  const Api& api() const { return api_; }
  cublasLtHandle_t handle() const { return handle_; }
  // "CUBLAS_STATUS_NOT_SUPPORTED (15): the functionality requested is not supported"
  std::string status_text(cublasStatus_t status) const;
  // Throws std::runtime_error unless `status` is CUBLAS_STATUS_SUCCESS.
  void check(cublasStatus_t status, const char* call) const;

 private:
  void* library_ = nullptr;
  std::string path_;
  size_t version_ = 0;
  Api api_;
  cublasLtHandle_t handle_ = nullptr;
};

// One GEMM shape, planned once (descriptors and the heuristic's algorithm), so that a timed call is only
// cublasLtMatmul:
//   C (M x N, row-major bf16) = A (M x K, row-major bf16) @ B, with B K x N row-major (b_is_nk false) or
//   N x K row-major (b_is_nk true, i.e. C = A B^T); f32 accumulation (CUBLAS_COMPUTE_32F), alpha 1, beta 0.
class Bf16Gemm {
 public:
  // `workspace` (device memory, at least `workspace_bytes`, 256-byte aligned as cuMemAlloc gives) is
  // offered to the heuristic; 32 MB is what NVIDIA recommends on Hopper.
  Bf16Gemm(const CublasLt& lt, int M, int N, int K, bool b_is_nk, weft::driver::cuda::CUdeviceptr workspace,
           size_t workspace_bytes);
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  // Enqueues C = A @ B on `stream` (nullptr: the legacy default stream, where weft launches by default).
  void run(weft::driver::cuda::CUdeviceptr a, weft::driver::cuda::CUdeviceptr b, weft::driver::cuda::CUdeviceptr c,
           weft::driver::cuda::CUstream stream) const;

  size_t algo_workspace_bytes() const { return algo_workspace_; }  // what the chosen algorithm uses

 private:
  void plan(int M, int N, int K, bool b_is_nk);  // descriptors, layouts, the heuristic's algorithm
  void release();                                // destroys what plan() created

  const CublasLt& lt_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_layout_ = nullptr, b_layout_ = nullptr, c_layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  weft::driver::cuda::CUdeviceptr workspace_ = 0;
  size_t workspace_bytes_ = 0, algo_workspace_ = 0;
};

// One fp8 GEMM shape, planned once:
//   C (M x N, row-major bf16) = a_scale * b_scale * A (M x K, row-major e4m3) @ B^T, B N x K row-major
//   (K contiguous: the "TN" layout cuBLASLt's fp8 kernels require on Hopper); f32 accumulation
//   (CUBLAS_COMPUTE_32F), the scales f32 in device memory (A_SCALE_POINTER / B_SCALE_POINTER).
// `fast_accum` false (cuBLASLt's default) has cuBLASLt promote the tensor cores' partial sums to f32
// periodically, as weft's fp8 GEMM does; true accumulates in the tensor cores only (faster, less exact).
class Fp8Gemm {
 public:
  Fp8Gemm(const CublasLt& lt, int M, int N, int K, weft::driver::cuda::CUdeviceptr a_scale,
          weft::driver::cuda::CUdeviceptr b_scale, bool fast_accum, weft::driver::cuda::CUdeviceptr workspace,
          size_t workspace_bytes);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Enqueues C = a_scale b_scale A B^T on `stream` (nullptr: the legacy default stream).
  void run(weft::driver::cuda::CUdeviceptr a, weft::driver::cuda::CUdeviceptr b, weft::driver::cuda::CUdeviceptr c,
           weft::driver::cuda::CUstream stream) const;

  size_t algo_workspace_bytes() const { return algo_workspace_; }

 private:
  void plan(int M, int N, int K, weft::driver::cuda::CUdeviceptr a_scale, weft::driver::cuda::CUdeviceptr b_scale,
            bool fast_accum);
  void release();

  const CublasLt& lt_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_layout_ = nullptr, b_layout_ = nullptr, c_layout_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  weft::driver::cuda::CUdeviceptr workspace_ = 0;
  size_t workspace_bytes_ = 0, algo_workspace_ = 0;
};

}  // namespace bench::cublaslt
