// Kernel::compile_async: compiles on weft's compile threads, side by side, with the same results as
// compiling one after the other; errors come out of the future.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <future>
#include <thread>
#include <vector>

#include "driver/cpu/cpu_jit.h"
#include "support/compile_timing.h"
#include "weft/weft.h"

using namespace weft;

namespace {

// y = x * scale + i for i < n; `pause_ms` of host time in its body, so that its trace is long enough to
// see two compiles overlap however fast LLVM or the compile cache is.
Kernel make_scaled(const char* name, float scale, int pause_ms) {
  return Kernel(name, [scale, pause_ms](Ptr<float> x, Ptr<float> y, Int n, Const<int> block) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    Int i = program_id(0) * block + arange(0, block);
    Bool in = i < n;
    store(y + i, load(x + i, in, 0.f) * scale + cast<float>(i), in);
  });
}

std::vector<float> run(const Kernel& k, int block) {
  const int n = 300;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.25f * float(i) - 7.f;
  Device dev = Device::cpu();
  Buffer<float> dx = dev.upload(x), dy = dev.upload(std::vector<float>(n, -1.f));
  k.launch(dev.stream(), Grid((n + block - 1) / block), dx, dy, n, block);
  return dy.download();
}

}  // namespace

TEST_CASE("compile_async compiles kernels side by side, as compile would", "[compile-async][cpu-only]") {
  Device dev = Device::cpu();
  const std::vector<int> blocks = {32, 64, 128};
  Kernel a = make_scaled("async_scaled_a", 2.f, 150), b = make_scaled("async_scaled_b", -3.f, 150);
  support::take_peak_concurrent_compiles();
  std::vector<std::future<std::shared_ptr<const detail::CompiledKernel>>> pending;
  for (int block : blocks) {
    pending.push_back(a.compile_async(dev, block));
    pending.push_back(b.compile_async(dev, block));
  }
  std::vector<std::shared_ptr<const detail::CompiledKernel>> done;
  for (auto& f : pending) done.push_back(f.get());
  // Two kernels, each tracing for 150 ms: with two or more cores their compiles overlapped.
  if (std::thread::hardware_concurrency() >= 2) CHECK(support::take_peak_concurrent_compiles() >= 2);
  // The futures gave the specializations launches use, and they compute what serial compiles compute.
  Kernel a_serial = make_scaled("async_scaled_a", 2.f, 0), b_serial = make_scaled("async_scaled_b", -3.f, 0);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int block = blocks[i];
    CHECK(a.compile(dev, block) == done[2 * i]);
    CHECK(b.compile(dev, block) == done[2 * i + 1]);
    CHECK(run(a, block) == run(a_serial, block));
    CHECK(run(b, block) == run(b_serial, block));
  }
}

TEST_CASE("compile_async of a compile already under way waits for it", "[compile-async][cpu-only]") {
  Device dev = Device::cpu();
  Kernel k = make_scaled("async_scaled_same", 1.5f, 50);
  auto first = k.compile_async(dev, 64), second = k.compile_async(dev, 64);
  auto synchronous = k.compile(dev, 64);
  CHECK(first.get() == synchronous);
  CHECK(second.get() == synchronous);
}

TEST_CASE("compile_async's errors come out of the future", "[compile-async][cpu-only]") {
  Device dev = Device::cpu();
  Kernel bad("async_bad", [](Ptr<float> x, Const<int> block) {
    Tile<float> t = load(x + arange(0, block));
    store(x + arange(0, block * 2), t);  // shape mismatch: a weft::Error at trace time
  });
  auto f = bad.compile_async(dev, 16);
  CHECK_THROWS_AS(f.get(), Error);
  auto wrong_count = bad.compile_async(dev);  // no value for the Const parameter
  CHECK_THROWS_AS(wrong_count.get(), Error);
}

// Backend compiles so far (from LLVM or from the compile cache): what a launch that finds its code ready
// does not add to.
static int64_t backend_compiles() {
  driver::cpu::JitStats s = driver::cpu::jit_stats();
  return int64_t(s.compiled + s.loaded_from_cache);
}

TEST_CASE("prepare compiles exactly what the launch with those arguments runs", "[compile-async][cpu-only]") {
  Device dev = Device::cpu();
  const int n = 320, block = 64;  // n and block multiples of 16, buffers 16-byte aligned: specialized on
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = 0.5f * float(i) - 3.f;
  Buffer<float> dx = dev.upload(x);
  for (bool async : {false, true}) {
    INFO((async ? "prepare_async" : "prepare"));
    Kernel k = make_scaled(async ? "prepared_async" : "prepared", 3.f, 0);
    Buffer<float> dy = dev.upload(std::vector<float>(n, std::nanf("")));
    const int64_t before = backend_compiles();
    if (async) {
      std::future<void> ready = k.prepare_async(dev, dx, dy, n, block);
      ready.get();
    } else {
      k.prepare(dev, dx, dy, n, block);
    }
    CHECK(backend_compiles() == before + 1);
    k.launch(dev.stream(), Grid(n / block), dx, dy, n, block);
    CHECK(backend_compiles() == before + 1);  // the launch found its code ready
    std::vector<float> y = dy.download();
    for (int i = 0; i < n; ++i) CHECK(y[i] == x[i] * 3.f + float(i));
    // compile() knows only the Const: a launch with 16-divisible sizes and aligned buffers needs another
    // specialization, which prepare made (no compile here either way).
    k.compile(dev, block);
    const int64_t after_compile = backend_compiles();
    k.launch(dev.stream(), Grid(n / block), dx, dy, n, block);
    CHECK(backend_compiles() == after_compile);
  }
}

TEST_CASE("prepare checks the arguments as a launch does", "[compile-async][cpu-only]") {
  Device dev = Device::cpu();
  Kernel k = make_scaled("prepare_errors", 1.f, 0);
  Buffer<float> dx = dev.alloc<float>(8);
  CHECK_THROWS_WITH(k.prepare(dev, dx, dx, 8), Catch::Matchers::Contains("takes 4 arguments but the prepare passes 3"));
  std::future<void> bad = k.prepare_async(dev, dx, 8, 8, 64);
  CHECK_THROWS_AS(bad.get(), Error);
}
