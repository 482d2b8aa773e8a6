// async_load_bulk and async_store_bulk (weft/async.h): cp.async.bulk between global and shared memory
// without a descriptor (TLX's async_load(..., bulk=True) and async_store). Round trips of fresh random bytes
// on the current device, a ring fed by a producer task, the PTX, and the errors: alignment proven at compile
// time, sizes of 16-byte multiples, layouts, bounds.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <cstdint>
#include <string>
#include <vector>

#include "error_checks.h"
#include "ptxas_check.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// TLX's test_async_load_bulk and test_async_bulk_copy_roundtrip: global -> shared (completed on an
// mbarrier) -> global, each program its own chunk of CHUNK elements.
template <class T, int CHUNK> void round_trip(Device dev, int programs, Rng& rng) {
  INFO(type_name<T>() << " chunks of " << CHUNK << ", " << programs << " programs");
  std::vector<T> src(size_t(programs) * CHUNK);
  for (T& x : src) x = T(std::uniform_int_distribution<int>(-100, 100)(rng));
  Kernel k("bulk_round_trip", [](Ptr<T> src, Ptr<T> dst) {
    auto buf = local_alloc<T>({CHUNK}, 1, "chunk");
    auto bars = alloc_barriers(1, 1, "loaded");
    Int at = program_id(0) * CHUNK;
    barrier_expect_bytes(bars[0], buf.stage_bytes());
    async_load_bulk(src + at, buf[0], bars[0]);
    barrier_wait(bars[0], 0);
    async_store_bulk(dst + at, buf[0]);
    async_store_wait(0);
  }, KernelOptions{.num_warps = 1});
  Buffer<T> out = dev.upload(std::vector<T>(src.size(), T(-7)));
  k.launch(Grid(programs), dev.upload(src), out);
  std::vector<T> got = out.download();
  int wrong = 0;
  for (size_t i = 0; i < src.size(); ++i)
    if (!(static_cast<double>(static_cast<float>(got[i])) == static_cast<double>(static_cast<float>(src[i]))) && ++wrong <= 8)
      UNSCOPED_INFO("element " << i << ": " << static_cast<float>(got[i]) << ", want " << static_cast<float>(src[i]));
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("async_load_bulk and async_store_bulk: round trips of random chunks, 16 bytes to 16 KB", "[ops][async][bulk]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  round_trip<int8_t, 16>(dev, 3, rng);
  round_trip<int8_t, 4096>(dev, 2, rng);
  round_trip<bf16, 64>(dev, 5, rng);
  round_trip<float, 4096>(dev, 3, rng);
  round_trip<double, 2>(dev, 4, rng);
}

TEST_CASE("async_load_bulk into rows of a 2-D stage, the tile read and changed in registers, stored back in bulk",
          "[ops][async][bulk]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int R = 32, C = 64, BLOCK = 8;
  std::vector<float> x(2 * R * C);
  for (float& v : x) v = std::uniform_real_distribution<float>(-10.f, 10.f)(rng);
  Kernel k("bulk_rows", [](Ptr<float> x, Ptr<float> y) {
    auto buf = local_alloc<float>({R, C}, 2, "tile");
    auto bars = alloc_barriers(1, 1, "loaded");
    Int base = program_id(0) * (R * C);
    barrier_expect_bytes(bars[0], buf.stage_bytes());
    for (int r = 0; r < R; r += BLOCK) async_load_bulk(x + base + r * C, buf[1].rows(r, BLOCK), bars[0]);
    barrier_wait(bars[0], 0);
    Int r = expand_dims(arange(0, R), 1), c = expand_dims(arange(0, C), 0);
    local_store(buf[0], local_load(buf[1]) * 3.0f + cast<float>(r * C + c));
    async_store_bulk(y + base, buf[0]);
    async_store_wait(0);
  }, KernelOptions{.num_warps = 4});
  Buffer<float> y = dev.upload(std::vector<float>(x.size(), std::nanf("")));
  k.launch(Grid(2), dev.upload(x), y);
  std::vector<float> got = y.download();
  int wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    float want = x[i] * 3.0f + float(i % (R * C));
    if (got[i] != want && ++wrong <= 8) UNSCOPED_INFO("element " << i << ": " << got[i] << ", want " << want);
  }
  CHECK(wrong == 0);
}

TEST_CASE("async_load_bulk feeding a two-stage ring from a producer task, a consumer summing each chunk",
          "[ops][async][bulk]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int CHUNK = 256, chunks = 9;
  std::vector<float> x(size_t(chunks) * CHUNK);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
  Kernel k("bulk_ring", [](Ptr<float> x, Ptr<float> sums, Int chunks) {
    auto ring = local_alloc<float>({CHUNK}, 2, "ring");
    auto full = alloc_barriers(2, 1, "full");
    auto empty = alloc_barriers(2, 1, "empty");
    async_tasks(task("producer", {.warps = 1}, [&] {
                  for_range(0, chunks, [&](Int i) {
                    Int s = i % 2;
                    barrier_wait(empty[s], (i / 2 + 1) % 2);  // the first lap passes (phase -1 is done)
                    barrier_expect_bytes(full[s], ring.stage_bytes());
                    async_load_bulk(x + i * CHUNK, ring[s], full[s]);
                  });
                }),
                task("consumer", {.warps = 4}, [&] {
                  for_range(0, chunks, [&](Int i) {
                    Int s = i % 2;
                    barrier_wait(full[s], (i / 2) % 2);
                    Tile<float> v = local_load(ring[s]);
                    barrier_arrive(empty[s]);
                    store(sums + i, sum(v, 0));
                  });
                }));
  });
  Buffer<float> sums = dev.upload(std::vector<float>(chunks, std::nanf("")));
  k.launch(Grid(1), dev.upload(x), sums, chunks);
  std::vector<float> got = sums.download();
  for (int i = 0; i < chunks; ++i) {
    double want = 0;
    for (int j = 0; j < CHUNK; ++j) want += x[size_t(i) * CHUNK + j];
    INFO("chunk " << i);
    CHECK(got[i] == Approx(want).margin(1e-4));
  }
}

