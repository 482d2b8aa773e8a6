// GPU debug mode (WEFT_DEBUG=1, KernelOptions::debug): mbarrier waits that time out, write a record to host
// memory and trap; the host turns the record into a weft::Error (codegen/nvptx/debug_waits.h,
// passes/wait_sites.h). Without a GPU: the PTX of the timed wait (and ptxas's verdict on it), the cache
// key, the site table and the message made from a record. With one ([gpu]): a real deadlock that throws.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "codegen/nvptx/compile_ptx.h"
#include "ptxas_check.h"
#include "driver/backend.h"
#include "driver/cuda/cuda_driver.h"
#include "dsl/trace.h"
#include "passes/wait_sites.h"
#include "support/env.h"
#include "test_util.h"

using namespace weft;
using Catch::Matchers::Contains;

namespace {

std::string at(int line) { return std::string(__FILE__) + ":" + std::to_string(line); }

struct Lines {
  int producer_wait = 0, consumer_wait = 0;
};

// A producer that waits for its empty slot correctly (a fresh barrier's phase of parity 1 counts as done)
// and never arrives at `ready`; consumers (two replicas) wait for phase 0 of 'ready[1]', which nobody
// completes: a deadlock.
void stuck_consumer_body(Ptr<float> out, Lines& lines) {
  auto ready = alloc_barriers(2, 1, "ready");
  auto empty = alloc_barriers(1, 1, "empty");
  async_tasks(
      task("producer", {.warps = 1}, [&] {
        lines.producer_wait = __LINE__; barrier_wait(empty[0], 1);
        store(out + arange(0, 32), full<float>({32}, 1.0));
      }),
      task("consumer", {.warps = 4, .replicas = 2}, [&] {
        lines.consumer_wait = __LINE__; barrier_wait(ready[1], 0);
        store(out + arange(0, 32), full<float>({32}, 2.0));
      }));
}

std::shared_ptr<const ir::Function> trace_stuck_consumer(Lines& lines) {
  std::vector<detail::ParamInfo> params = {{false, dtype_of<Pointer<float>>}};
  return dsl::trace_kernel(
      "stuck_consumer", params,
      [&](const detail::TraceInputs& in) { stuck_consumer_body(Ptr<float>(in.values[0]), lines); },
      std::vector<detail::KernelArg>(1), 0, SourceLoc::current());
}

// ptxas accepts `ptx` for sm_90a (skipped, saying so, where there is no ptxas).
void check_ptxas_accepts(const std::string& ptx, const std::string& stem) {
  std::string ptxas = weft_test::find_ptxas();
  if (ptxas.empty()) {
    WARN("SKIPPED the ptxas check: no ptxas on PATH or at /usr/local/cuda/bin/ptxas");
    return;
  }
  weft_test::PtxasRun run = weft_test::run_ptxas(ptxas, ptx, "");
  INFO(stem << ": ptxas said:\n" << run.output);
  CHECK(run.status == 0);
}

// The CUDA device, or nullopt with the reason printed where there is none (the case then ends).
std::optional<Device> gpu_or_skip() {
  std::string why_not;
  if (!driver::cuda::cuda_available(&why_not)) {
    WARN("SKIPPED on the GPU: " << why_not);
    return std::nullopt;
  }
  detail::Backend* backend = detail::cuda_backend_or_null(&why_not);
  INFO(why_not);
  REQUIRE(backend != nullptr);
  return Device::from_backend(*backend);
}

}  // namespace

TEST_CASE("debug mode: mbarrier waits time out by %globaltimer then record and trap", "[async][debug]") {
  Lines lines;
  auto f = trace_stuck_consumer(lines);
  codegen::nvptx::PtxKernel plain = codegen::nvptx::compile_to_ptx(*f, KernelOptions{.num_warps = 4}, {});
  codegen::nvptx::PtxKernel debug =
      codegen::nvptx::compile_to_ptx(*f, KernelOptions{.num_warps = 4, .debug = true}, {});
  CHECK(debug.debug);
  const std::string& ptx = debug.ptx;
  INFO(ptx);
  // Three hidden trailing parameters (record, claim word, timeout), after the user's one.
  if (!support::knobs().debug) {
    CHECK_FALSE(plain.debug);
    CHECK(weft_test::count_occurrences(plain.ptx, ".param .u64") == 1);
    CHECK(weft_test::count_occurrences(plain.ptx, "%globaltimer") == 0);
    CHECK(weft_test::count_occurrences(plain.ptx, "trap;") == 0);
  }
  CHECK(weft_test::count_occurrences(ptx, ".param .u64") == 4);
  // Both waits poll with a clock, and share one reporting function that claims the record, fences at
  // system scope, and traps (its losers exit).
  CHECK(weft_test::count_occurrences(ptx, "mbarrier.try_wait.parity.shared::cta.b64") == 4);  // a first try and the poll, per wait
  CHECK(weft_test::count_occurrences(ptx, "%globaltimer") == 4);
  CHECK_THAT(ptx, Contains(".func weft_debug_wait_timed_out("));
  CHECK(weft_test::count_occurrences(ptx, "call.uni weft_debug_wait_timed_out") + weft_test::count_occurrences(ptx, "call weft_debug_wait_timed_out") == 2);
  CHECK_THAT(ptx, Contains("atom.") && Contains(".cas.b32"));
  CHECK(weft_test::count_occurrences(ptx, "fence.sc.sys;") == 2);
  CHECK(weft_test::count_occurrences(ptx, "trap;") == 1);
  CHECK_THAT(ptx, Contains("exit;"));

  check_ptxas_accepts(ptx, "weft-test-debug-mode");
}

