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

}  // namespace bench
