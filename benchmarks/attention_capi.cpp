// A C ABI over examples/attention_fwd.h, built as libweft_attention.so and loaded with ctypes by
// benchmarks/bench_attention.py: weft's attention forward runs on memory and a stream the caller owns
// (PyTorch's tensors and its current stream), in the caller's process, next to cuDNN and FlashAttention-2.
//
// C++ exceptions must not cross into ctypes (that would terminate the Python process): every failure is
// caught, kept as a thread-local message and reported by a non-zero return.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "attention_fwd.h"

#define WEFT_CAPI extern "C" __attribute__((visibility("default")))

namespace {

thread_local std::string last_error;
thread_local bool last_error_lost = false;  // the message itself could not be allocated

template <class T>
void run(const weft::Device& device, void* q, void* k, void* v, void* o, float* lse, const AttentionParams& p,
         void* cuda_stream) {
  // Element counts in size_t: a product of four ints may not fit in one.
  const size_t q_count = size_t(p.B) * size_t(p.Hq) * size_t(p.Sq) * size_t(p.D);
  const size_t kv_count = size_t(p.B) * size_t(p.Hkv) * size_t(p.Sk) * size_t(p.D);
  const size_t lse_count = size_t(p.B) * size_t(p.Hq) * size_t(p.Sq);
  // Views of the caller's memory: weft never frees it.
  auto qb = device.wrap(static_cast<T*>(q), q_count);
  auto kb = device.wrap(static_cast<T*>(k), kv_count);
  auto vb = device.wrap(static_cast<T*>(v), kv_count);
  auto ob = device.wrap(static_cast<T*>(o), q_count);
  auto lb = device.wrap(lse, lse_count);
  // WEFT_ATTENTION_CONFIG="BN,stages,pingpong,overlap,persistent[,BM[,across_tiles]]" (e.g. "128,2,1,1,1"; the
  // flags may be left off) overrides the tiling, for tuning.
  AttentionConfig cfg = attention_config(p);
  if (const char* env = std::getenv("WEFT_ATTENTION_CONFIG")) {
    int bn = 0, stages = 0, pingpong = 1, overlap = 1, persistent = 1, bm = 128, across = 1;
    if (std::sscanf(env, "%d,%d,%d,%d,%d,%d,%d", &bn, &stages, &pingpong, &overlap, &persistent, &bm, &across) >= 2) {
      cfg.BN = bn;
      cfg.stages = stages;
      cfg.pingpong = pingpong != 0;
      cfg.overlap = overlap != 0;
      cfg.persistent = persistent != 0;
      cfg.BM = bm;
      cfg.across_tiles = across != 0;
    }
  }
  attention_fwd<T>(device.wrap_stream(cuda_stream), qb, kb, vb, ob, lb, p, &cfg);
}

// Never throws: it runs inside the catch clauses too.
int fail(const char* prefix, const char* message) noexcept {
  try {
    last_error = std::string(prefix) + message;
    last_error_lost = false;
  } catch (...) {
    last_error.clear();
    last_error_lost = true;
  }
  return 1;
}
int fail(const char* message) noexcept { return fail("", message); }
int fail(const std::string& message) noexcept { return fail("", message.c_str()); }

}  // namespace

WEFT_CAPI int weft_attention_fwd(void* q, void* k, void* v, void* o, float* lse, int dtype, int B, int Hq, int Hkv,
                                 int Sq, int Sk, int D, int causal, float scale, void* cuda_stream) {
  try {
    last_error.clear();
    last_error_lost = false;
    if (!q || !k || !v || !o || !lse) return fail("weft_attention_fwd: a null tensor pointer");
    if (dtype != 0 && dtype != 1)
      return fail("weft_attention_fwd: dtype " + std::to_string(dtype) + " is neither 0 (bf16) nor 1 (f16)");
    if (B <= 0 || Hq <= 0 || Hkv <= 0 || Sq <= 0 || Sk <= 0 || D <= 0)
      return fail("weft_attention_fwd: every size must be positive (B " + std::to_string(B) + ", Hq " +
                  std::to_string(Hq) + ", Hkv " + std::to_string(Hkv) + ", Sq " + std::to_string(Sq) + ", Sk " +
                  std::to_string(Sk) + ", D " + std::to_string(D) + ")");
    // The pointers are CUDA device memory: weft must be on the GPU (its primary context, shared with
    // PyTorch), not on its CPU fallback.
    weft::Device device = weft::Device::current();
    if (device.kind() != weft::BackendKind::cuda)
      return fail("weft_attention_fwd: weft's current device is " + device.name() +
                  ", not a CUDA GPU (is WEFT_BACKEND set, or is the driver unusable?)");
    AttentionParams p{B, Hq, Hkv, Sq, Sk, D, causal != 0, scale};
    if (dtype == 0)
      run<weft::bf16>(device, q, k, v, o, lse, p, cuda_stream);
    else
      run<weft::f16>(device, q, k, v, o, lse, p, cuda_stream);
    return 0;
  } catch (const weft::Error& e) {
    return fail("weft::Error: ", e.what());
  } catch (const weft::InternalError& e) {
    return fail("weft::InternalError: ", e.what());
  } catch (const std::exception& e) {
    return fail("std::exception: ", e.what());
  } catch (...) {
    return fail("weft_attention_fwd: an exception of unknown type");
  }
}

WEFT_CAPI const char* weft_attention_last_error(void) {
  return last_error_lost ? "weft_attention_fwd failed, and its message could not be allocated" : last_error.c_str();
}