TEST_CASE("debug mode: a debug kernel's PTX goes through WEFT_CHECK_PTX like any other", "[async][debug]") {
  // Under ctest's ptxas_accepts_every_test_kernel (WEFT_CHECK_PTX=sm_90a), tracing checks the debug PTX too.
  Lines lines;
  Kernel k("stuck_consumer", [&](Ptr<float> out) { stuck_consumer_body(out, lines); },
           KernelOptions{.num_warps = 4, .debug = true});
  CHECK_THAT(k.ir(), Contains("barrier_wait"));
}

TEST_CASE("debug mode is part of the CUDA module's cache key", "[debug]") {
  Lines lines;
  auto f = trace_stuck_consumer(lines);
  codegen::nvptx::PtxTarget target;
  using driver::cuda::module_cache_key;
  std::string debug = module_cache_key(*f, KernelOptions{.num_warps = 4, .debug = true}, target, 12080);
  CHECK(debug == module_cache_key(*f, KernelOptions{.num_warps = 4, .debug = true}, target, 12080));
  if (support::knobs().debug) {
    WARN("WEFT_DEBUG=1 makes every kernel a debug kernel: the key without debug mode is not checked");
    return;
  }
  CHECK(debug != module_cache_key(*f, KernelOptions{.num_warps = 4}, target, 12080));
}

TEST_CASE("debug mode: the site table names each wait's line and a record becomes the Error's message", "[debug]") {
  Lines lines;
  auto f = trace_stuck_consumer(lines);
  passes::WaitSites waits = passes::plan_wait_sites(*f, 4);
  REQUIRE(waits.sites.size() == 2);
  CHECK(waits.sites[0].line == static_cast<unsigned>(lines.producer_wait));
  CHECK(waits.sites[1].line == static_cast<unsigned>(lines.consumer_wait));
  CHECK(waits.index.size() == 2);
  REQUIRE(waits.barriers.size() == 2);
  CHECK(waits.barriers[0].name == "ready");
  CHECK(waits.barriers[1].name == "empty");
  // Warps: producer 0, consumer replica 0 on 1-4, replica 1 on 5-8.
  CHECK(waits.thread_name(5) == "task 'producer' replica 0");
  CHECK(waits.thread_name(32) == "task 'consumer' replica 0");
  CHECK(waits.thread_name(5 * 32 + 7) == "task 'consumer' replica 1");
  CHECK(waits.thread_name(9 * 32) == "thread 288 (outside every task)");
  CHECK(waits.barrier_name(static_cast<uint32_t>(waits.barriers[0].offset + 8)) == "'ready[1]'");
  CHECK(waits.barrier_name(static_cast<uint32_t>(waits.barriers[1].offset)) == "'empty[0]'");
  CHECK_THAT(waits.barrier_name(4096), Contains("no barrier array holds it"));

  passes::WaitTimeoutRecord r;
  r.complete = 1;
  r.site = 1;
  r.barrier = static_cast<uint32_t>(waits.barriers[0].offset + 8);
  r.parity = 0;
  r.thread = 6 * 32 + 3;
  r.block[0] = 3;
  r.block[2] = 1;
  std::string message = waits.describe(r, 5000);
  INFO(message);
  CHECK_THAT(message, Contains("barrier wait timed out after 5000 ms (GPU debug mode) in kernel 'stuck_consumer', "
                               "block (3, 0, 1):\n  task 'consumer' replica 1 (thread 195) waits on 'ready[1]' for "
                               "phase 0   " + at(lines.consumer_wait) + "\n"));
  CHECK_THAT(message, Contains("WEFT_DEBUG_TIMEOUT_MS"));
}

