// Errors of the Hopper constructs (include/weft/async.h): budgets of shared memory and registers, task
// placement, named barriers, where allocations and tasks may appear, mbarrier and shared-buffer operands,
// wgmma shapes and groups, TMA boxes and buffer layouts. As in test_errors.cpp, every error must be a
// weft::Error that names the test's own line — the DSL call that is wrong — and says what to change.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include <functional>
#include <random>
#include <string>

#include "driver/backend.h"
#include "error_checks.h"  // compile_only_backend: NVPTX lowering errors without a GPU

using namespace weft;

namespace {


template <class Body> Kernel body_kernel(Body body, KernelOptions options = {}) {
  return Kernel("faulty", [body](Ptr<float> p) { body(p); }, options);
}

}  // namespace

// Keep each use on one line: within a macro's arguments clang reports the line where the invocation ends.

// ---- budgets ---------------------------------------------------------------------------------------------

TEST_CASE("shared memory over the block's budget: the error lists every allocation", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    auto a = local_alloc<float>({128, 128}, 1, "a");
    auto bars = alloc_barriers(4, 1, "bars");
    line = __LINE__; auto b = local_alloc<float>({128, 128}, 3, "b");
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "allocates 263168 bytes of shared memory per block but a block has at most 232448");
  REQUIRE_WEFT_ERROR(k.ir(), line, "'a' f32[1x128x128]: 65536 bytes");
  REQUIRE_WEFT_ERROR(k.ir(), line, "'bars' 4 mbarriers: 32 bytes");
  REQUIRE_WEFT_ERROR(k.ir(), line, "'b' f32[3x128x128]: 196608 bytes");
  REQUIRE_WEFT_ERROR(k.ir(), line, "use fewer stages or smaller tiles");
}

TEST_CASE("register budgets of all tasks over the register file: the error lists every task", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    line = __LINE__; async_tasks(task("producer", {.warps = 4, .regs = 232}, [] {}), task("consumer", {.warps = 4, .regs = 232, .replicas = 2}, [] {}));
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "need 89088 registers but a block of 384 threads has 64512 (168 per thread");
  REQUIRE_WEFT_ERROR(k.ir(), line, "task 'producer': 4 warps x 1 replicas x 32 threads x 232 registers = 29696");
  REQUIRE_WEFT_ERROR(k.ir(), line, "task 'consumer': 4 warps x 2 replicas x 32 threads x 232 registers = 59392");
  REQUIRE_WEFT_ERROR(k.ir(), line, "lower some task's regs");
}

TEST_CASE("register budgets are bounded by the block's own allocation, not the register file", "[errors]") {
  // 640 threads start with 96 registers each (65536 / 640, a multiple of 8): 61440 for setmaxnreg to move
  // between warps. Four consumers of 120 and a producer of 24 need 64512, fewer than the register file's
  // 65536 but more than the block has: on the GPU one warp's setmaxnreg.inc would wait forever.
  int line = 0;
  Kernel too_many = body_kernel([&](Ptr<float>) {
    line = __LINE__; async_tasks(task("producer", {.warps = 4, .regs = 24}, [] {}), task("consumer", {.warps = 4, .regs = 120, .replicas = 4}, [] {}));
  });
  REQUIRE_WEFT_ERROR(too_many.ir(), line, "need 64512 registers but a block of 640 threads has 61440 (96 per thread");
  Kernel fits = body_kernel([&](Ptr<float>) {
    async_tasks(task("producer", {.warps = 4, .regs = 24}, [] {}), task("consumer", {.warps = 4, .regs = 112, .replicas = 4}, [] {}));
  });
  CHECK_NOTHROW(fits.ir());
}

