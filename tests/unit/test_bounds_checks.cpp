// The CPU backend's bounds checks (WEFT_DEBUG=1, WEFT_CHECK_BOUNDS=1 — ctest sets it for every test — or
// KernelOptions::debug, which these kernels use so that they are checked however the suite is run): every
// load, store and async_load is checked, element by element (masked-off elements excepted), against the
// allocation of the pointer argument its pointers come from; the first element outside is a weft::Error
// naming the kernel, the block, the op and the user's line, and nothing outside is read or written.
#include <cstdint>

#include "error_checks.h"
#include "test_util.h"

using namespace weft_test;

namespace {

const KernelOptions kChecked{.num_warps = 4, .debug = true};

int random_int(Rng& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

}  // namespace

TEST_CASE("an unmasked load past the end of its buffer is an Error naming kernel, block, op and line",
          "[bounds][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  const int block = 64, programs = random_int(rng, 2, 6);
  const int n = block * programs - random_int(rng, 1, block - 1);  // the last program reads past the end
  int line = 0;
  Kernel k("oob_load", [&](Ptr<float> x, Ptr<float> out) {
    Int offs = program_id() * block + arange(0, block);
    line = __LINE__; Float v = load(x + offs);
    store(out + offs, v);
  }, kChecked);
  Device cpu = Device::cpu();
  std::vector<float> host = generate<float>(rng, n, uniform_real<float>(-10, 10));
  Buffer<float> x = cpu.upload(host), out = cpu.alloc<float>(size_t(block) * programs);
  const int first_outside = n - (programs - 1) * block;
  std::string message = require_error([&] { k.launch(Grid(programs), x, out); },
                                      {"out-of-bounds load in kernel 'oob_load'",
                                       "block (" + std::to_string(programs - 1) + ", 0, 0)", "element " + std::to_string(first_outside) + " of the load",
                                       "reads 4 bytes", "at byte offset " + std::to_string(n * 4) + " of the " + std::to_string(n * 4) +
                                           "-byte allocation", "past its end"});
  CHECK(message.find("test_bounds_checks.cpp:" + std::to_string(line)) != std::string::npos);

  // The same access masked: no error, and the values are the input's.
  Kernel masked("masked_load", [&](Ptr<float> x, Ptr<float> out, Int count) {
    Int offs = program_id() * block + arange(0, block);
    store(out + offs, load(x + offs, offs < count, -1.0f));
  }, kChecked);
  masked.launch(Grid(programs), x, out, n);
  std::vector<float> got = out.download();
  for (int i = 0; i < block * programs; ++i) CHECK(got[i] == (i < n ? host[i] : -1.0f));
}

TEST_CASE("an out-of-bounds store is an Error and leaves the memory around it intact", "[bounds][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  const int n = random_int(rng, 17, 200), past = random_int(rng, 1, 40);
  int line = 0;
  Kernel k("oob_store", [&](Ptr<int32_t> out, Int count) {
    Int offs = arange(0, 256);
    line = __LINE__; store(out + offs, offs * 3, offs < count);
  }, kChecked);
  Device cpu = Device::cpu();
  std::vector<int32_t> before = generate<int32_t>(rng, n, uniform_int<int32_t>(-1000, 1000));
  std::vector<int32_t> fence_values = generate<int32_t>(rng, 1024, uniform_int<int32_t>(-1000, 1000));
  Buffer<int32_t> out = cpu.upload(before);
  Buffer<int32_t> fence = cpu.upload(fence_values);  // whatever lies next to `out` on the heap
  // The mask lets `past` elements beyond the buffer through: the first of them is element n.
  REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, n + past), line,
                     "out-of-bounds store in kernel 'oob_store', block (0, 0, 0): element " + std::to_string(n) +
                         " of the store (256 elements of i32) writes 4 bytes");
  REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, n + past), line, "nothing was written");
  CHECK(out.download() == before);  // the whole program instance stopped before its store
  CHECK(fence.download() == fence_values);
  k.launch(Grid(1), out, n);  // exactly up to the end: fine
  std::vector<int32_t> got = out.download();
  for (int i = 0; i < n; ++i) CHECK(got[i] == i * 3);
}

