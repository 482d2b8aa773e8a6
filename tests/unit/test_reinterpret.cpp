// local_reinterpret (weft/async.h, TLX's name): a stage or a whole buffer seen as other elements in another
// shape, over the same bytes — checked against the host's own view of those bytes (memcpy), on the current
// device, plain, across stages and through a TMA swizzle; and the errors.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <string>
#include <vector>

#include "error_checks.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

template <class To, class From> std::vector<To> host_bits(const std::vector<From>& from) {
  std::vector<To> to(from.size() * sizeof(From) / sizeof(To));
  std::memcpy(static_cast<void*>(to.data()), from.data(), to.size() * sizeof(To));  // void*: bf16 has constructors (-Wclass-memaccess)
  return to;
}

// Elements whose bits differ; a NaN read through a float type may come back as another NaN (the tile holds it
// in f32 between the load and the store), so for floats NaN matches NaN.
template <class T> int count_bit_mismatches(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  int wrong = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if constexpr (!std::is_integral_v<T>)
      if (std::isnan(static_cast<float>(got[i])) && std::isnan(static_cast<float>(want[i]))) continue;
    if (++wrong <= 8) UNSCOPED_INFO(what << " element " << i << " differs");
  }
  return wrong;
}

}  // namespace

TEST_CASE("local_reinterpret: f32 bytes read as i32 and as bf16 pairs, and TLX's f16 tile in an f32 stage",
          "[ops][async][reinterpret]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<float> x(32 * 32);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1e3f, 1e3f)(rng);
  Kernel k("reinterpret_bits", [](Ptr<float> x, Ptr<int32_t> as_int, Ptr<bf16> as_halves) {
    auto buf = local_alloc<float>({32, 32}, 2, "words");
    Int r = expand_dims(arange(0, 32), 1), c = expand_dims(arange(0, 32), 0);
    local_store(buf[1], load(x + r * 32 + c));
    store(as_int + r * 32 + c, local_load(local_reinterpret<int32_t>(buf[1])));
    Int c2 = expand_dims(arange(0, 64), 0);
    store(as_halves + r * 64 + c2, local_load(local_reinterpret<bf16>(buf[1], {32, 64})));
  }, KernelOptions{.num_warps = 4});
  Buffer<int32_t> ints = dev.upload(std::vector<int32_t>(32 * 32, -7));
  Buffer<bf16> halves = dev.upload(std::vector<bf16>(64 * 32, bf16(-7.f)));
  k.launch(Grid(1), dev.upload(x), ints, halves);
  CHECK(count_bit_mismatches(ints.download(), host_bits<int32_t>(x), "i32") == 0);
  CHECK(count_bit_mismatches(halves.download(), host_bits<bf16>(x), "bf16") == 0);

  // TLX's test_local_reinterpret, in shared memory: an f16 tile kept in (half of) an f32 stage.
  std::vector<f16> h(64 * 128);
  for (f16& v : h) v = f16(std::uniform_real_distribution<float>(-4.f, 4.f)(rng));
  Kernel tlx("reinterpret_f16_in_f32", [](Ptr<f16> x, Ptr<f16> y) {
    auto words = local_alloc<float>({64, 128}, 1, "words");
    auto halves = local_reinterpret<f16>(words[0]);
    Int r = expand_dims(arange(0, 64), 1), c = expand_dims(arange(0, 128), 0);
    local_store(halves, load(x + r * 128 + c));
    store(y + r * 128 + c, local_load(halves));
  });
  Buffer<f16> y = dev.upload(std::vector<f16>(h.size(), f16(-7.f)));
  tlx.launch(Grid(1), dev.upload(h), y);
  CHECK(count_bit_mismatches(y.download(), h, "f16") == 0);
}

TEST_CASE("local_reinterpret of a whole buffer: its stages one after the other", "[ops][async][reinterpret]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<float> x(4 * 16 * 32);
  for (float& v : x) v = std::uniform_real_distribution<float>(-10.f, 10.f)(rng);
  Kernel k("reinterpret_stages", [](Ptr<float> x, Ptr<float> y) {
    auto buf = local_alloc<float>({16, 32}, 4, "stages");
    Int r = expand_dims(arange(0, 16), 1), c = expand_dims(arange(0, 32), 0);
    for (int s = 0; s < 4; ++s) local_store(buf[s], load(x + s * 512 + r * 32 + c));
    auto all = local_reinterpret<float>(buf);  // [64, 32]
    Int r4 = expand_dims(arange(0, 64), 1);
    store(y + r4 * 32 + c, local_load(all) * 2.0f);
  }, KernelOptions{.num_warps = 2});
  Buffer<float> y = dev.upload(std::vector<float>(x.size(), std::nanf("")));
  k.launch(Grid(1), dev.upload(x), y);
  std::vector<float> got = y.download();
  int wrong = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (got[i] != x[i] * 2.0f && ++wrong <= 8) UNSCOPED_INFO("element " << i << ": " << got[i]);
  CHECK(wrong == 0);
}

