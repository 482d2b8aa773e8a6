// Very long chains of operations: a kernel whose C++ loop keeps adding to one value builds a chain of IR
// nodes each the operand of the next. Tracing, the analyses, both code generators and the IR's teardown
// must not follow such a chain on the C++ stack: each test runs its kernel in a thread with a 1 MiB stack
// (a million-deep recursion needs tens of MiB), and the compile time must stay linear.
#include <pthread.h>

#include <chrono>
#include <ctime>
#include <exception>
#include <functional>

#include "test_util.h"

using namespace weft_test;

namespace {

// Runs `body` on a new thread with a stack of `stack_bytes`; rethrows what it threw. (A recursion too
// deep for that stack crashes the test binary: ctest then reports this test failed.)
void run_on_small_stack(size_t stack_bytes, const std::function<void()>& body) {
  struct Job {
    const std::function<void()>* body;
    std::exception_ptr error;
  } job{&body, nullptr};
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, stack_bytes) == 0);
  pthread_t thread;
  auto entry = [](void* p) -> void* {
    auto* j = static_cast<Job*>(p);
    try {
      (*j->body)();
    } catch (...) {
      j->error = std::current_exception();
    }
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, entry, &job) == 0);
  pthread_join(thread, nullptr);
  pthread_attr_destroy(&attr);
  if (job.error) std::rethrow_exception(job.error);
}

// The limits below are on the process's CPU time, not the wall clock: a loaded machine (CI's two cores
// shared with other jobs) stretches the wall clock, and the point is to catch work that grows
// super-linearly, which CPU time shows as well.
struct CpuTime {
  std::clock_t start = std::clock();
};
double seconds_since(const CpuTime& t0) { return double(std::clock() - t0.start) / CLOCKS_PER_SEC; }

constexpr size_t kSmallStack = size_t(1) << 20;

}  // namespace

TEST_CASE("a chain of a million scalar ops traces, runs on the CPU and is destroyed on a 1 MiB stack",
          "[chains][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  const int steps = 500000;  // each step: a constant and an add, so 1,000,000 nodes
  std::vector<float> x = generate<float>(rng, 4, [](Rng& r) {  // whole numbers: every sum is exact
    return static_cast<float>(std::uniform_int_distribution<int>(-1000, 1000)(r));
  });
  std::vector<float> got;
  double trace_and_run = 0, teardown = 0;
  run_on_small_stack(kSmallStack, [&] {
    Device cpu = Device::cpu();
    Buffer<float> in = cpu.upload(x), out = cpu.alloc<float>(4);
    CpuTime t0;
    {
      Kernel k("million_ops", [&](Ptr<float> p, Ptr<float> q) {
        Int i = program_id();
        Float acc = load(p + i);
        for (int s = 0; s < steps; ++s) acc = acc + (s % 2 ? 3.0f : -2.0f);
        store(q + i, acc);
      });
      k.launch(Grid(4), in, out);
      trace_and_run = seconds_since(t0);
      got = out.download();
      t0 = CpuTime{};
    }  // the Kernel and its million nodes go here
    teardown = seconds_since(t0);
  });
  for (int i = 0; i < 4; ++i) CHECK(got[i] == x[i] + steps / 2 * 1.0f);
  INFO("trace + compile + run " << trace_and_run << " s, teardown " << teardown << " s");
  CHECK(trace_and_run < 60);  // (quadratic, it took ~10 minutes)
  CHECK(teardown < 5);
}

// Tile chains through the NVPTX analyses that follow operands: index tiles made lazy by a broadcast (an
// offset grid rebuilt where each access uses it), and a loaded tile whose chain decides a Var's layout.
TEST_CASE("long tile chains compile for sm_90a on a 1 MiB stack", "[chains]") {
  const int steps = 10000;
  std::string ptx, ir;
  double seconds = 0;
  run_on_small_stack(kSmallStack, [&] {
    CpuTime t0;
    Kernel k("tile_chains", [&](Ptr<float> p, Ptr<float> q) {
      Int rows = arange(0, 16).expand_dims(1), cols = arange(0, 16).expand_dims(0);
      Int offsets = rows * 16 + cols;  // a lazy index tile: broadcasts of aranges
      for (int s = 0; s < steps; ++s) offsets = offsets + (s % 2 ? 1 : -1);
      Var<float> v = zeros<float>({16, 16});
      Tile<float> t = load(p + offsets);
      for (int s = 0; s < steps; ++s) t = t * 0.5f + 1.0f;
      v = t;
      store(q + offsets, v);
    });
    ir = k.ir();
    ptx = k.ptx();
    seconds = seconds_since(t0);
  });
  INFO("trace + PTX " << seconds << " s");
  CHECK(ir.size() > size_t(steps) * 20);
  CHECK(ptx.find(".entry tile_chains") != std::string::npos);
  CHECK(seconds < 60);
}
