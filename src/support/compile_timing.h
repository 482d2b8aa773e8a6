// Where a kernel's compile time goes, stage by stage (WEFT_TIME_PASSES=1, benchmarks/bench_compile).
//
// A CompileRecording spans the compile of one kernel specialization on the thread that compiles it
// (Kernel::launch's first launch, Kernel::compile, Kernel::ptx, weft::compile_all's workers). Code that does
// a stage's work opens a StageTimer; its time goes to the recording of the same thread, if there is one
// (none: the timer costs a thread-local read). A stage timed inside another one (the task plan inside
// LLVM IR construction) is taken out of the outer stage, so the stages never count a millisecond twice.
// When the recording ends, its times become last_compile_times() for the thread, and with
// WEFT_TIME_PASSES=1 one line on stderr:
//   weft: compile 'softmax' for sm_90a: trace 0.21 ms, passes 0.04, llvm-ir 0.61, llvm-opt 3.10,
//         codegen 2.20, link 0.00, load 0.00 | own 6.31 ms (other 0.15), total 6.31 ms
// `own` is everything before the driver (total - link - load); `other` is the part of it no stage claims.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace weft::support {

enum class CompileStage : int {
  trace,     // running the user's C++ into IR
  passes,    // the verifier and the plans (tasks, shared memory, layouts, access patterns)
  llvm_ir,   // building the LLVM module
  llvm_opt,  // LLVM's optimization pipeline
  codegen,   // LLVM's code generator: PTX text (NVPTX) or an object file (CPU)
  link,      // the driver's PTX compile + load (cuModuleLoadDataEx), or ORC linking the object (CPU)
  load,      // loading a linked image (0: the CUDA driver compiles and loads in one call)
};
constexpr int kCompileStages = 7;

// "trace", "passes", "llvm-ir", "llvm-opt", "codegen", "link", "load".
const char* stage_name(CompileStage s);

struct CompileTimes {
  std::string kernel;
  std::string target;           // the backend's name, or the architecture for Kernel::ptx
  double ms[kCompileStages] = {};
  double total_ms = 0;          // wall time of the whole recording

  double stage(CompileStage s) const { return ms[static_cast<int>(s)]; }
  // Everything before the driver: the total without link and load.
  double own_ms() const { return total_ms - stage(CompileStage::link) - stage(CompileStage::load); }
  // WEFT_TIME_PASSES's line (without the "weft: " prefix and newline).
  std::string str() const;
};

class CompileRecording {
 public:
  CompileRecording(std::string kernel, std::string target);
  ~CompileRecording();  // publishes the times (also when the compile throws: they are still true)
  CompileRecording(const CompileRecording&) = delete;
  CompileRecording& operator=(const CompileRecording&) = delete;

 private:
  CompileTimes times_;
  std::chrono::steady_clock::time_point start_;
  CompileRecording* outer_;  // a recording this one interrupts on the same thread, and its open stage
  int outer_stage_;
  friend class StageTimer;
  friend class RecordingPause;
};

class StageTimer {
 public:
  explicit StageTimer(CompileStage stage);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  int stage_;
  int outer_;  // the stage this one interrupts, or -1
  std::chrono::steady_clock::time_point outer_since_;
};

// Times spent outside any recording stay unrecorded: e.g. WEFT_CHECK_PTX's extra PTX compile inside the
// trace of a specialization is not the kernel's compile time. Holds the recording off while it lives.
class RecordingPause {
 public:
  RecordingPause();
  ~RecordingPause();
  RecordingPause(const RecordingPause&) = delete;
  RecordingPause& operator=(const RecordingPause&) = delete;

 private:
  CompileRecording* paused_;
  int paused_stage_;
};

// The times of the last recording that ended on this thread.
std::optional<CompileTimes> last_compile_times();

// The most recordings open at once, over all threads, since the last call (which resets it to those open
// now): how many compiles ran side by side (Kernel::compile_async's test).
int take_peak_concurrent_compiles();

}  // namespace weft::support