TEST_CASE("local_reinterpret of a stage TMA filled with a 128-byte swizzle: bf16 pairs read as i32",
          "[ops][async][reinterpret]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<bf16> a(64 * 64);
  for (bf16& v : a) v = bf16(std::uniform_real_distribution<float>(-8.f, 8.f)(rng));
  Kernel k("reinterpret_swizzled", [](TensorDesc<bf16, 2> A, Ptr<int32_t> out) {
    auto a_s = local_alloc<bf16>({64, 64}, 1, "a_s");
    auto ready = alloc_barriers(1, 1, "ready");
    async_tasks(task("reader", {.warps = 4}, [&] {
      barrier_expect_bytes(ready[0], a_s.stage_bytes());
      async_descriptor_load(A, a_s[0], {0, 0}, ready[0]);
      barrier_wait(ready[0], 0);
      Int r = expand_dims(arange(0, 64), 1), c = expand_dims(arange(0, 32), 0);
      store(out + r * 32 + c, local_load(local_reinterpret<int32_t>(a_s[0], {64, 32})));
    }));
  });
  Buffer<bf16> da = dev.upload(a);
  Buffer<int32_t> out = dev.upload(std::vector<int32_t>(64 * 32, -7));
  k.launch(Grid(1), tma(da, {64, 64}, {64, 64}), out);
  CHECK(count_bit_mismatches(out.download(), host_bits<int32_t>(a), "i32") == 0);
}

TEST_CASE("local_reinterpret: errors name the line and what to change", "[async][reinterpret][errors]") {
  int line = 0;
  auto trace = [&](auto body) {
    return [=] {
      Kernel k("reinterpret_error", body);
      k.ir();
    };
  };
  require_weft_error(trace([&](Ptr<float>) {
    auto buf = local_alloc<float>({16, 16}, 1, "small");
    line = __LINE__ + 1;
    local_reinterpret<double>(buf[0], {16, 32});
  }), __FILE__, line, "needs 4096 bytes, but the stage has 1024");
  require_weft_error(trace([&](Ptr<float>) {
    auto buf = local_alloc<float>({16, 16}, 1, "small");
    line = __LINE__ + 1;
    local_reinterpret<int32_t>(buf[0].rows(0, 8));
  }), __FILE__, line, "not a rows(), cols() or local_trans view");
  require_weft_error([&] {
    Kernel k("reinterpret_dot", [&](Ptr<float> out) {
      auto a_s = local_alloc<float>({64, 32}, 1, "a_s");
      auto b_s = local_alloc<bf16>({64, 64}, 1, "b_s");
      async_tasks(task("mma", {.warps = 4}, [&] {
        line = __LINE__ + 1;
        Tile<float> acc = async_dot_wait(0, async_dot(local_reinterpret<bf16>(a_s[0], {64, 64}), b_s[0], zeros<float>({64, 64})));
        Int r = expand_dims(arange(0, 64), 1), c = expand_dims(arange(0, 64), 0);
        store(out + r * 64 + c, acc);
      }));
    });
    k.ir();
  }, __FILE__, line, "through local_reinterpret");
  require_weft_error([&] {
    Kernel k("reinterpret_panels", [&](TensorDesc<bf16, 2> A, Ptr<int32_t> out) {
      auto a_s = local_alloc<bf16>({64, 128}, 1, "wide");
      auto ready = alloc_barriers(1, 1, "ready");
      async_tasks(task("t", {.warps = 4}, [&] {
        barrier_expect_bytes(ready[0], a_s.stage_bytes());
        async_descriptor_load(A, a_s[0].cols(0, 64), {0, 0}, ready[0]);
        async_descriptor_load(A, a_s[0].cols(64, 64), {0, 64}, ready[0]);
        barrier_wait(ready[0], 0);
        line = __LINE__ + 1;
        Tile<int32_t> w = local_load(local_reinterpret<int32_t>(a_s[0], {64, 64}));
        store(out + expand_dims(arange(0, 64), 1) * 64 + expand_dims(arange(0, 64), 0), w);
      }));
    });
    Device cpu = Device::cpu();
    Buffer<bf16> a = cpu.upload(std::vector<bf16>(64 * 128, bf16(1.f)));
    k.launch(cpu.stream(), Grid(1), tma(a, {64, 128}, {64, 64}), cpu.alloc<int32_t>(64 * 64));
  }, __FILE__, line, "keeps its columns in panels of 64");
}
