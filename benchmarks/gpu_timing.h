// Timing GPU work in the benchmarks with CUDA events, as METHOD.md asks: warm up, then the median of many
// timed runs. Each run is bracketed by its own pair of events on the default stream.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "driver/cuda/cuda_driver.h"

namespace bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `work` (which enqueues GPU work on the default stream) over `runs` runs.
inline double gpu_median_ms(const std::function<void()>& work, int warmup = 3, int runs = 20) {
  using namespace weft::driver::cuda;
  const CudaDriver& cu = cuda_driver();
  CUevent start, stop;
  check(cu.cuEventCreate(&start, 0), "cuEventCreate", "benchmark");
  check(cu.cuEventCreate(&stop, 0), "cuEventCreate", "benchmark");
  for (int i = 0; i < warmup; ++i) work();
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    check(cu.cuEventRecord(start, nullptr), "cuEventRecord", "benchmark");
    work();
    check(cu.cuEventRecord(stop, nullptr), "cuEventRecord", "benchmark");
    check(cu.cuEventSynchronize(stop), "cuEventSynchronize", "benchmark");
    float ms = 0;
    check(cu.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime", "benchmark");
    times.push_back(ms);
  }
  cu.cuEventDestroy(start);
  cu.cuEventDestroy(stop);
  return median(times);
}

// Milliseconds of each of `runs` runs of `work`, queued back to back, each between its own pair of events,
// and waited for once at the end (as triton's do_bench does). The host's launch overhead then overlaps
// the previous run instead of counting as idle time inside the events, which matters for runs of a
// fraction of a millisecond (a 4096^3 bf16 GEMM on an H200 takes about 0.2 ms).
inline std::vector<double> gpu_times_ms_queued(const std::function<void()>& work, int warmup = 3, int runs = 20) {
  using namespace weft::driver::cuda;
  const CudaDriver& cu = cuda_driver();
  std::vector<CUevent> start(runs), stop(runs);
  for (int i = 0; i < runs; ++i) {
    check(cu.cuEventCreate(&start[i], 0), "cuEventCreate", "benchmark");
    check(cu.cuEventCreate(&stop[i], 0), "cuEventCreate", "benchmark");
  }
  for (int i = 0; i < warmup; ++i) work();
  for (int i = 0; i < runs; ++i) {
    check(cu.cuEventRecord(start[i], nullptr), "cuEventRecord", "benchmark");
    work();
    check(cu.cuEventRecord(stop[i], nullptr), "cuEventRecord", "benchmark");
  }
  check(cu.cuEventSynchronize(stop[runs - 1]), "cuEventSynchronize", "benchmark");
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    float ms = 0;
    check(cu.cuEventElapsedTime(&ms, start[i], stop[i]), "cuEventElapsedTime", "benchmark");
    times.push_back(ms);
    cu.cuEventDestroy(start[i]);
    cu.cuEventDestroy(stop[i]);
  }
  return times;
}

}  // namespace bench
