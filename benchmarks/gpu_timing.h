// Timing GPU work in the benchmarks with CUDA events, as METHOD.md asks: warm up, then the median of many
// timed runs. Each run is bracketed by its own pair of events on the default stream.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <weft/weft.h>

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

// Keeps the default stream busy for about `us` microseconds (capped at half a second): one thread waits on the
// GPU's global timer, so that the work queued after it meanwhile then runs back to back.
inline void hold_stream(double us) {
  static const weft::Kernel hold("bench_hold_stream", [](weft::Int microseconds) {
    using namespace weft;
    Long until = max(global_timer(), 0) + cast<int64_t>(microseconds) * 1000;  // (one value: the warp's latest reading)
    while_([&] { return max(global_timer(), 0) < until; }, [] { nanosleep(2000); });
  }, weft::KernelOptions{.num_warps = 1});
  hold.launch(weft::Grid(1), int(std::min(us, 5e5)));
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
//
// The timed calls are queued behind a kernel that holds the stream (hold_stream) for as long as the host
// took to queue the warm-up's calls, scaled to the timed ones: calls whose host time (cuBLASLt's 6-15 µs,
// a weft launch's 4-6) exceeds their GPU time would otherwise find the GPU idle, and each pair of events
// would time the host's work before the launch as well as the kernel (seen on the 1000 x 1000 products,
// benchmarks/NOTES.md session 26). Behind the hold, the GPU runs the queued calls back to back, as nvbench's
// blocking kernel makes it do.
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
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup; ++i)
    for (const auto& w : works) w();
  const double warmup_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  // The host's time to queue the timed calls (with their events), from the warm-up's, with a margin.
  // (WEFT_BENCH_NO_HOLD=1: without it, as before session 26, to compare.)
  if (!std::getenv("WEFT_BENCH_NO_HOLD")) hold_stream(1.5 * warmup_us * runs / std::max(warmup, 1) + 200);
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