// Debug mode must not change what a kernel that does not deadlock computes: the hidden parameters and the
// timed waits only add a way out. Runs on the CPU (which ignores debug mode) and, where there is one, on
// the GPU.
TEST_CASE("debug mode: a kernel whose waits complete runs as without it", "[gpu][debug]") {
  Kernel k("debug_handoff", [](Ptr<float> out) {
    auto ready = alloc_barriers(1, 1, "ready");
    async_tasks(
        task("producer", {.warps = 1}, [&] { barrier_arrive(ready[0]); }),
        task("consumer", {.warps = 4, .replicas = 2}, [&] {
          barrier_wait(ready[0], 0);
          store(out + task_replica_id() * 128 + arange(0, 128), cast<float>(full<int32_t>({128}, 1) + task_replica_id()));
        }));
  }, KernelOptions{.num_warps = 4, .debug = true});
  std::vector<float> expected(256, 1.0f);
  std::fill(expected.begin() + 128, expected.end(), 2.0f);
  auto run_on = [&](Device device) {
    Buffer<float> out = device.upload(std::vector<float>(256, -1.0f));
    k.launch(device.stream(), Grid(2), out);
    device.stream().synchronize();
    CHECK(out.download() == expected);
  };
  run_on(Device::cpu());
  if (std::optional<Device> gpu = gpu_or_skip()) run_on(*gpu);
}

// Traps on purpose: the CUDA context of this process is unusable afterwards. ctest runs each case in its
// own process; run it alone (or last) when running the binary by hand.
TEST_CASE("debug mode: a deadlock on the GPU throws an Error naming who waited where instead of hanging",
          "[gpu][debug]") {
  std::optional<Device> found = gpu_or_skip();
  if (!found) return;
  Device gpu = *found;
  Lines lines;
  Kernel k("stuck_consumer", [&](Ptr<float> out) { stuck_consumer_body(out, lines); },
           KernelOptions{.num_warps = 4, .debug = true});
  Buffer<float> out = gpu.alloc<float>(32);
  k.compile(gpu);  // compiling does not count toward the time to detect the deadlock
  auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    k.launch(gpu.stream(), Grid(1), out);
    gpu.stream().synchronize();
  } catch (const Error& e) {
    message = e.what();
    CHECK(e.where().line == static_cast<unsigned>(lines.consumer_wait));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(message);
  REQUIRE_FALSE(message.empty());
  CHECK(seconds < support::knobs().debug_timeout_ms / 1000.0 + 5);
  CHECK_THAT(message, Contains("barrier wait timed out after ") && Contains(" ms (GPU debug mode) in kernel "
                                                                           "'stuck_consumer', block (0, 0, 0):\n"));
  CHECK_THAT(message, Contains("  task 'consumer' replica "));
  CHECK_THAT(message, Contains(" waits on 'ready[1]' for phase 0   " + at(lines.consumer_wait) + "\n"));
  CHECK_THAT(message, Contains("CUDA context unusable: restart the process"));
}

// ---- named barriers in debug mode ------------------------------------------------------------------------

namespace {

int named_wait_line = 0;

// Consumers (two replicas of 4 warps) wait at named barrier 1 for 288 threads, but only the producer's
// warp would ever arrive besides them, and it never does: a deadlock on a named barrier.
void stuck_named_body(Ptr<float> out) {
  async_tasks(
      task("producer", {.warps = 1}, [&] { store(out + arange(0, 32), full<float>({32}, 1.0)); }),
      task("consumer", {.warps = 4, .replicas = 2}, [&] {
        named_wait_line = __LINE__; named_barrier_wait(1, 288);
        store(out + arange(0, 32), full<float>({32}, 2.0));
      }));
}

}  // namespace

