// cuBLASLt opened with dlopen; see cublaslt.h.
#include "cublaslt.h"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace bench::cublaslt {

namespace {

// Opens `candidate` and resolves every symbol; on failure closes it and returns the reason.
bool try_load(const std::string& candidate, void** library, Api* api, std::string* why_not) {
  void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    *why_not = e ? e : "dlopen failed";
    return false;
  }
  Api loaded;
  std::string missing;
#define WEFT_CUBLASLT_RESOLVE(required, name, ret, params)                     \
  loaded.name = reinterpret_cast<ret(*) params>(dlsym(lib, #name));           \
  if (!loaded.name && required) missing += std::string(missing.empty() ? "" : ", ") + #name;
  WEFT_CUBLASLT_SYMBOLS(WEFT_CUBLASLT_RESOLVE)
#undef WEFT_CUBLASLT_RESOLVE
  if (!missing.empty()) {
    *why_not = "loaded, but it lacks " + missing;
    dlclose(lib);
    return false;
  }
  *library = lib;
  *api = loaded;
  return true;
}

}  // namespace

CublasLt::CublasLt() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("WEFT_CUBLASLT"); env && *env)
    candidates = {env};  // asked for one: trying others would hide that it failed
  else
    candidates = {"libcublasLt.so.13", "libcublasLt.so.12"};
  std::string tried;
  for (const std::string& candidate : candidates) {
    std::string why_not;
    if (!try_load(candidate, &library_, &api_, &why_not)) {
      tried += "\n  " + candidate + ": " + why_not;
      continue;
    }
    // A library that loads can still fail here, e.g. cuBLAS 13 under a driver older than CUDA 13.
    cublasStatus_t s = api_.cublasLtCreate(&handle_);
    if (s != CUBLAS_STATUS_SUCCESS) {
      tried += "\n  " + candidate + ": loaded, but cublasLtCreate failed: " + status_text(s);
      handle_ = nullptr;
      dlclose(library_);
      library_ = nullptr;
      api_ = Api{};
      continue;
    }
    path_ = candidate;
    version_ = api_.cublasLtGetVersion();
    return;
  }
  throw std::runtime_error("cannot use cuBLASLt; tried:" + tried +
                           "\n  (set WEFT_CUBLASLT to the path of libcublasLt.so.*; scripts/gpu-suite finds the pip "
                           "package's copy)");
}

CublasLt::~CublasLt() {
  if (handle_) api_.cublasLtDestroy(handle_);
  // The library stays loaded: cuBLAS may have registered exit-time handlers that point into it.
}

std::string CublasLt::status_text(cublasStatus_t status) const {
  std::string text;
  const char* name = api_.cublasLtGetStatusName ? api_.cublasLtGetStatusName(status) : nullptr;
  text += name ? name : "cublasStatus_t";
  text += " (" + std::to_string(static_cast<int>(status)) + ")";
  if (const char* s = api_.cublasLtGetStatusString ? api_.cublasLtGetStatusString(status) : nullptr) text += ": " + std::string(s);
  return text;
}

void CublasLt::check(cublasStatus_t status, const char* call) const {
  if (status != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(call) + " failed: " + status_text(status));
}

// cuBLASLt's layouts here are column-major (its default order). A row-major R x C matrix is, in the same
// memory, the column-major C x R matrix that is its transpose. So, for row-major C = A op(B):
//   C^T (column-major N x M, ld N) = op(B)^T A^T, i.e. cuBLASLt's (m, n, k) = (N, M, K) with
//   its first operand  = our B: K x N row-major is column-major N x K (= the op(B)^T wanted): op N, ld N;
//                               N x K row-major is column-major K x N (= B^T, and B is wanted): op T, ld K;
//   its second operand = our A: M x K row-major is column-major K x M (= A^T, as wanted): op N, ld K.
// (No ORDER attribute: the transposes say it, and column-major is the order every algorithm supports.)
Bf16Gemm::Bf16Gemm(const CublasLt& lt, int M, int N, int K, bool b_is_nk, weft::driver::cuda::CUdeviceptr workspace,
                   size_t workspace_bytes)
    : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  try {
    plan(M, N, K, b_is_nk);
  } catch (...) {  // the destructor does not run for a constructor that throws
    release();
    throw;
  }
}

