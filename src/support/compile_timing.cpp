#include "support/compile_timing.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>

#include "support/env.h"

namespace weft::support {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// This thread's open recording, the stage being timed in it (-1: none) and since when.
struct ThreadState {
  CompileRecording* recording = nullptr;
  int stage = -1;
  Clock::time_point since;
};
thread_local ThreadState state;
thread_local std::optional<CompileTimes> last;
std::atomic<int> open_recordings{0}, peak_recordings{0};

}  // namespace

const char* stage_name(CompileStage s) {
  static const char* const names[kCompileStages] = {"trace",   "passes", "llvm-ir", "llvm-opt",
                                                    "codegen", "link",   "load"};
  return names[static_cast<int>(s)];
}

std::string CompileTimes::str() const {
  std::string stages;
  double claimed = 0;
  for (int i = 0; i < kCompileStages; ++i) {
    stages += fmt::format("{}{} {:.2f}{}", i ? ", " : "", stage_name(static_cast<CompileStage>(i)), ms[i], i ? "" : " ms");
    if (i != static_cast<int>(CompileStage::link) && i != static_cast<int>(CompileStage::load)) claimed += ms[i];
  }
  return fmt::format("compile '{}' for {}: {} | own {:.2f} ms (other {:.2f}), total {:.2f} ms", kernel, target, stages,
                     own_ms(), own_ms() - claimed, total_ms);
}

CompileRecording::CompileRecording(std::string kernel, std::string target)
    : start_(Clock::now()), outer_(state.recording), outer_stage_(state.stage) {
  times_.kernel = std::move(kernel);
  times_.target = target.substr(0, target.find(" ("));  // "sm_90a", not why it cannot run here
  if (outer_ && outer_stage_ >= 0) outer_->times_.ms[outer_stage_] += ms_between(state.since, start_);
  state.recording = this;
  state.stage = -1;
  const int open = ++open_recordings;
  for (int peak = peak_recordings.load(); open > peak && !peak_recordings.compare_exchange_weak(peak, open);) {
  }
}

CompileRecording::~CompileRecording() {
  const Clock::time_point now = Clock::now();
  times_.total_ms = ms_between(start_, now);
  --open_recordings;
  state.recording = outer_;
  state.stage = outer_stage_;
  state.since = now;
  bool print = false;
  try {
    print = knobs().time_passes;
  } catch (...) {  // a bad knob is reported by the compile itself
  }
  if (print) std::fprintf(stderr, "weft: %s\n", times_.str().c_str());
  last = std::move(times_);
}

StageTimer::StageTimer(CompileStage stage) : stage_(-1), outer_(-1) {
  if (!state.recording) return;
  const Clock::time_point now = Clock::now();
  if (state.stage >= 0) state.recording->times_.ms[state.stage] += ms_between(state.since, now);
  stage_ = static_cast<int>(stage);
  outer_ = state.stage;
  state.stage = stage_;
  state.since = now;
}

StageTimer::~StageTimer() {
  if (stage_ < 0 || !state.recording || state.stage != stage_) return;  // paused or ended meanwhile
  const Clock::time_point now = Clock::now();
  state.recording->times_.ms[stage_] += ms_between(state.since, now);
  state.stage = outer_;
  state.since = now;
}

RecordingPause::RecordingPause() : paused_(state.recording), paused_stage_(state.stage) {
  if (paused_ && paused_stage_ >= 0) paused_->times_.ms[paused_stage_] += ms_between(state.since, Clock::now());
  state.recording = nullptr;
  state.stage = -1;
}

RecordingPause::~RecordingPause() {
  state.recording = paused_;
  state.stage = paused_stage_;
  state.since = Clock::now();
}

std::optional<CompileTimes> last_compile_times() { return last; }

int take_peak_concurrent_compiles() { return peak_recordings.exchange(open_recordings.load()); }

}  // namespace weft::support
