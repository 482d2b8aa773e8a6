// while_ (weft/control.h): loops whose test runs before every iteration — counted with Vars (scalar and
// tile, carried through the loop), zero iterations, a test with effects (a spin lock on atomic_cas), a
// dynamic tile scheduler on an atomic counter, inside tasks, and the errors.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "error_checks.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

TEST_CASE("while_ with scalar and tile Vars carried, including zero iterations", "[control][while]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int programs = 5, cols = 256;
  Kernel k("while_counted", [](Ptr<int64_t> sums, Ptr<float> x, Ptr<float> y, Ptr<int32_t> steps) {
    Int p = program_id(0);
    Int n = load(steps + p);
    Var<int32_t> i = 0;
    Var<int64_t> acc = cast<int64_t>(p);
    Var<float> v = load(x + p * cols + arange(0, cols));
    while_([&] { return i < n; }, [&] {
      acc = acc + cast<int64_t>(i) * cast<int64_t>(i);
      v = v * 0.5f + 1.0f;
      i = i + 1;
    });
    store(sums + p, acc + cast<int64_t>(i) * 1000000);
    store(y + p * cols + arange(0, cols), v);
  }, KernelOptions{.num_warps = 2});
  std::vector<int32_t> steps(programs);
  for (int32_t& s : steps) s = std::uniform_int_distribution<int32_t>(1, 40)(rng);
  steps[2] = 0;  // no iteration
  std::vector<float> x(programs * cols);
  for (float& v : x) v = std::uniform_real_distribution<float>(-8, 8)(rng);
  Buffer<int64_t> sums = dev.upload(std::vector<int64_t>(programs, -7));
  Buffer<float> y = dev.upload(std::vector<float>(programs * cols, std::nanf("")));
  k.launch(Grid(programs), sums, dev.upload(x), y, dev.upload(steps));
  std::vector<int64_t> s = sums.download();
  std::vector<float> got = y.download();
  for (int p = 0; p < programs; ++p) {
    int64_t want = p;
    for (int64_t i = 0; i < steps[p]; ++i) want += i * i;
    CHECK(s[p] == want + int64_t(steps[p]) * 1000000);
    int wrong = 0;
    for (int c = 0; c < cols; ++c) {
      float v = x[p * cols + c];
      for (int i = 0; i < steps[p]; ++i) v = v * 0.5f + 1.0f;
      if (got[p * cols + c] != v && ++wrong <= 4) UNSCOPED_INFO("program " << p << " col " << c << ": " << got[p * cols + c] << ", want " << v);
    }
    CHECK(wrong == 0);
  }
}

// Triton's lock pattern (its layer-norm backward): programs add their rows into one shared row, one at a
// time, behind a lock taken with atomic_cas in the loop's test and given back with atomic_xchg.
TEST_CASE("while_ with an effect in its test: a spin lock on atomic_cas", "[control][while][atomics]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int programs = 24, cols = 128;
  Kernel k("while_spin_lock", [](Ptr<int32_t> lock, Ptr<int32_t> total, Ptr<int32_t> x, Ptr<int32_t> order) {
    Int c = arange(0, cols);
    Int p = program_id(0);
    Int mine = load(x + p * cols + c);
    while_([&] { return atomic_cas(lock, 0, 1) != 0; }, [] {});
    // Inside the lock: a plain read-modify-write of the shared row, and this program's turn.
    store(total + c, load(total + c) + mine);
    store(order + p, load(total + cols));
    store(total + cols, load(total + cols) + 1);
    atomic_xchg(lock, 0);
  }, KernelOptions{.num_warps = 4});
  std::vector<int32_t> x(programs * cols);
  for (int32_t& v : x) v = std::uniform_int_distribution<int32_t>(-1000, 1000)(rng);
  Buffer<int32_t> lock = dev.upload(std::vector<int32_t>{0});
  Buffer<int32_t> total = dev.upload(std::vector<int32_t>(cols + 1, 0));
  Buffer<int32_t> order = dev.upload(std::vector<int32_t>(programs, -7));
  k.launch(Grid(programs), lock, total, dev.upload(x), order);
  std::vector<int32_t> t = total.download(), o = order.download();
  for (int c = 0; c < cols; ++c) {
    int32_t want = 0;
    for (int p = 0; p < programs; ++p) want += x[p * cols + c];
    INFO("column " << c);
    CHECK(t[c] == want);
  }
  CHECK(t[cols] == programs);
  CHECK(lock.download()[0] == 0);
  std::sort(o.begin(), o.end());
  for (int p = 0; p < programs; ++p) CHECK(o[p] == p);  // each program had the lock once, alone
}

TEST_CASE("while_ as a dynamic tile scheduler on an atomic counter", "[control][while][atomics]") {
  Device dev = Device::current();
  const int programs = 7, tiles = 53, width = 64;
  Kernel k("while_tile_scheduler", [](Ptr<int32_t> next, Ptr<int32_t> out, Ptr<int32_t> taken, Int tiles) {
    async_tasks(task("worker", {.warps = 4}, [&] {
      Var<int32_t> t = atomic_add(next, 1);
      while_([&] { return t < tiles; }, [&] {
        Int c = arange(0, width);
        store(out + t * width + c, t * 1000 + c);
        atomic_add(taken + t, 1, Atomic{.order = MemOrder::relaxed});
        t = atomic_add(next, 1);
      });
    }));
  });
  Buffer<int32_t> next = dev.upload(std::vector<int32_t>{0});
  Buffer<int32_t> out = dev.upload(std::vector<int32_t>(tiles * width, -7));
  Buffer<int32_t> taken = dev.upload(std::vector<int32_t>(tiles, 0));
  k.launch(Grid(programs), next, out, taken, tiles);
  std::vector<int32_t> o = out.download(), tk = taken.download();
  CHECK(next.download()[0] == tiles + programs);  // each program's last ticket is past the end
  CHECK(tk == std::vector<int32_t>(tiles, 1));
  int wrong = 0;
  for (int t = 0; t < tiles; ++t)
    for (int c = 0; c < width; ++c)
      if (o[t * width + c] != t * 1000 + c && ++wrong <= 4) UNSCOPED_INFO("tile " << t << " col " << c << ": " << o[t * width + c]);
  CHECK(wrong == 0);
}

TEST_CASE("while_: errors name the line", "[control][while][errors]") {
  int line = 0;
  Device dev = Device::current();
  auto tile_condition = [&](Ptr<int32_t> p) {
    Var<int32_t> i = 0;
    line = __LINE__; while_([&] { return arange(0, 16) < i; }, [&] { i = i + 1; });
    store(p, i);
  };
  REQUIRE_WEFT_ERROR((void)Kernel("while_error", tile_condition).compile(dev), line, "rank-0 Bool");
  Kernel k("while_printed", [](Ptr<int32_t> p) {
    Var<int32_t> i = 0;
    while_([&] { return i < 3; }, [&] { i = i + 1; });
    store(p, i);
  });
  CHECK(k.ir().find("while {") != std::string::npos);
  CHECK(k.ir().find("} do {") != std::string::npos);
}
