// weft — autotuning: the fastest of a kernel family's configurations for one problem, found once.
//
//   weft::Autotuner<GemmConfig> tuner("my_gemm", candidates, [](const GemmConfig& c) { return c.name(); });
//   GemmConfig best = tuner.best(problem_key, stream,
//                                [&](const GemmConfig& c) { /* compile it: Kernel::compile(...) */ },
//                                [&](const GemmConfig& c) { /* launch it once on `stream` */ });
//
// The first call for a problem compiles every candidate on host threads at once, then times them on the
// stream (a warm-up each, then rounds in which every candidate runs a few launches back to back, the
// candidates interleaved; a candidate's time is its median round, less that of
// AutotuneOptions::before_each_call alone when there is one) and keeps the fastest. A
// candidate whose compile or launch throws weft::Error, or that is slower than the budget, is dropped with a
// line on stderr. The winner is remembered in the process and in weft's compile cache on disk (keyed on the
// family, the problem, every candidate's name, the device, its driver and weft's build), so a later process does not
// tune again. WEFT_AUTOTUNE=0: the first candidate, untuned; WEFT_AUTOTUNE=force: tune even when a winner is
// known (read at every call).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "weft/error.h"
#include "weft/runtime.h"

namespace weft {

struct AutotuneOptions {
  int warmup = 1;            // untimed launches of each candidate after its first
  int rounds = 5;            // timed rounds, every candidate in each; a candidate's median round counts
  int calls_per_round = 3;   // launches per round, back to back between two synchronizations
  double budget_ms = 0;      // a candidate slower than this per launch is dropped (0: no limit)
  int compile_threads = 0;   // host threads compiling candidates (0: one per core, at most 8)
  bool verbose = true;       // progress lines on stderr
  // Launched before every timed launch, e.g. a kernel that evicts the L2, so that each launch reads its
  // operands from DRAM as it would in a workload (launches back to back on the same buffers find them in
  // the L2, and a memory-bound candidate then looks faster than it is). Its own time, measured alone in the
  // same rounds (as one more candidate), is taken out of every candidate's. Empty: nothing.
  std::function<void()> before_each_call = nullptr;
  // After the rounds, the candidates within `finalist_margin` (a fraction) of the best time, at most
  // `finalists` of them, run `final_rounds` more rounds among themselves and are ranked by the median of all
  // their rounds: near-ties (a GPU's run-to-run noise is 1-3%) are decided on more samples. 0 finalists or 0
  // final rounds: off.
  int finalists = 3;
  int final_rounds = 10;
  double finalist_margin = 0.03;
};

// What one tuning found, for reports.
struct AutotuneReport {
  std::string winner;         // the winning candidate's name
  double ms = 0;              // its time per launch (0 when it came from the cache or tuning is off)
  bool from_cache = false;    // found in the process or on disk, not tuned now
  int tried = 0, dropped = 0; // candidates timed, and dropped (compile or launch failed, over budget)
  size_t index = 0;           // the winner's position in the candidate list
  double compile_ms = 0;      // wall time of compiling every candidate (all threads), when tuned now
  double tune_ms = 0;         // wall time of the whole tuning (compiles and timing), when tuned now
};

namespace detail {
enum class AutotuneMode { tune, off, force };
// WEFT_AUTOTUNE: unset or 1 = tune, 0 = off, force = tune again; anything else is an Error.
AutotuneMode autotune_mode(SourceLoc loc);
std::string autotune_key(const std::string& family, const std::string& problem, const Device& device,
                         const std::vector<std::string>& candidate_names);
std::optional<std::string> autotune_cached(const std::string& key);
void autotune_store(const std::string& key, const std::string& winner);
}  // namespace detail

template <class Config>
class Autotuner {
 public:
  using Namer = std::function<std::string(const Config&)>;
  using Action = std::function<void(const Config&)>;

