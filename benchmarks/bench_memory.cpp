// bench_memory: memory-bound weft kernels against the device's own copy (cuMemcpyDtoD) in the same run.
// Sizes are several GB, far past the 60 MB L2, so every run streams from HBM. Bandwidth counts bytes
// read + written; the copy's figure is the ceiling (about 4.3 TB/s on an H200).
//   bench_memory [--json]
#include <cmath>
#include <functional>
#include <cstdio>
#include <cstring>
#include <random>

#include "../examples/norms.h"
#include "gpu_timing.h"

using namespace weft;

namespace {

struct Row {
  const char* name;
  double bytes;
  double ms;
};

template <class T> Buffer<T> random_buffer(Device& dev, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<T> host(n);
  for (T& v : host) v = T(dist(rng));
  return dev.upload(host);
}

}  // namespace

int main(int argc, char** argv) {
  bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
  Device dev = Device::current();
  if (dev.kind() != BackendKind::cuda) {
    std::printf("bench_memory needs a CUDA device (current device: %s)\n", dev.name().c_str());
    return 1;
  }
  using namespace weft::driver::cuda;
  const CudaDriver& cu = cuda_driver();
  std::vector<Row> rows;

  // The ceiling: a device-to-device copy of 2 GiB.
  const size_t copy_bytes = size_t(2) << 30;
  Buffer<uint8_t> src = dev.alloc<uint8_t>(copy_bytes), dst = dev.alloc<uint8_t>(copy_bytes);
  double copy_ms = bench::gpu_median_ms([&] {
    check(cu.cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(dst.data()), reinterpret_cast<CUdeviceptr>(src.data()), copy_bytes),
          "cuMemcpyDtoD", "copy");
  });
  rows.push_back({"cuMemcpyDtoD 2 GiB", 2.0 * copy_bytes, copy_ms});
  src = {};
  dst = {};

  {  // vector add, f32: 3 x 1 GiB
    const int n = 1 << 28, block = 2048;
    Kernel add("vector_add", [](Ptr<float> x, Ptr<float> y, Ptr<float> out, Int n, Const<int> block) {
      Long offsets = cast<int64_t>(program_id(0)) * block + cast<int64_t>(arange(0, block));
      Bool valid = offsets < cast<int64_t>(n);
      store(out + offsets, load(x + offsets, valid) + load(y + offsets, valid), valid);
    });
    auto x = random_buffer<float>(dev, n, 1), y = random_buffer<float>(dev, n, 2);
    auto out = dev.alloc<float>(n);
    double ms = bench::gpu_median_ms([&] { add.launch(Grid(n / block), x, y, out, n, block); });
    rows.push_back({"vector_add f32 2^28", 3.0 * 4 * n, ms});
  }
  // The row kernels at several warp counts (a compile-time option): the best is reported, all are printed.
  auto best_over_warps = [&](const char* name, double bytes, const std::function<std::function<void()>(int)>& make) {
    double best = 1e30;
    for (int warps : {4, 8, 16}) {
      double ms = bench::gpu_median_ms(make(warps));
      std::printf("  %-28s num_warps %2d: %8.3f ms %8.1f GB/s\n", name, warps, ms, bytes / ms / 1e6);
      best = std::min(best, ms);
    }
    rows.push_back({name, bytes, best});
  };
  {  // softmax f32: 2^18 rows x 1024, then rows of 1023 (three rows in four start off a 16-byte boundary)
    const int r = 1 << 18;
    auto softmax = [](int warps) {
      return Kernel("softmax", [](Ptr<float> in, Ptr<float> out, Int n_cols, Const<int> block) {
        Long row = cast<int64_t>(program_id(0)) * cast<int64_t>(n_cols);
        Int cols = arange(0, block);
        Bool valid = cols < n_cols;
        Float x = load(in + row + cols, valid, -INFINITY);
        Float e = exp(x - max(x, 0));
        store(out + row + cols, e / sum(e, 0), valid);
      }, KernelOptions{.num_warps = warps});
    };
    for (int c : {1024, 1023}) {
      auto in = random_buffer<float>(dev, size_t(r) * c, 3);
      auto out = dev.alloc<float>(size_t(r) * c);
      best_over_warps(c == 1024 ? "softmax f32 2^18 x 1024" : "softmax f32 2^18 x 1023", 2.0 * 4 * r * c, [&](int warps) {
        Kernel k = softmax(warps);
        return [=, &in, &out] { k.launch(Grid(r), in, out, c, 1024); };
      });
    }
  }
  {  // layernorm / rmsnorm bf16: 2^19 rows x 2048
    const int r = 1 << 19, c = 2048;
    auto x = random_buffer<bf16>(dev, size_t(r) * c, 4), w = random_buffer<bf16>(dev, c, 5), b = random_buffer<bf16>(dev, c, 6);
    auto y = dev.alloc<bf16>(size_t(r) * c);
    best_over_warps("layernorm bf16 2^19 x 2048", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = make_layernorm(KernelOptions{.num_warps = warps});
      return [=, &x, &w, &b, &y] { k.launch(Grid(r), x, w, b, y, c, 1e-5f, c); };
    });
    best_over_warps("rmsnorm bf16 2^19 x 2048", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = make_rmsnorm(KernelOptions{.num_warps = warps});
      return [=, &x, &w, &y] { k.launch(Grid(r), x, w, y, c, 1e-5f, c); };
    });
    // Row loops with the next row prefetched (examples/norms.h), 8 rows per program.
    const int per = 8;
    best_over_warps("layernorm rows-loop bf16", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = make_layernorm_rows(KernelOptions{.num_warps = warps});
      return [=, &x, &w, &b, &y] { k.launch(Grid(r / per), x, w, b, y, c, r, 1e-5f, c, per); };
    });
    best_over_warps("rmsnorm rows-loop bf16", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = make_rmsnorm_rows(KernelOptions{.num_warps = warps});
      return [=, &x, &w, &y] { k.launch(Grid(r / per), x, w, y, c, r, 1e-5f, c, per); };
    });
  }

  {  // the same with rows of odd length (a vocabulary-sized row is rarely a multiple of 8): every other row
     // starts 2 bytes past a 16-byte boundary, so its 16-byte chunks are read as shifted aligned blocks
    const int r = 1 << 19, c = 2047;
    auto x = random_buffer<bf16>(dev, size_t(r) * c, 7), w = random_buffer<bf16>(dev, c, 8), b = random_buffer<bf16>(dev, c, 9);
    auto y = dev.alloc<bf16>(size_t(r) * c);
    best_over_warps("layernorm bf16 2^19 x 2047", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = make_layernorm(KernelOptions{.num_warps = warps});
      return [=, &x, &w, &b, &y] { k.launch(Grid(r), x, w, b, y, c, 1e-5f, 2048); };
    });
    // Which side loses: the same layernorm reading rows of 2047 and writing rows of stride 2048, and the
    // other way round (both masked to 2047 columns).
    auto strided = [](int warps) {
      return Kernel("layernorm_strided", [](Ptr<bf16> x, Ptr<bf16> w, Ptr<bf16> b, Ptr<bf16> y, Int n, Int xs, Int ys,
                                           Float eps, Const<int> block) {
        Long r = cast<int64_t>(program_id(0));
        Int cols = arange(0, block);
        Bool valid = cols < n;
        Float v = cast<float>(load(x + r * cast<int64_t>(xs) + cols, valid, 0));
        Float inv_n = 1.0f / cast<float>(n);
        Float mean = sum(v, 0) * inv_n;
        Float centered = where(valid, v - mean, 0.0f);
        Float rstd = rsqrt(sum(centered * centered, 0) * inv_n + eps);
        Float out = centered * rstd * cast<float>(load(w + cols, valid, 0)) + cast<float>(load(b + cols, valid, 0));
        store(y + r * cast<int64_t>(ys) + cols, cast<bf16>(out), valid);
      }, KernelOptions{.num_warps = warps});
    };
    auto y2 = dev.alloc<bf16>(size_t(r) * 2048);
    auto x2 = random_buffer<bf16>(dev, size_t(r) * 2048, 10);
    best_over_warps("layernorm in 2047 out 2048", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = strided(warps);
      return [=, &x, &w, &b, &y2] { k.launch(Grid(r), x, w, b, y2, c, 2047, 2048, 1e-5f, 2048); };
    });
    best_over_warps("layernorm in 2048 out 2047", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = strided(warps);
      return [=, &x2, &w, &b, &y] { k.launch(Grid(r), x2, w, b, y, c, 2048, 2047, 1e-5f, 2048); };
    });
    const int per = 8;
    best_over_warps("layernorm rows-loop bf16 x 2047", 2.0 * 2 * r * c, [&](int warps) {
      Kernel k = make_layernorm_rows(KernelOptions{.num_warps = warps});
      return [=, &x, &w, &b, &y] { k.launch(Grid(r / per), x, w, b, y, c, r, 1e-5f, 2048, per); };
    });
  }

  double copy_gbs = rows[0].bytes / rows[0].ms / 1e6;
  if (json) std::printf("[\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    double gbs = rows[i].bytes / rows[i].ms / 1e6;
    if (json)
      std::printf("  {\"kernel\": \"%s\", \"ms\": %.4f, \"GBps\": %.1f, \"of_copy\": %.3f}%s\n", rows[i].name, rows[i].ms,
                  gbs, gbs / copy_gbs, i + 1 < rows.size() ? "," : "");
    else
      std::printf("%-30s %9.3f ms %9.1f GB/s  %5.1f%% of copy\n", rows[i].name, rows[i].ms, gbs, 100 * gbs / copy_gbs);
  }
  if (json) std::printf("]\n");
  return 0;
}