TEST_CASE("register budgets: the entry cap comes from the fullest scheduler's warps", "[errors]") {
  // 18 warps: the four schedulers hold 5, 5, 4 and 4, so ptxas caps every thread at 16384 / (32 x 5) -> 96
  // registers (not 65536 / 576 -> 112): 55296 in all. Four consumers of 112 and two warps at the cap need 63488.
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    line = __LINE__; async_tasks(task("consumer", {.warps = 4, .regs = 112, .replicas = 4}, [] {}), task("helper", {.warps = 2}, [] {}));
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "need 63488 registers but a block of 576 threads has 55296 (96 per thread");
  REQUIRE_WEFT_ERROR(k.ir(), line, "over the 32 x 5 threads of its fullest one");
  REQUIRE_WEFT_ERROR(k.ir(), line, "task 'helper': 2 warps x 1 replicas x 32 threads x 96 registers (entry cap) = 6144");
  Kernel fits = body_kernel([&](Ptr<float>) {
    async_tasks(task("consumer", {.warps = 4, .regs = 96, .replicas = 4}, [] {}), task("helper", {.warps = 2}, [] {}));
  });
  CHECK_NOTHROW(fits.ir());
}

TEST_CASE("setmaxnreg values: a multiple of 8 from 24 to 256", "[errors]") {
  for (int regs : {100, 16, 264}) {
    INFO("regs = " << regs);
    int line = 0;
    Kernel k = body_kernel([&](Ptr<float>) {
      Task ok = task("ok", {.warps = 4}, [] {});
      line = __LINE__; Task bad = task("bad", {.warps = 4, .regs = regs}, [] {});
      async_tasks(ok, bad);
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "task 'bad' asks for " + std::to_string(regs) + " registers per thread; setmaxnreg takes a multiple of 8 from 24 to 256");
  }
}

// ---- task placement ------------------------------------------------------------------------------------

TEST_CASE("a task with regs needs whole warp groups", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    line = __LINE__; Task t = task("small", {.warps = 2, .regs = 40}, [] {});
    async_tasks(task("big", {.warps = 4}, [] {}), t);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "task 'small' sets regs but has 2 warps");
  REQUIRE_WEFT_ERROR(k.ir(), line, "give it a multiple of 4 warps, or drop regs");
}

TEST_CASE("a task with regs must start a warp group", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Task first = task("first", {.warps = 2}, [] {});
    line = __LINE__; Task second = task("second", {.warps = 4, .regs = 232}, [] {});
    async_tasks(first, second);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "task 'second' starts at warp 2, but a task that sets regs must start a warp group");
  REQUIRE_WEFT_ERROR(k.ir(), line, "list 'second' first");
}

TEST_CASE("a task's warps must be a power of two", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    line = __LINE__; Task odd = task("odd", {.warps = 3}, [] {});
    async_tasks(task("even", {.warps = 4}, [] {}), odd);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "task 'odd' has 3 warps; a task's warps must be a power of two");
}

TEST_CASE("tasks of more than 1024 threads", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    line = __LINE__; async_tasks(task("wide", {.warps = 16, .replicas = 3}, [] {}));
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "the tasks need 48 warps (1536 threads) but a block has at most 1024 threads");
}

TEST_CASE("two tasks of one async_tasks with the same name", "[errors]") {
  int line = 0, first = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    first = __LINE__; Task a = task("worker", {.warps = 4}, [] {});
    line = __LINE__; Task b = task("worker", {.warps = 4}, [] {});
    async_tasks(a, task("other", {.warps = 4}, [] {}), b);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "rename one (replicas of one task come from its .replicas option");
  // `first` is known once the body has been traced (the phrase is built before the call).
  REQUIRE_WEFT_ERROR(k.ir(), line, "a second task named 'worker' (the first is at " + std::string(__FILE__) + ":" + std::to_string(first) + "); tasks of one async_tasks need distinct names");
}

// ---- named barriers ------------------------------------------------------------------------------------

TEST_CASE("named barrier ids: reserved ones and ids past 15", "[errors]") {
  int line = 0;
  SECTION("id 0 syncs the whole block") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; named_barrier_wait(0, 128); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "named barrier 0 is reserved: weft syncs the whole block with 0; use an id from 1 to 15");
  }
  SECTION("the highest ids sync each task replica") {
    Kernel k = body_kernel([&](Ptr<float>) {
      async_tasks(task("worker", {.warps = 4, .replicas = 2}, [&] { line = __LINE__; named_barrier_arrive(14, 256); }));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "named barrier 14 is reserved: weft syncs the whole block with 0 and each of the 2 task replicas with one of 14 to 15; use an id from 1 to 13");
  }
  SECTION("id 16") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; named_barrier_arrive(16, 128); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "barrier id 16 does not exist; the hardware has named barriers 0 to 15");
  }
}