TEST_CASE("async_load_bulk and async_store_bulk through pointers 4 bytes off 16-byte alignment", "[ops][async][bulk]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int CHUNK = 64, programs = 3;
  std::vector<float> x(programs * CHUNK + 8);
  for (float& v : x) v = std::uniform_real_distribution<float>(-10.f, 10.f)(rng);
  // The offsets are run-time values: weft cannot prove the addresses aligned and tests each one.
  Kernel k("bulk_misaligned", [](Ptr<float> x, Ptr<float> y, Int shift_in, Int shift_out) {
    auto buf = local_alloc<float>({CHUNK}, 1, "chunk");
    auto bars = alloc_barriers(1, 1, "loaded");
    barrier_expect_bytes(bars[0], buf.stage_bytes());
    async_load_bulk(x + shift_in + program_id(0) * CHUNK, buf[0], bars[0]);
    barrier_wait(bars[0], 0);
    local_store(buf[0], local_load(buf[0]) + 1.0f);
    async_store_bulk(y + shift_out + program_id(0) * CHUNK, buf[0]);
    async_store_wait(0);
  }, KernelOptions{.num_warps = 2});
  Buffer<float> xs = dev.upload(x);
  for (auto [in, out] : {std::pair{1, 0}, {0, 3}, {5, 2}, {4, 4}}) {
    INFO("shifts " << in << ", " << out);
    Buffer<float> y = dev.upload(std::vector<float>(x.size(), std::nanf("")));
    k.launch(Grid(programs), xs, y, in, out);
    std::vector<float> got = y.download();
    int wrong = 0;
    for (int i = 0; i < programs * CHUNK; ++i)
      if (got[out + i] != x[in + i] + 1.0f && ++wrong <= 8) UNSCOPED_INFO("element " << i << ": " << got[out + i]);
    CHECK(wrong == 0);
  }
  std::string ptx = k.ptx();
  CHECK(ptx.find("mbarrier.complete_tx.relaxed.cta.shared::cta.b64") != std::string::npos);
}

TEST_CASE("async_load_bulk and async_store_bulk: the PTX and ptxas", "[async][bulk][ptx]") {
  Kernel k("bulk_ptx", [](Ptr<float> src, Ptr<float> dst) {
    auto buf = local_alloc<float>({256}, 1, "chunk");
    auto bars = alloc_barriers(1, 1, "loaded");
    barrier_expect_bytes(bars[0], buf.stage_bytes());
    async_load_bulk(src + program_id(0) * 256, buf[0], bars[0]);
    barrier_wait(bars[0], 0);
    async_store_bulk(dst + program_id(0) * 256, buf[0]);
    async_store_wait(0);
  });
  std::string ptx = k.ptx();
  CHECK(ptx.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.global.shared::cta.bulk_group") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.commit_group") != std::string::npos);
  check_ptxas_assembles(ptx);
}

TEST_CASE("async_load_bulk and async_store_bulk: errors name the line and what to change", "[async][bulk][errors]") {
  int line = 0;
  Device cpu = Device::cpu();
  Buffer<float> data = cpu.upload(std::vector<float>(1024, 1.f));
  auto launch = [&](auto body) {
    return [=] {
      Kernel k("bulk_error", body, KernelOptions{.num_warps = 1});
      k.launch(cpu.stream(), Grid(1), data);
    };
  };
  require_weft_error(launch([&](Ptr<float> x) {
    auto buf = local_alloc<float>({2}, 1, "chunk");
    line = __LINE__ + 1;
    async_store_bulk(x, buf[0]);
  }), __FILE__, line, "moves a multiple of 16 bytes");
  require_weft_error(launch([&](Ptr<float> x) {
    auto buf = local_alloc<float>({64}, 1, "chunk");
    auto bars = alloc_barriers(1, 1, "loaded");
    barrier_expect_bytes(bars[0], 256);
    line = __LINE__ + 1;
    async_load_bulk(x + 1000, buf[0], bars[0]);
    barrier_wait(bars[0], 0);
  }), __FILE__, line, "out-of-bounds async_load_bulk");
  // A buffer that TMA fills with a 128-byte swizzle is not in row-major byte order.
  require_weft_error([&] {
    Kernel k("bulk_swizzled", [&](TensorDesc<bf16, 2> A, Ptr<bf16> out) {
      auto a_s = local_alloc<bf16>({64, 64}, 1, "a_s");
      auto ready = alloc_barriers(1, 1, "ready");
      async_tasks(task("t", {.warps = 4}, [&] {
        barrier_expect_bytes(ready[0], a_s.stage_bytes());
        async_descriptor_load(A, a_s[0], {0, 0}, ready[0]);
        barrier_wait(ready[0], 0);
        line = __LINE__ + 1;
        async_store_bulk(out, a_s[0]);
        async_store_wait(0);
      }));
    });
    Buffer<bf16> a = cpu.upload(std::vector<bf16>(64 * 64, bf16(1.f)));
    k.launch(cpu.stream(), Grid(1), tma(a, {64, 64}, {64, 64}), cpu.alloc<bf16>(64 * 64));
  }, __FILE__, line, "is stored with a 128-byte swizzle");
}
