// bench_cpu_compile: how long the CPU backend takes from nothing to a result for the matmul example at
// 256^3 — trace, compile (LLVM O2 + ORC) and run — in a fresh process. Target: under 1 s in all.
// Prints each phase; the first phase includes the one-time JIT start-up of the process.
#include <chrono>
#include <cstdio>
#include <random>

#include "../examples/matmul.h"

using namespace weft;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int main() {
  const int n = 256, block = 32;
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<bf16> a(n * n), b(n * n);
  for (bf16& v : a) v = dist(rng);
  for (bf16& v : b) v = dist(rng);
  Device dev = Device::cpu();
  Device::set_current(dev);
  Buffer<bf16> da = dev.upload(a), db = dev.upload(b);
  Buffer<float> dc = dev.alloc<float>(n * n);

  auto start = Clock::now();
  Kernel matmul = make_matmul();
  std::string ir = matmul.ir(block, block, block);  // trace only
  double trace_ms = ms_since(start);
  auto t1 = Clock::now();
  matmul.launch(Grid(n / block, n / block), da, db, dc, n, n, n, block, block, block);  // compile + run
  double compile_run_ms = ms_since(t1);
  double total_ms = ms_since(start);
  auto t2 = Clock::now();
  matmul.launch(Grid(n / block, n / block), da, db, dc, n, n, n, block, block, block);  // warm run
  double warm_ms = ms_since(t2);

  std::printf("bench_cpu_compile: matmul %d^3 (blocks %d^3) on the CPU backend\n", n, block);
  std::printf("  trace                 %8.1f ms\n", trace_ms);
  std::printf("  compile + first run   %8.1f ms\n", compile_run_ms);
  std::printf("  total                 %8.1f ms   (target < 1000 ms): %s\n", total_ms, total_ms < 1000 ? "met" : "MISSED");
  std::printf("  warm run              %8.1f ms\n", warm_ms);
  return 0;
}