TEST_CASE("named barrier ids computed in the kernel: bounded, and only by free ids", "[errors]") {
  int line = 0;
  SECTION("from a kernel argument") {
    Kernel k("faulty", [&](Ptr<float>, Int id) {
      async_tasks(task("worker", {.warps = 4, .replicas = 2}, [&] {
        Int mine = id + task_replica_id();
        line = __LINE__; named_barrier_wait(mine, 256);
      }));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "named_barrier_wait: weft cannot bound the barrier id this call computes (param at ");
    REQUIRE_WEFT_ERROR(k.ir(), line, "build the id from constants and task_replica_id() with +, -, *, min, max, where and % or / by a positive constant");
  }
  SECTION("reaching the replicas' own ids") {
    Kernel k = body_kernel([&](Ptr<float>) {
      async_tasks(task("worker", {.warps = 4, .replicas = 2}, [&] { line = __LINE__; named_barrier_arrive(13 + task_replica_id(), 256); }));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "named_barrier_arrive: the barrier id this call computes takes values from 13 to 14, not all of them ids the user may take: weft syncs the whole block with 0 and each of the 2 task replicas with one of 14 to 15; use an id from 1 to 13");
  }
  SECTION("reaching 0") {
    Kernel k = body_kernel([&](Ptr<float>) {
      async_tasks(task("worker", {.warps = 4, .replicas = 3}, [&] { line = __LINE__; named_barrier_wait((task_replica_id() + 2) % 3, 256); }));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "takes values from 0 to 2");
  }
  SECTION("wrapping past the id's 32 bits") {
    // (replica * 2^30 * 4) / 2^28 + 1 would be 1 or 17 exactly, but the i32 product wraps to 0 in the kernel
    Kernel k = body_kernel([&](Ptr<float>) {
      async_tasks(task("worker", {.warps = 4, .replicas = 2}, [&] {
        Int wide = task_replica_id() * 0x40000000 * 4;
        line = __LINE__; named_barrier_wait(wide / 0x10000000 + 1, 256);
      }));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "named_barrier_wait: weft cannot bound the barrier id this call computes (mul at ");
  }
  SECTION("not an i32 scalar") {
    Kernel k = body_kernel([&](Ptr<float>) {
      async_tasks(task("worker", {.warps = 4}, [&] { line = __LINE__; named_barrier_wait(1 + arange(0, 4), 128); }));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "named_barrier_wait: the barrier id must be a scalar");
  }
}

TEST_CASE("a named barrier's thread count must be whole warps", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; named_barrier_wait(1, 48); });
  REQUIRE_WEFT_ERROR(k.ir(), line, "48 threads; the count must be a multiple of 32");
}

// ---- where allocations and tasks may appear --------------------------------------------------------------

TEST_CASE("local_alloc inside a loop", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    for_range(0, 2, [&](Int) { line = __LINE__; auto b = local_alloc<float>({16}, 1, "b"); });
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "local_alloc is inside a for_range, if_ or task body");
  REQUIRE_WEFT_ERROR(k.ir(), line, "call it at the top of the kernel body");
}

TEST_CASE("a second async_tasks", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    async_tasks(task("first", {.warps = 4}, [] {}));
    line = __LINE__; async_tasks(task("second", {.warps = 4}, [] {}));
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "a second async_tasks; a kernel has one set of tasks");
  REQUIRE_WEFT_ERROR(k.ir(), line, "put all tasks in that call");
}

TEST_CASE("task_replica_id outside a task", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Int r = task_replica_id(); });
  REQUIRE_WEFT_ERROR(k.ir(), line, "task_replica_id() is outside every task");
}

// ---- operands --------------------------------------------------------------------------------------------

