// bench_gemm_host: what a gemm() call costs on the host, and whether that cost shows on the GPU.
//
//   bench_gemm_host [--runs N]
//
// For short products (10-30 µs, where the sweep's worst rows are) and one large square: the host time of a
// call (200 calls queued without waiting, per call) of cuBLASLt, of gemm() (examples/gemm.h: its choice looked
// up, the launch planned — TMA descriptors made — and launched) and of the same launch planned in advance;
// then the three timed on the GPU interleaved call by call (inputs rotated past the L2, as bench_gemm does). If
// gemm()'s host time passed its GPU time, the GPU would idle inside its events and its GPU time would exceed the
// planned launch's. benchmarks/NOTES.md (session 22) has the figures: it does not.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../examples/gemm.h"
#include "bench_data.h"
#include "cublaslt.h"
#include "gpu_timing.h"

using namespace weft;

namespace {

constexpr size_t kL2Bytes = size_t(60) << 20;  // the H200's (50 MB on an H100)

struct Product {
  int M, N, K;
  bool b_is_nk;
};

// Host microseconds per call of `call`, `calls` of them queued back to back (the queue does not fill at 200).
double host_us(const Device& dev, const std::function<void()>& call, int calls = 200) {
  for (int i = 0; i < 20; ++i) call();
  dev.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
  dev.synchronize();
  return us;
}

}  // namespace

int main(int argc, char** argv) try {
  int runs = 40;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc && std::atoi(argv[i + 1]) >= 10) runs = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_gemm_host [--runs N>=10]\n");
      return 2;
    }
  }
  Device dev = Device::current();
  if (dev.kind() != BackendKind::cuda) {
    std::fprintf(stderr, "bench_gemm_host needs a CUDA device (current device: %s)\n", dev.name().c_str());
    return 1;
  }
  Buffer<uint8_t> workspace = dev.alloc<uint8_t>(size_t(32) << 20);  // makes the primary context current
  bench::cublaslt::CublasLt lt;
  std::printf("gemm() host cost on %s (µs; host: per call, 200 queued; GPU: median of %d interleaved calls)\n",
              dev.name().c_str(), 2 * runs);
  std::printf("%5s %6s %6s %4s | %-30s | %8s %8s %8s | %8s %8s %8s\n", "M", "N", "K", "B", "weft config", "host cuB",
              "gemm()", "planned", "GPU cuB", "gemm()", "planned");
  for (Product s : {Product{64, 1024, 8192, false}, Product{64, 4096, 4096, false}, Product{16, 4096, 4096, false},
                    Product{1024, 1000, 1000, true}, Product{1024, 1024, 8192, false}, Product{64, 1000, 1000, false},
                    Product{256, 1024, 8192, false}, Product{1, 4096, 4096, true}, Product{1, 1000, 1000, true},
                    Product{4096, 4096, 4096, true}}) {
    const int M = s.M, N = s.N, K = s.K;
    const size_t set_bytes = 2 * (size_t(M) * K + size_t(K) * N);
    const size_t sets = 1 + (2 * kL2Bytes + set_bytes - 1) / set_bytes;
    std::vector<Buffer<bf16>> a, b;
    for (size_t i = 0; i < sets; ++i) {
      a.push_back(dev.upload(bench::random_values<bf16>(size_t(M) * K, 2 * i + 1)));
      b.push_back(dev.upload(bench::random_values<bf16>(size_t(K) * N, 2 * i + 2)));
    }
    Buffer<bf16> c = dev.alloc<bf16>(size_t(M) * N), c_planned = dev.alloc<bf16>(size_t(M) * N);
    bench::cublaslt::Bf16Gemm cublas(lt, M, N, K, s.b_is_nk, bench::device_ptr(workspace), workspace.bytes());
    const GemmChoice choice = gemm(a[0], b[0], c, M, N, K, s.b_is_nk);  // tunes the bucket if it must
    dev.synchronize();
    const bool planned = choice.warp_specialized() && !choice.padded;
    std::vector<gemm_detail::GemmLaunch> plans;
    if (planned)
      for (size_t i = 0; i < sets; ++i)
        plans.push_back(gemm_detail::plan_gemm(choice.config, a[i], b[i], c_planned, M, N, K, s.b_is_nk, SourceLoc::current()));
    size_t n_cublas = 0, n_gemm = 0, n_plan = 0;
    auto run_cublas = [&] {
      size_t i = n_cublas++ % sets;
      cublas.run(bench::device_ptr(a[i]), bench::device_ptr(b[i]), bench::device_ptr(c), nullptr);
    };
    auto run_gemm = [&] {
      size_t i = n_gemm++ % sets;
      gemm(a[i], b[i], c, M, N, K, s.b_is_nk);
    };
    auto run_plan = [&] { plans[n_plan++ % sets].run(dev.stream(), SourceLoc::current()); };
    const double h_cublas = host_us(dev, run_cublas), h_gemm = host_us(dev, run_gemm);
    const double h_plan = planned ? host_us(dev, run_plan) : 0;
    std::vector<std::function<void()>> works = {run_cublas, run_gemm};
    if (planned) works.push_back(run_plan);
    const bench::RoundTimes t = bench::gpu_times_ms_rounds(works, 2, runs);
    dev.synchronize();
    const std::string config = choice.name();
    std::printf("%5d %6d %6d %4s | %-30s | %8.1f %8.1f %8s | %8.1f %8.1f %8s\n", M, N, K, s.b_is_nk ? "NxK" : "KxN",
                config.c_str(), h_cublas, h_gemm, planned ? std::to_string(h_plan).substr(0, 5).c_str() : "-",
                1000 * t.median_ms(0), 1000 * t.median_ms(1),
                planned ? std::to_string(1000 * t.median_ms(2)).substr(0, 5).c_str() : "-");
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemm_host: %s\n", e.what());
  return 1;
}