TEST_CASE("debug mode: named barriers become counters in shared memory that time out", "[async][debug]") {
  std::vector<detail::ParamInfo> params = {{false, dtype_of<Pointer<float>>}};
  auto f = dsl::trace_kernel(
      "stuck_named", params, [&](const detail::TraceInputs& in) { stuck_named_body(Ptr<float>(in.values[0])); },
      std::vector<detail::KernelArg>(1), 0, SourceLoc::current());
  codegen::nvptx::PtxKernel plain = codegen::nvptx::compile_to_ptx(*f, KernelOptions{.num_warps = 4}, {});
  codegen::nvptx::PtxKernel debug =
      codegen::nvptx::compile_to_ptx(*f, KernelOptions{.num_warps = 4, .debug = true}, {});
  const std::string& ptx = debug.ptx;
  INFO(ptx);
  if (!support::knobs().debug) CHECK(weft_test::count_occurrences(plain.ptx, "bar.sync \t1, 288;") == 1);
  // No hardware barrier on id 1: lane 0 of each warp adds 32 to the counter between fences and polls it
  // with acquire loads and the clock.
  CHECK(weft_test::count_occurrences(ptx, "bar.sync \t1,") + weft_test::count_occurrences(ptx, "bar.arrive") == 0);
  CHECK(weft_test::count_occurrences(ptx, "atom.shared.add.u64") == 1);
  CHECK(weft_test::count_occurrences(ptx, "fence.acq_rel.cta;") == 2);
  CHECK(weft_test::count_occurrences(ptx, "ld.acquire.cta.shared.b64") >= 2);
  CHECK(weft_test::count_occurrences(ptx, "%globaltimer") == 2);
  CHECK(weft_test::count_occurrences(ptx, "call.uni weft_debug_wait_timed_out") + weft_test::count_occurrences(ptx, "call weft_debug_wait_timed_out") == 1);
  CHECK(weft_test::count_occurrences(ptx, "bar.warp.sync") >= 2);
  // The site table knows the wait as a named one, and the record becomes this message.
  passes::WaitSites waits = passes::plan_wait_sites(*f, 4);
  REQUIRE(waits.sites.size() == 1);
  CHECK(waits.named_threads == std::vector<int32_t>{288});
  passes::WaitTimeoutRecord r;
  r.complete = 1;
  r.site = 0;
  r.barrier = passes::kNamedBarrierFlag | 1;
  r.parity = 256;
  r.thread = 5 * 32;
  std::string message = waits.describe(r, 2000);
  INFO(message);
  CHECK_THAT(message, Contains("  task 'consumer' replica 1 (thread 160) waits at named barrier 1 of 288 threads; 256 of "
                               "them had arrived   " + at(named_wait_line) + "\n"));

  check_ptxas_accepts(ptx, "weft-test-debug-named");
}

// The counters must compute what bar.sync / bar.arrive do: a writer and a reader hand one shared buffer
// back and forth through named barriers 1 (written) and 2 (read) for many phases, with random values.
TEST_CASE("debug mode: named barriers hand a buffer back and forth as without it", "[gpu][debug]") {
  constexpr int kTile = 256, iters = 9, programs = 3;
  Kernel k("debug_named_handoff", [](Ptr<float> x, Ptr<float> out, Int iters_arg) {
    auto slot = local_alloc<float>({kTile}, 1, "slot");
    Int offs = arange(0, kTile);
    Int first = program_id(0) * iters_arg;
    async_tasks(
        task("writer", {.warps = 2}, [&] {
          for_range(0, iters_arg, [&](Int i) {
            local_store(slot[0], load(x + (first + i) * kTile + offs));
            named_barrier_arrive(1, 192);
            named_barrier_wait(2, 192);
          });
        }),
        task("reader", {.warps = 4}, [&] {
          for_range(0, iters_arg, [&](Int i) {
            named_barrier_wait(1, 192);
            Tile<float> v = local_load(slot[0]);
            named_barrier_arrive(2, 192);
            store(out + (first + i) * kTile + offs, v * 3.0f - 1.0f);
          });
        }));
  }, KernelOptions{.num_warps = 4, .debug = true});
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  std::vector<float> x(size_t(programs) * iters * kTile), want(x.size());
  for (float& v : x) v = uniform(rng);
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] * 3.0f - 1.0f;
  auto run_on = [&](Device device) {
    Buffer<float> in = device.upload(x);
    Buffer<float> out = device.upload(std::vector<float>(x.size(), std::nanf("")));
    k.launch(device.stream(), Grid(programs), in, out, iters);
    device.stream().synchronize();
    CHECK(out.download() == want);
  };
  run_on(Device::cpu());
  if (std::optional<Device> gpu = gpu_or_skip()) run_on(*gpu);
}

// Traps on purpose, like the mbarrier case above (run it alone when running the binary by hand).
TEST_CASE("debug mode: a deadlock at a named barrier on the GPU throws an Error instead of hanging", "[gpu][debug]") {
  std::optional<Device> found = gpu_or_skip();
  if (!found) return;
  Device gpu = *found;
  Kernel k("stuck_named", [&](Ptr<float> out) { stuck_named_body(out); }, KernelOptions{.num_warps = 4, .debug = true});
  Buffer<float> out = gpu.alloc<float>(32);
  k.compile(gpu);
  auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    k.launch(gpu.stream(), Grid(1), out);
    gpu.stream().synchronize();
  } catch (const Error& e) {
    message = e.what();
    CHECK(e.where().line == static_cast<unsigned>(named_wait_line));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(message);
  REQUIRE_FALSE(message.empty());
  CHECK(seconds < support::knobs().debug_timeout_ms / 1000.0 + 5);
  CHECK_THAT(message, Contains("  task 'consumer' replica "));
  // Both replicas' 8 warps arrive (256 threads); the producer's 32 never do.
  CHECK_THAT(message, Contains(" waits at named barrier 1 of 288 threads; 256 of them had arrived   " +
                               at(named_wait_line) + "\n"));
  CHECK_THAT(message, Contains("CUDA context unusable: restart the process"));
}