TEST_CASE("barrier_wait on a whole array of mbarriers", "[errors]") {
  // The types keep a Barriers array out of barrier_wait; a Barrier made from the array's node gets past
  // them and must still be caught.
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Barriers bars = alloc_barriers(2, 1, "bars");
    line = __LINE__; barrier_wait(Barrier(bars.node()), 0);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "barrier_wait needs one mbarrier, got the array of 2");
  REQUIRE_WEFT_ERROR(k.ir(), line, "pick one with bars[i]");
}

TEST_CASE("local_store of a tile of another shape than the stage", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    auto buf = local_alloc<float>({8, 16}, 2, "buf");
    line = __LINE__; local_store(buf[0], zeros<float>({4, 8}));
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "local_store of a f32[4x8] tile into a buffer stage of f32[8x16]");
}

TEST_CASE("async_load through pointers of another shape than the stage", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float> p) {
    auto buf = local_alloc<float>({8, 16}, 2, "buf");
    line = __LINE__; async_load(p + arange(0, 64), buf[0]);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "async_load of f32 elements through pointers of shape [64] into a buffer stage of f32[8x16]");
}

TEST_CASE("async_load into a transposed view, and async_wait_group out of range", "[errors]") {
  int line = 0;
  SECTION("local_trans") {
    Kernel k = body_kernel([&](Ptr<float> p) {
      auto buf = local_alloc<float>({8, 16}, 1, "buf");
      Int offs = expand_dims(arange(0, 16), 1) * 8 + expand_dims(arange(0, 8), 0);
      line = __LINE__; async_load(p + offs, local_trans(buf[0]));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "async_load into a local_trans view: copy into the stage as it is stored");
  }
  SECTION("async_wait_group(64)") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; async_wait_group(64); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "async_wait_group(64): the number of groups left in flight must be 0 to 63");
  }
}

// ---- wgmma -----------------------------------------------------------------------------------------------

TEST_CASE("async_dot shapes wgmma cannot do", "[errors]") {
  int line = 0;
  SECTION("M not a multiple of 64") {
    Kernel k = body_kernel([&](Ptr<float>) {
      auto a = local_alloc<bf16>({32, 64}, 1, "a");
      auto b = local_alloc<bf16>({128, 64}, 1, "b");
      line = __LINE__; Float acc = async_dot(a[0], local_trans(b[0]), zeros<float>({32, 128}));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "async_dot of [32x64] by [64x128]: M = 32 is not a multiple of 64; wgmma needs M a multiple of 64");
  }
  SECTION("N over 256") {
    Kernel k = body_kernel([&](Ptr<float>) {
      auto a = local_alloc<bf16>({64, 64}, 1, "a");
      auto b = local_alloc<bf16>({512, 64}, 1, "b");
      line = __LINE__; Float acc = async_dot(a[0], local_trans(b[0]), zeros<float>({64, 512}));
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "N = 512 is over 256 (split b's columns over several async_dots)");
  }
}

TEST_CASE("async_dot outside a group of 4 warps fails in the NVPTX lowering at its line", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float> p) {
    auto a = local_alloc<bf16>({64, 64}, 1, "a");
    auto b = local_alloc<bf16>({64, 64}, 1, "b");
    line = __LINE__; Float acc = async_dot(a[0], local_trans(b[0]), zeros<float>({64, 64}));
    store(p + arange(0, 64), sum(async_dot_wait(0, acc), 1));
  }, KernelOptions{8});
  Device gpu_less = Device::from_backend(detail::compile_only_backend("sm_90a", "no GPU in this test"));
  REQUIRE_WEFT_ERROR(k.compile(gpu_less), line, "async_dot runs on one warp group (4 warps), but here the group has 8 warps");
}

// ---- TMA and buffer layouts ------------------------------------------------------------------------------

TEST_CASE("a TMA load into a stage whose shape is not the descriptor's box", "[errors]") {
  int line = 0;
  Kernel k("tma_box", [&](TensorDesc<bf16> a) {
    auto s = local_alloc<bf16>({64, 64}, 1, "s");
    auto bar = alloc_barriers(1, 1, "bar");
    line = __LINE__; async_descriptor_load(a, s[0], {0, 0}, bar[0]);
  });
  Buffer<bf16> x = Device::cpu().alloc<bf16>(256 * 256);
  REQUIRE_WEFT_ERROR(k.ir(tma(x, {256, 256}, {128, 64})), line, "the descriptor moves boxes of bf16[128x64] but the shared buffer stage is bf16[64x64]");
}