TEST_CASE("an address inside another argument's buffer is still out of bounds of its own", "[bounds][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  const int n = random_int(rng, 8, 64);
  Kernel k("wrong_buffer", [](Ptr<float> a, Ptr<float> b, Long to_b, Ptr<float> out) {
    store(out, load(a + to_b) + load(b));  // a + to_b lands on b[0]: b's memory, through a's pointer
  }, kChecked);
  Device cpu = Device::cpu();
  Buffer<float> a = cpu.upload(generate<float>(rng, n, uniform_real<float>(-1, 1)));
  Buffer<float> b = cpu.upload(generate<float>(rng, n, uniform_real<float>(-1, 1)));
  Buffer<float> out = cpu.alloc<float>(1);
  const int64_t to_b = (reinterpret_cast<intptr_t>(b.data()) - reinterpret_cast<intptr_t>(a.data())) / 4;
  REQUIRE(reinterpret_cast<const float*>(a.data()) + to_b == b.data());
  require_error([&] { k.launch(Grid(1), a, b, to_b, out); },
                {"out-of-bounds load in kernel 'wrong_buffer'", "argument slot 0"});
}

TEST_CASE("raw pointers into a Buffer are checked against that Buffer", "[bounds][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  const int n = random_int(rng, 40, 100), skip = random_int(rng, 1, n - 32);  // 32 elements from skip fit
  Kernel k("raw_pointer", [](Ptr<float> x, Ptr<float> out) {
    Int offs = arange(0, 32);
    store(out + offs, load(x + offs) * 2.0f);
  }, kChecked);
  Device cpu = Device::cpu();
  std::vector<float> host = generate<float>(rng, n, uniform_real<float>(-5, 5));
  Buffer<float> x = cpu.upload(host), out = cpu.alloc<float>(32);
  float* inside = static_cast<float*>(x.data()) + skip;
  k.launch(Grid(1), inside, out);  // 32 elements from `skip` fit
  std::vector<float> got = out.download();
  for (int i = 0; i < 32; ++i) CHECK(got[i] == host[skip + i] * 2.0f);
  float* near_end = static_cast<float*>(x.data()) + (n - random_int(rng, 1, 31));
  require_error([&] { k.launch(Grid(1), near_end, out); },
                {"out-of-bounds load in kernel 'raw_pointer'", "of the " + std::to_string(n * 4) + "-byte allocation",
                 "past its end"});
}

TEST_CASE("pointers chosen by where() are checked against every pointer argument", "[bounds][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  const int n = 32;
  Kernel k("either", [](Ptr<float> a, Ptr<float> b, Ptr<float> out, Int shift) {
    Int offs = arange(0, n);
    Ptr<float> p = where(offs % 2 == 0, a + offs, b + offs + shift);
    store(out + offs, load(p));
  }, kChecked);
  Device cpu = Device::cpu();
  std::vector<float> ha = generate<float>(rng, n, uniform_real<float>(-5, 5));
  std::vector<float> hb = generate<float>(rng, n, uniform_real<float>(-5, 5));
  Buffer<float> a = cpu.upload(ha), b = cpu.upload(hb), out = cpu.alloc<float>(n);
  k.launch(Grid(1), a, b, out, 0);
  std::vector<float> got = out.download();
  for (int i = 0; i < n; ++i) CHECK(got[i] == (i % 2 == 0 ? ha[i] : hb[i]));
  require_error([&] { k.launch(Grid(1), a, b, out, 1 << 20); },
                {"out-of-bounds load in kernel 'either'", "outside every allocation its pointers may come from"});
}

TEST_CASE("an out-of-bounds store inside a task names the task and replica", "[bounds][cpu-only][async]") {
  WEFT_SEEDED_RNG(rng);
  const int n = random_int(rng, 1, 127);
  int line = 0;
  Kernel k("oob_in_task", [&](Ptr<float> out) {
    async_tasks(task("writer", {.warps = 4, .replicas = 2}, [&] {
      Int offs = task_replica_id() * 128 + arange(0, 128);
      line = __LINE__; store(out + offs, cast<float>(offs));
    }));
  }, kChecked);
  Device cpu = Device::cpu();
  Buffer<float> out = cpu.alloc<float>(128 + n);  // replica 1 writes past the end
  std::string message = require_error([&] { k.launch(Grid(1), out); },
                                      {"out-of-bounds store in kernel 'oob_in_task', block (0, 0, 0): element " +
                                           std::to_string(n) + " of the store",
                                       "(task 'writer' replica 1)"});
  CHECK(message.find("test_bounds_checks.cpp:" + std::to_string(line)) != std::string::npos);
}
