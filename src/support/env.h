// All of weft's environment knobs, read in one place.
//   WEFT_DUMP=ir,llvm,llvm-opt,ptx,sass|all  print each compiled kernel at these stages (stderr, or files)
//   WEFT_DUMP_DIR=dir                 write dumps as files under dir instead of stderr
//   WEFT_BACKEND=cpu|cuda|hip         choose the backend instead of the best available one
//   WEFT_CUDA_DEVICE=n                the CUDA device the cuda backend uses (default 0)
//   WEFT_TARGET=sm_90a                with no such GPU present: compile for it anyway (dumps work, launches
//                                     fail with an Error)
//   WEFT_CPU_THREADS=n                host threads the CPU backend spreads a grid over (default: all cores)
//   WEFT_CPU_SCHED_SEED=n             CPU backend: resume a block's fibers (task replicas) in an order
//                                     shuffled by seed n each round, to expose races (default: round-robin
//                                     in task order); read at every launch
//   WEFT_DEBUG=1                      GPU debug mode (also KernelOptions::debug, per kernel): every mbarrier
//                                     wait gives up after WEFT_DEBUG_TIMEOUT_MS, records where it waited and
//                                     traps; the CUDA backend synchronizes after each launch and throws a
//                                     weft::Error naming block, task, replica, barrier, phase and line (slow:
//                                     for finding deadlocks, and launches cannot be captured in a graph)
//   WEFT_DEBUG_TIMEOUT_MS=n           debug mode: how long one barrier wait may take (default 5000)
//   WEFT_CHECK_BOUNDS=1|0             CPU backend: check every load and store against the allocation its
//                                     pointer comes from (default: on with WEFT_DEBUG=1, else off)
//   WEFT_CHECK_PTX=sm_90a             also lower every traced kernel specialization to PTX for this
//                                     architecture and assemble it with ptxas (from PATH, else
//                                     /usr/local/cuda/bin/ptxas), on any backend: ptxas's refusal, or no
//                                     ptxas, is an Error (src/driver/ptx_check.h)
//   WEFT_VERIFY_LLVM=1|0              run LLVM's verifier on each lowered module before its passes (an invalid
//                                     one is an InternalError; default: on in builds without NDEBUG, off in
//                                     release builds, where it cost a tenth of a compile; the tests turn it on)
//   WEFT_TIME_PASSES=1                print each kernel's compile time by stage on stderr, one line per
//                                     compiled kernel (src/support/compile_timing.h)
//   WEFT_NVPTX_PASSES=pipeline        the LLVM passes run on NVPTX modules instead of weft's own
//                                     (LLVM's textual syntax; "default<O3>": LLVM's O3), to compare
//   WEFT_LLVM_ARGS='-opt ...'         options for LLVM's own command line, given once per process before
//                                     the first compile (e.g. -debug-counter=...; codegen/llvm_options.h)
//   WEFT_NVPTX_SKIP=name,...          the code generator's optional passes to skip instead of weft's list
//                                     (legacy pass names, e.g. slsr; "none": run them all), to compare
//   WEFT_PTX_EMITTER=llvm|weft        who writes a kernel's PTX from its optimized LLVM module: weft's own
//                                     emitter (default; ~7x faster than LLVM's; codegen/nvptx/ptx_emitter.h),
//                                     which falls back to LLVM's for IR it does not handle, or LLVM's NVPTX
//                                     code generator
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace weft::support {

#ifdef NDEBUG
inline constexpr bool kVerifyLlvmByDefault = false;
#else
inline constexpr bool kVerifyLlvmByDefault = true;
#endif

struct Knobs {
  std::string dump;  // comma-separated stages
  std::string dump_dir;
  std::string backend;
  std::string target;
  int cpu_threads = 0;  // 0: hardware concurrency
  int cuda_device = 0;  // device ordinal
  bool debug = false;
  bool check_bounds = false;  // WEFT_CHECK_BOUNDS (default: WEFT_DEBUG)
  int64_t debug_timeout_ms = 5000;
  std::string check_ptx;  // an architecture, e.g. sm_90a; empty: no check
  bool time_passes = false;
  bool verify_llvm = kVerifyLlvmByDefault;  // WEFT_VERIFY_LLVM
  std::string nvptx_passes;  // an LLVM pass pipeline; empty: weft's (codegen/nvptx/nvptx_pipeline.h)
  std::string llvm_args;     // options for LLVM's command line (codegen/llvm_options.h)
  std::optional<std::string> nvptx_skip;  // code generator passes to skip; unset: weft's list (same header)
  bool weft_ptx_emitter = true;            // WEFT_PTX_EMITTER=weft (the default) or llvm

  bool dumps(std::string_view stage) const;
  // Whether an LLVM IR dump (`llvm` or `llvm-opt`) is asked for: the IR then keeps its local value names, and
  // a compile does not load the kernel from a cache (it would write no dump).
  bool dumps_llvm_ir() const { return dumps("llvm") || dumps("llvm-opt"); }
};

// The knobs of this process, read from the environment at the first call. A value weft does not understand
// (an unknown dump stage, a number that is not one, ...) is a weft::Error naming the variable and what it
// takes, at that call and every later one. WEFT_TARGET and WEFT_CHECK_PTX are checked where they are used
// (against the architectures LLVM knows, codegen/nvptx/compile_ptx.h): when the device is chosen and when a
// kernel is traced.
const Knobs& knobs();

// The host's cores (std::thread::hardware_concurrency(), at least 1), asked once: glibc reads /sys at each
// call, which cost a CPU-backend launch plan microseconds.
int host_cores();

// The same from `lookup` (a getenv: null for an unset variable); for tests.
Knobs parse_knobs(const std::function<const char*(const char*)>& lookup);

// The stages WEFT_DUMP takes, in pipeline order.
extern const char* const kDumpStages[5];

// WEFT_CPU_SCHED_SEED, read anew at each call (unlike knobs(): tests and tools change it between
// launches); nothing when unset or empty. Throws weft::Error when it is not a number.
std::optional<uint64_t> cpu_sched_seed();

// Emit one dump of `text` for `kernel` at `stage` (file suffix `ext`), when WEFT_DUMP names the stage.
// Throws weft::Error when WEFT_DUMP_DIR cannot be used (see write_dump_file).
void dump(std::string_view stage, std::string_view kernel, std::string_view ext, std::string_view text);

// Writes `text` to dir/file_name, creating `dir` (and its parents) if needed. A `dir` that is not a directory,
// cannot be created or cannot be written is a weft::Error naming it and why (WEFT_DUMP_DIR's dumps).
void write_dump_file(const std::string& dir, const std::string& file_name, std::string_view text);

}  // namespace weft::support