  // `family` names the kernels in messages and cache keys; `name(config)` gives each candidate a stable,
  // distinct name (what the cache stores). The first candidate is the default (WEFT_AUTOTUNE=0).
  Autotuner(std::string family, std::vector<Config> candidates, Namer name, AutotuneOptions options = {},
            SourceLoc loc = SourceLoc::current())
      : family_(std::move(family)), candidates_(std::move(candidates)), name_(std::move(name)), options_(options) {
    if (candidates_.empty()) throw Error("Autotuner '" + family_ + "': no candidate configurations", loc);
    for (const Config& c : candidates_) names_.push_back(name_(c));
    for (size_t i = 0; i < names_.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (names_[i] == names_[j])
          throw Error("Autotuner '" + family_ + "': two candidates are both named '" + names_[i] +
                          "'; give each configuration a distinct name",
                      loc);
  }

  // The best candidate for `problem` (a text naming what decides the winner: shape bucket, dtypes,
  // layouts) on `stream`'s device. `compile(config)` compiles a candidate (it runs on a host thread of its
  // own, beside the others'); `run(config)` launches it once on `stream`.
  Config best(const std::string& problem, const Stream& stream, const Action& compile, const Action& run,
              SourceLoc loc = SourceLoc::current()) {
    return candidates_[best_report(problem, stream, compile, run, loc).index];
  }

  const std::vector<Config>& candidates() const { return candidates_; }

  // The same, with what was found.
  AutotuneReport best_report(const std::string& problem, const Stream& stream, const Action& compile,
                             const Action& run, SourceLoc loc = SourceLoc::current()) {
    detail::AutotuneMode mode = detail::autotune_mode(loc);
    if (mode == detail::AutotuneMode::off) return found(names_[0]);
    Device device = Device::from_backend(stream.backend());
    const std::string key = detail::autotune_key(family_, problem, device, names_);
    std::lock_guard<std::mutex> lock(mutex_);  // one tuning at a time: they would disturb each other's timing
    if (mode != detail::AutotuneMode::force) {
      if (auto it = memo_.find(key); it != memo_.end()) return found(it->second, true);
      if (std::optional<std::string> cached = detail::autotune_cached(key))
        if (std::find(names_.begin(), names_.end(), *cached) != names_.end()) {
          memo_[key] = *cached;
          say("%s [%s]: %s (cached)\n", family_.c_str(), problem.c_str(), cached->c_str());
          return found(*cached, true);
        }
    }
    AutotuneReport report = tune(problem, stream, compile, run, loc);
    memo_[key] = report.winner;
    detail::autotune_store(key, report.winner);
    return report;
  }

 private:
  AutotuneReport found(const std::string& name, bool from_cache = false) const {
    AutotuneReport r;
    r.winner = name;
    r.from_cache = from_cache;
    r.index = index_of(name);
    return r;
  }

  AutotuneReport tune(const std::string& problem, const Stream& stream, const Action& compile, const Action& run,
                      SourceLoc loc) {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    const size_t n = candidates_.size();
    // Compile every candidate, several at once.
    std::vector<std::string> failure(n);
    std::atomic<size_t> next{0};
    unsigned threads = options_.compile_threads > 0 ? unsigned(options_.compile_threads)
                                                    : std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
    threads = std::min<unsigned>(threads, unsigned(n));
    say("%s [%s]: compiling %zu candidates on %u host threads\n", family_.c_str(), problem.c_str(), n, threads);
    auto worker = [&] {
      for (size_t i; (i = next++) < n;) {
        try {
          compile(candidates_[i]);
        } catch (const Error& e) {
          failure[i] = std::string("does not compile: ") + e.what();
        } catch (const std::exception& e) {  // a compiler fault: dropped too (a thread must not let it out)
          failure[i] = std::string("does not compile (compiler fault, please report it): ") + e.what();
        }
      }
    };
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();

    AutotuneReport report;
    report.compile_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    say("%s [%s]: compiled in %.0f ms\n", family_.c_str(), problem.c_str(), report.compile_ms);
    // Time the candidates that compiled: a warm-up each, then rounds in which every candidate runs its
    // launches in turn (starting with a different one each round), so that all see the same clocks: under
    // a power cap a GPU's clocks drift during a tuning, which timing one candidate after the other would
    // turn into a bias for the first.
    std::vector<std::vector<double>> rounds(n);
    std::vector<double> before_alone;
    for (size_t i = 0; i < n; ++i) {
      if (!failure[i].empty()) continue;
      try {
        for (int w = 0; w < 1 + std::max(0, options_.warmup); ++w) run(candidates_[i]);
        stream.synchronize();
      } catch (const Error& e) {
        failure[i] = std::string("fails to run: ") + e.what();
      }
    }
    const bool before = bool(options_.before_each_call);
    // `count` rounds of the candidates `who` (and of before_each_call alone, when set), each round starting
    // with the next one.
    auto time_rounds = [&](const std::vector<size_t>& who, int count) {
      const size_t m = who.size();
      for (int r = 0; r < count; ++r)
        for (size_t k = 0; k < m + before; ++k) {
          const size_t slot = (size_t(r) + k) % (m + before);
          if (slot == m) {
            before_alone.push_back(time_round(nullptr, stream, run));
            continue;
          }
          const size_t i = who[slot];
          if (!failure[i].empty()) continue;
          try {
            rounds[i].push_back(time_round(&candidates_[i], stream, run));
          } catch (const Error& e) {
            failure[i] = std::string("fails to run: ") + e.what();
          }
        }
    };
    std::vector<size_t> everyone(n);
    for (size_t i = 0; i < n; ++i) everyone[i] = i;
    time_rounds(everyone, std::max(1, options_.rounds));
    auto median = [](std::vector<double> t) {
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
      return t[t.size() / 2];
    };
    // Near-ties get more rounds (AutotuneOptions::finalists).
    std::vector<size_t> finalists;
    {
      const double before_so_far = before ? median(before_alone) : 0.0;
      std::vector<std::pair<double, size_t>> ranked;
      for (size_t i = 0; i < n; ++i)
        if (failure[i].empty()) ranked.push_back({std::max(0.0, median(rounds[i]) - before_so_far), i});
      std::sort(ranked.begin(), ranked.end());
      for (const auto& [ms, i] : ranked)
        if (finalists.size() < size_t(std::max(0, options_.finalists)) &&
            ms <= ranked[0].first * (1 + options_.finalist_margin))
          finalists.push_back(i);
    }
    const bool final_ran = finalists.size() > 1 && options_.final_rounds > 0;
    if (final_ran) {
      std::string names;
      for (size_t i : finalists) names += (names.empty() ? "" : ", ") + names_[i];
      say("%s [%s]: %zu within %.0f%% of the best (%s): %d more rounds\n", family_.c_str(), problem.c_str(),
          finalists.size(), 100 * options_.finalist_margin, names.c_str(), options_.final_rounds);
      time_rounds(finalists, options_.final_rounds);
    }
    const double before_ms = before ? median(before_alone) : 0.0;
    double best_ms = 0;
    auto consider = [&](size_t i, double ms) {
      if (report.winner.empty() || ms < best_ms) {
        best_ms = ms;
        report.winner = names_[i];
        report.index = i;
      }
    };
    std::vector<std::optional<double>> ms_of(n);  // per launch; nothing for a dropped candidate
    for (size_t i = 0; i < n; ++i) {
      std::optional<double>& ms = ms_of[i];
      if (failure[i].empty()) {
        ms = std::max(0.0, median(rounds[i]) - before_ms);
        if (options_.budget_ms > 0 && *ms > options_.budget_ms) {
          failure[i] = "over the budget of " + std::to_string(options_.budget_ms) + " ms per launch (" +
                       std::to_string(*ms) + " ms)";
          ms.reset();
        }
      }
      if (!ms) {
        ++report.dropped;
        say("%s [%s]: candidate %zu of %zu (%s) dropped: %s\n", family_.c_str(), problem.c_str(), i + 1, n,
            names_[i].c_str(), failure[i].c_str());
        continue;
      }
      ++report.tried;
      // After final rounds only a finalist can win: the others' rounds are older (another clock, another
      // temperature), and were more than finalist_margin behind.
      const bool contends = !final_ran || std::find(finalists.begin(), finalists.end(), i) != finalists.end();
      if (contends) consider(i, *ms);
      if (report.winner.empty())  // only non-finalists so far
        say("%s [%s]: candidate %zu of %zu (%s): %.4f ms; not a finalist\n", family_.c_str(), problem.c_str(), i + 1,
            n, names_[i].c_str(), *ms);
      else
        say("%s [%s]: candidate %zu of %zu (%s): %.4f ms%s; best so far %s, %.4f ms\n", family_.c_str(),
            problem.c_str(), i + 1, n, names_[i].c_str(), *ms, contends ? "" : " (not a finalist)",
            report.winner.c_str(), best_ms);
    }
    if (report.winner.empty())  // every finalist failed in its final rounds: the best of the others
      for (size_t i = 0; i < n; ++i)
        if (ms_of[i]) consider(i, *ms_of[i]);
    if (report.winner.empty())
      throw Error("Autotuner '" + family_ + "' [" + problem + "]: every candidate was dropped (the first: " +
                      failure[0] + ")",
                  loc);
    report.ms = best_ms;
    report.tune_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
    say("%s [%s]: %s wins, %.4f ms per launch (tuned in %.0f ms)\n", family_.c_str(), problem.c_str(),
        report.winner.c_str(), best_ms, report.tune_ms);
    return report;
  }

  // Milliseconds per launch of one round: `calls_per_round` launches back to back (each after
  // before_each_call), then a synchronization. No candidate (null): before_each_call alone.
  double time_round(const Config* c, const Stream& stream, const Action& run) const {
    using clock = std::chrono::steady_clock;
    const int calls = std::max(1, options_.calls_per_round);
    auto start = clock::now();
    for (int k = 0; k < calls; ++k) {
      if (options_.before_each_call) options_.before_each_call();
      if (c) run(*c);
    }
    stream.synchronize();
    return std::chrono::duration<double, std::milli>(clock::now() - start).count() / calls;
  }

  size_t index_of(const std::string& name) const {
    return size_t(std::find(names_.begin(), names_.end(), name) - names_.begin());
  }

  template <class... A> void say(const char* format, const A&... args) const {
    if (!options_.verbose) return;
    std::fprintf(stderr, "weft: autotune ");
    std::fprintf(stderr, format, args...);
  }

  std::string family_;
  std::vector<Config> candidates_;
  Namer name_;
  AutotuneOptions options_;
  std::vector<std::string> names_;
  std::mutex mutex_;
  std::map<std::string, std::string> memo_;  // key -> winner's name
};

}  // namespace weft
