// Timing GPU work in the benchmarks with CUDA events, as METHOD.md asks: warm up, then the median of many
// timed runs. Each run is bracketed by its own pair of events on the default stream.
#pragma once

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "driver/cuda/cuda_driver.h"

namespace bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "0.1025/0.1032/0.1036": per-round medians in milliseconds, for a benchmark's row.
inline std::string rounds_text(const std::vector<double>& round_medians) {
  std::string t;
  for (double r : round_medians) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.4f", t.empty() ? "" : "/", r);
    t += buf;
  }
  return t;
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

// Milliseconds of each contender's `runs` runs, the contenders interleaved call by call: run i calls every
// contender once, starting with contender i % n (so none always follows the same one), each call between
// its own pair of events, all queued back to back and waited for once (as triton's do_bench does: the host's
// launch overhead overlaps the previous call instead of counting as idle time inside the events, which
// matters for calls of a fraction of a millisecond). Contenders then share the GPU's
// clock and temperature history: under a power cap the H200's clocks drift by 10-20% over a few hundred
// milliseconds of dense GEMMs, which blocks of one contender's calls at a time turn into a bias.
inline std::vector<std::vector<double>> gpu_times_ms_interleaved(const std::vector<std::function<void()>>& works,
                                                                 int warmup = 3, int runs = 20) {
  using namespace weft::driver::cuda;
  const CudaDriver& cu = cuda_driver();
  const size_t n = works.size();
  std::vector<CUevent> start(n * runs), stop(n * runs);
  for (size_t i = 0; i < n * runs; ++i) {
    check(cu.cuEventCreate(&start[i], 0), "cuEventCreate", "benchmark");
    check(cu.cuEventCreate(&stop[i], 0), "cuEventCreate", "benchmark");
  }
  for (int i = 0; i < warmup; ++i)
    for (const auto& w : works) w();
  for (int r = 0; r < runs; ++r)
    for (size_t k = 0; k < n; ++k) {
      const size_t which = (size_t(r) + k) % n, slot = which * runs + r;
      check(cu.cuEventRecord(start[slot], nullptr), "cuEventRecord", "benchmark");
      works[which]();
      check(cu.cuEventRecord(stop[slot], nullptr), "cuEventRecord", "benchmark");
    }
  for (size_t i = 0; i < n * runs; ++i) check(cu.cuEventSynchronize(stop[i]), "cuEventSynchronize", "benchmark");
  std::vector<std::vector<double>> times(n);
  for (size_t which = 0; which < n; ++which)
    for (int r = 0; r < runs; ++r) {
      const size_t slot = which * runs + r;
      float ms = 0;
      check(cu.cuEventElapsedTime(&ms, start[slot], stop[slot]), "cuEventElapsedTime", "benchmark");
      times[which].push_back(ms);
    }
  for (size_t i = 0; i < n * runs; ++i) {
    cu.cuEventDestroy(start[i]);
    cu.cuEventDestroy(stop[i]);
  }
  return times;
}

// Each contender's times over `rounds` rounds of gpu_times_ms_interleaved: every time, and each round's median
// (their spread says how steady the GPU was).
struct RoundTimes {
  std::vector<std::vector<double>> all, round_medians;  // [contender][time], [contender][round]
  double median_ms(size_t contender) const { return median(all[contender]); }
};
inline RoundTimes gpu_times_ms_rounds(const std::vector<std::function<void()>>& works, int rounds, int runs) {
  RoundTimes out{std::vector<std::vector<double>>(works.size()), std::vector<std::vector<double>>(works.size())};
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::vector<double>> t = gpu_times_ms_interleaved(works, 3, runs);
    for (size_t which = 0; which < works.size(); ++which) {
      out.round_medians[which].push_back(median(t[which]));
      out.all[which].insert(out.all[which].end(), t[which].begin(), t[which].end());
    }
  }
  return out;
}

}  // namespace bench