void Bf16Gemm::plan(int M, int N, int K, bool b_is_nk) {
  const CublasLt& lt = lt_;
  const Api& api = lt.api();
  lt.check(api.cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  int32_t op_first = b_is_nk ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = CUBLAS_OP_N;
  lt.check(api.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
           "cublasLtMatmulDescSetAttribute(TRANSA)");
  lt.check(api.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
           "cublasLtMatmulDescSetAttribute(TRANSB)");
  // Layouts describe the matrices as stored (before op): rows, columns, leading dimension.
  // b_layout_ is our B (cuBLASLt's first operand), a_layout_ our A (its second).
  if (b_is_nk)
    lt.check(api.cublasLtMatrixLayoutCreate(&b_layout_, CUDA_R_16BF, K, N, K), "cublasLtMatrixLayoutCreate(B)");
  else
    lt.check(api.cublasLtMatrixLayoutCreate(&b_layout_, CUDA_R_16BF, N, K, N), "cublasLtMatrixLayoutCreate(B)");
  lt.check(api.cublasLtMatrixLayoutCreate(&a_layout_, CUDA_R_16BF, K, M, K), "cublasLtMatrixLayoutCreate(A)");
  lt.check(api.cublasLtMatrixLayoutCreate(&c_layout_, CUDA_R_16BF, N, M, N), "cublasLtMatrixLayoutCreate(C)");

  cublasLtMatmulPreference_t pref = nullptr;
  lt.check(api.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t max_workspace = workspace_bytes_;
  cublasStatus_t s = api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &max_workspace, sizeof(max_workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (s == CUBLAS_STATUS_SUCCESS)  // the heuristic's first choice, as PyTorch takes it
    s = api.cublasLtMatmulAlgoGetHeuristic(lt.handle(), desc_, b_layout_, a_layout_, c_layout_, c_layout_, pref, 1,
                                           &result, &returned);
  api.cublasLtMatmulPreferenceDestroy(pref);
  lt.check(s, "cublasLtMatmulAlgoGetHeuristic");
  if (returned < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm for bf16 " + std::to_string(M) + " x " +
                             std::to_string(N) + " x " + std::to_string(K) + (b_is_nk ? " (B is N x K)" : " (B is K x N)") +
                             (returned < 1 ? "" : ": " + lt.status_text(result.state)));
  if (result.workspaceSize > workspace_bytes_)  // the preference should have excluded it; say so if not
    throw std::runtime_error("cuBLASLt's algorithm wants " + std::to_string(result.workspaceSize) +
                             " bytes of workspace, more than the " + std::to_string(workspace_bytes_) + " offered");
  algo_ = result.algo;
  algo_workspace_ = result.workspaceSize;
}

Bf16Gemm::~Bf16Gemm() { release(); }

void Bf16Gemm::release() {
  const Api& api = lt_.api();
  if (c_layout_) api.cublasLtMatrixLayoutDestroy(c_layout_);
  if (b_layout_) api.cublasLtMatrixLayoutDestroy(b_layout_);
  if (a_layout_) api.cublasLtMatrixLayoutDestroy(a_layout_);
  if (desc_) api.cublasLtMatmulDescDestroy(desc_);
  a_layout_ = b_layout_ = c_layout_ = nullptr;
  desc_ = nullptr;
}

void Bf16Gemm::run(weft::driver::cuda::CUdeviceptr a, weft::driver::cuda::CUdeviceptr b,
                   weft::driver::cuda::CUdeviceptr c, weft::driver::cuda::CUstream stream) const {
  const float alpha = 1.0f, beta = 0.0f;  // host pointers: the default pointer mode; f32 = the scale type
  auto ptr = [](weft::driver::cuda::CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); };
  // beta is 0, so C is not read; D (the output) is C's memory with C's layout.
  lt_.check(lt_.api().cublasLtMatmul(lt_.handle(), desc_, &alpha, ptr(b), b_layout_, ptr(a), a_layout_, &beta, ptr(c),
                                     c_layout_, ptr(c), c_layout_, &algo_, ptr(workspace_), workspace_bytes_, stream),
            "cublasLtMatmul");
}

// ---- fp8 -----------------------------------------------------------------------------------------------

// As for bf16 above, cuBLASLt computes C^T = B A^T column-major: its first operand is our B (N x K
// row-major = column-major K x N, op T), its second our A (K x M column-major, op N): "TN", the only
// layout of fp8 operands on Hopper. Its A scale is therefore our B's, and its B scale our A's.
Fp8Gemm::Fp8Gemm(const CublasLt& lt, int M, int N, int K, weft::driver::cuda::CUdeviceptr a_scale,
                 weft::driver::cuda::CUdeviceptr b_scale, bool fast_accum, weft::driver::cuda::CUdeviceptr workspace,
                 size_t workspace_bytes)
    : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {
  try {
    plan(M, N, K, a_scale, b_scale, fast_accum);
  } catch (...) {
    release();
    throw;
  }
}

void Fp8Gemm::plan(int M, int N, int K, weft::driver::cuda::CUdeviceptr a_scale, weft::driver::cuda::CUdeviceptr b_scale,
                   bool fast_accum) {
  const CublasLt& lt = lt_;
  const Api& api = lt.api();
  lt.check(api.cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* value, size_t bytes, const char* what) {
    lt.check(api.cublasLtMatmulDescSetAttribute(desc_, attr, value, bytes), what);
  };
  int32_t op_first = CUBLAS_OP_T, op_second = CUBLAS_OP_N;
  set(CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first), "cublasLtMatmulDescSetAttribute(TRANSA)");
  set(CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second), "cublasLtMatmulDescSetAttribute(TRANSB)");
  const void* first_scale = reinterpret_cast<const void*>(static_cast<uintptr_t>(b_scale));
  const void* second_scale = reinterpret_cast<const void*>(static_cast<uintptr_t>(a_scale));
  set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &first_scale, sizeof(first_scale), "cublasLtMatmulDescSetAttribute(A_SCALE)");
  set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &second_scale, sizeof(second_scale),
      "cublasLtMatmulDescSetAttribute(B_SCALE)");
  int8_t fast = fast_accum ? 1 : 0;
  set(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast), "cublasLtMatmulDescSetAttribute(FAST_ACCUM)");
  lt.check(api.cublasLtMatrixLayoutCreate(&b_layout_, CUDA_R_8F_E4M3, K, N, K), "cublasLtMatrixLayoutCreate(B)");
  lt.check(api.cublasLtMatrixLayoutCreate(&a_layout_, CUDA_R_8F_E4M3, K, M, K), "cublasLtMatrixLayoutCreate(A)");
  lt.check(api.cublasLtMatrixLayoutCreate(&c_layout_, CUDA_R_16BF, N, M, N), "cublasLtMatrixLayoutCreate(C)");

  cublasLtMatmulPreference_t pref = nullptr;
  lt.check(api.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t max_workspace = workspace_bytes_;
  cublasStatus_t s = api.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &max_workspace, sizeof(max_workspace));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = api.cublasLtMatmulAlgoGetHeuristic(lt.handle(), desc_, b_layout_, a_layout_, c_layout_, c_layout_, pref, 1,
                                           &result, &returned);
  api.cublasLtMatmulPreferenceDestroy(pref);
  lt.check(s, "cublasLtMatmulAlgoGetHeuristic");
  if (returned < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublasLtMatmulAlgoGetHeuristic found no algorithm for fp8 e4m3 " + std::to_string(M) +
                             " x " + std::to_string(N) + " x " + std::to_string(K) +
                             (returned < 1 ? "" : ": " + lt.status_text(result.state)));
  if (result.workspaceSize > workspace_bytes_)
    throw std::runtime_error("cuBLASLt's algorithm wants " + std::to_string(result.workspaceSize) +
                             " bytes of workspace, more than the " + std::to_string(workspace_bytes_) + " offered");
  algo_ = result.algo;
  algo_workspace_ = result.workspaceSize;
}

