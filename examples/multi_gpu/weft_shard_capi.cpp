// A C ABI over one weft kernel, built as libweft_shard.so and loaded with ctypes by nccl_allreduce.py: each
// rank of a torch.distributed (NCCL) program runs the kernel on its own GPU, on its shard, on torch's
// current stream -- also inside a CUDA graph capture -- then all-reduces with NCCL.
//
//   y[i] = a * x[i] * x[i] + x[i]      (f32, any n)
//
// C++ exceptions must not cross into ctypes: a failure returns non-zero and its message is kept per thread.
#include <cstdint>
#include <exception>
#include <string>

#include <weft/weft.h>

#define WEFT_CAPI extern "C" __attribute__((visibility("default")))

namespace {

thread_local std::string last_error;

const weft::Kernel& shard_kernel() {
  using namespace weft;
  static const Kernel k("shard_square_axpy", [](Ptr<float> x, Ptr<float> y, Float a, Int n) {
    Int i = program_id(0) * 1024 + arange(0, 1024);
    Bool in = i < n;
    Tile<float> v = load(x + i, in, 0.f);
    store(y + i, v * v * a + v, in);
  });
  return k;
}

}  // namespace

// `device`: the CUDA ordinal the pointers and the stream belong to (torch's tensor.device.index).
WEFT_CAPI int weft_shard_run(int device, const float* x, float* y, int64_t n, float a, void* cuda_stream) {
  try {
    last_error.clear();
    if (!x || !y || n <= 0) {
      last_error = "weft_shard_run: null pointers or n <= 0 (n = " + std::to_string(n) + ")";
      return 1;
    }
    if (n > int64_t(1) << 31) {
      last_error = "weft_shard_run: n = " + std::to_string(n) + " is more than the kernel's 32-bit indices reach";
      return 1;
    }
    weft::Device dev = weft::Device::cuda(device);
    auto xb = dev.wrap(const_cast<float*>(x), size_t(n));
    auto yb = dev.wrap(y, size_t(n));
    weft::Grid grid(int((n + 1023) / 1024));
    shard_kernel().launch(dev.wrap_stream(cuda_stream), grid, xb, yb, a, int(n));
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return 1;
  } catch (...) {
    last_error = "weft_shard_run: an exception of unknown type";
    return 1;
  }
}

WEFT_CAPI const char* weft_shard_last_error(void) { return last_error.c_str(); }