TEST_CASE("two uses that need different swizzles of one buffer", "[errors]") {
  int line = 0, tma_line = 0;
  Kernel k("two_swizzles", [&](TensorDesc<bf16> a) {
    auto s = local_alloc<bf16>({64, 64}, 1, "s");
    auto bar = alloc_barriers(1, 1, "bar");
    tma_line = __LINE__; async_descriptor_load(a, s[0], {0, 0}, bar[0]);
    line = __LINE__; Float acc = async_dot(s[0], local_trans(s[0]), zeros<float>({64, 64}));
  });
  Buffer<bf16> x = Device::cpu().alloc<bf16>(256 * 256);
  auto unswizzled = tma(x, {256, 256}, {64, 64}, {.swizzle = 0});
  REQUIRE_WEFT_ERROR(k.ir(unswizzled), line, "async_dot needs buffer 's' with a 128-byte swizzle");
  REQUIRE_WEFT_ERROR(k.ir(unswizzled), line, "needs a 0-byte swizzle; use two buffers, or make the uses agree (a TMA descriptor's swizzle is the one its tma(..., {.swizzle = bytes}) gives)");
  REQUIRE_WEFT_ERROR(k.ir(unswizzled), line, std::string(__FILE__) + ":" + std::to_string(tma_line));
}

// The NVPTX lowering cannot keep a tile Var across async_tasks (each task has its own register layout);
// the verifier says so at trace time on every backend, instead of the CPU running it and the GPU refusing
// it at launch. A scalar Var (one register, alike in every thread) and a plain tile stay allowed.
TEST_CASE("a tile Var declared before async_tasks is an Error at its line on every backend", "[errors][async]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float> p) {
    line = __LINE__; Var<float> acc = zeros<float>({128});
    async_tasks(task("consumer", {.warps = 4}, [&] { store(p + arange(0, 128), acc); }));
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "a tile Var (var f32[128]) is declared before async_tasks");
  REQUIRE_WEFT_ERROR(k.ir(), line, "declare the Var inside the task that uses it");
  REQUIRE_WEFT_ERROR(k.ptx(), line, "declare the Var inside the task that uses it");
  Buffer<float> out = Device::current().alloc<float>(128);  // the launch's device: no argument error first
  REQUIRE_WEFT_ERROR(k.launch(Grid(1), out), line, "declare the Var inside the task that uses it");

  // Unused by the tasks, it is refused all the same (the GPU lowering would refuse it).
  Kernel unused = body_kernel([&](Ptr<float> p) {
    line = __LINE__; Var<float> v = zeros<float>({16});
    store(p + arange(0, 16), v);
    async_tasks(task("idle", {.warps = 4}, [] {}));
  });
  REQUIRE_WEFT_ERROR(unused.ir(), line, "is declared before async_tasks");
}

TEST_CASE("a scalar Var and plain tiles made before async_tasks reach the tasks on every backend", "[async]") {
  Kernel k("prologue_values", [](Ptr<float> p, Float x) {
    Var<float> scale = x * 2.0f;
    Tile<float> base = load(p + arange(0, 128));
    async_tasks(task("writer", {.warps = 4}, [&] { store(p + arange(0, 128), base * scale); }));
  });
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> small(-50, 50);  // whole numbers: the products are exact
  std::vector<float> host(128);
  for (float& h : host) h = static_cast<float>(small(rng));
  Device dev = Device::current();
  Buffer<float> buf = dev.upload(host);
  const float x = static_cast<float>(small(rng));
  k.launch(Grid(1), buf, x);
  std::vector<float> got = buf.download();
  for (int i = 0; i < 128; ++i) CHECK(got[i] == host[i] * (2.0f * x));
  CHECK_THAT(k.ptx(), Catch::Matchers::Contains(".entry"));
}