Fp8Gemm::~Fp8Gemm() { release(); }

void Fp8Gemm::release() {
  const Api& api = lt_.api();
  if (c_layout_) api.cublasLtMatrixLayoutDestroy(c_layout_);
  if (b_layout_) api.cublasLtMatrixLayoutDestroy(b_layout_);
  if (a_layout_) api.cublasLtMatrixLayoutDestroy(a_layout_);
  if (desc_) api.cublasLtMatmulDescDestroy(desc_);
  a_layout_ = b_layout_ = c_layout_ = nullptr;
  desc_ = nullptr;
}

void Fp8Gemm::run(weft::driver::cuda::CUdeviceptr a, weft::driver::cuda::CUdeviceptr b,
                  weft::driver::cuda::CUdeviceptr c, weft::driver::cuda::CUstream stream) const {
  const float alpha = 1.0f, beta = 0.0f;
  auto ptr = [](weft::driver::cuda::CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); };
  lt_.check(lt_.api().cublasLtMatmul(lt_.handle(), desc_, &alpha, ptr(b), b_layout_, ptr(a), a_layout_, &beta, ptr(c),
                                     c_layout_, ptr(c), c_layout_, &algo_, ptr(workspace_), workspace_bytes_, stream),
            "cublasLtMatmul");
}

}  // namespace bench::cublaslt
