// Reducing TMA stores (TLX's store_reduce; include/weft/async.h, StoreReduce): values on the CPU backend (and,
// tagged [async], on the GPU in the gpu-ops run, their PTX assembled by ptxas in ptxas_accepts_every_test_kernel),
// the PTX they become, and the errors of the element-type rules at the user's line.
//
// Inputs are small whole numbers, so every sum is exact in each element type (bf16 included) whatever the order
// in which the blocks' reductions land, and results are compared exactly.
#include <algorithm>
#include <functional>
#include <string>

#include "error_checks.h"
#include "ptxas_check.h"
#include "test_util.h"

using namespace weft_test;

namespace {

constexpr int R = 8, C = 16;  // the box
// A tensor of M x N elements that no box divides (the last boxes of each dimension are partial), in a buffer of
// M x N + kSentinels elements: the elements past the tensor must keep their values.
constexpr int M = 3 * R - 3, N = 2 * C + 8, kSentinels = 64, kRepeats = 3;  // rows of 16-byte multiples (TMA)

std::string at(int line) { return std::string(__FILE__) + ":" + std::to_string(line); }

const char* op_name(StoreReduce op) { return op == StoreReduce::add ? "add" : op == StoreReduce::min ? "min" : "max"; }

// Block (i, j, k) loads box (i, j) of x and reduces it into box (i, j) of y: kRepeats blocks (k = 0, 1, 2)
// reduce the same box, on host threads or multiprocessors of their own.
template <class T> Kernel reducing_copy(StoreReduce op, Evict evict) {
  return Kernel(std::string("store_reduce_") + op_name(op) + (evict == Evict::none ? "" : "_hinted"),
                [op, evict](TensorDesc<T, 2> x, TensorDesc<T, 2> y) {
                  auto s = local_alloc<T>({R, C}, 1, "s");
                  auto full = alloc_barriers(1, 1, "full");
                  Int row = program_id(0) * R, col = program_id(1) * C;
                  barrier_expect_bytes(full[0], s.stage_bytes());
                  async_descriptor_load(x, s[0], {row, col}, full[0]);
                  barrier_wait(full[0], 0);
                  async_descriptor_store(y, s[0], {row, col}, op, evict);
                  async_store_wait(0);
                });
}

template <class T> void check_reduction(StoreReduce op, Evict evict) {
  INFO(dtype_of<T>.str() << " " << op_name(op) << (evict == Evict::none ? "" : " with an eviction hint"));
  WEFT_SEEDED_RNG(rng);
  using H = host_t<T>;
  std::vector<H> x = generate<T>(rng, size_t(M) * N, small_whole<T>(-9, 9));
  std::vector<H> y0 = generate<T>(rng, size_t(M) * N + kSentinels, small_whole<T>(-9, 9));
  Device dev = Device::current();
  Buffer<T> dx = dev.upload(x);
  Buffer<T> dy = dev.upload(y0);
  launch(reducing_copy<T>(op, evict), Grid((M + R - 1) / R, (N + C - 1) / C, kRepeats), tma(dx, {M, N}, {R, C}),
         tma(dy, {M, N}, {R, C}));
  std::vector<H> got = dy.download();
  int wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double want = double(to_ref<T>(y0[i]));
    if (i < x.size()) {
      double v = double(to_ref<T>(x[i]));
      want = op == StoreReduce::add ? want + kRepeats * v : op == StoreReduce::min ? std::min(want, v) : std::max(want, v);
    }
    if (double(to_ref<T>(got[i])) != want && ++wrong <= 5)
      FAIL_CHECK("element " << i << (i < x.size() ? "" : " (past the tensor)") << ": got " << double(to_ref<T>(got[i]))
                            << ", want " << want);
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("async_descriptor_store with StoreReduce adds, takes the minimum or the maximum into global memory",
          "[async][store_reduce]") {
  for (StoreReduce op : {StoreReduce::add, StoreReduce::min, StoreReduce::max}) {
    check_reduction<int32_t>(op, Evict::none);
    check_reduction<bf16>(op, Evict::none);
    check_reduction<f16>(op, Evict::none);
  }
  check_reduction<float>(StoreReduce::add, Evict::none);
  check_reduction<float>(StoreReduce::add, Evict::last);
  check_reduction<int32_t>(StoreReduce::max, Evict::first);
}

TEST_CASE("a reducing TMA store becomes cp.reduce.async.bulk.tensor", "[async][store_reduce][ptx]") {
  Buffer<float> buf = Device::cpu().upload(std::vector<float>(size_t(M) * N, 1.0f));
  Buffer<int32_t> ibuf = Device::cpu().upload(std::vector<int32_t>(size_t(M) * N, 1));
  std::string add = reducing_copy<float>(StoreReduce::add, Evict::none).ptx(tma(buf, {M, N}, {R, C}), tma(buf, {M, N}, {R, C}));
  CHECK(add.find("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [") != std::string::npos);
  CHECK(add.find("createpolicy") == std::string::npos);
  check_ptxas_assembles(add);
  std::string hinted =
      reducing_copy<float>(StoreReduce::add, Evict::last).ptx(tma(buf, {M, N}, {R, C}), tma(buf, {M, N}, {R, C}));
  CHECK(hinted.find("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group.L2::cache_hint") !=
        std::string::npos);
  CHECK(hinted.find("createpolicy.fractional.L2::evict_last.b64") != std::string::npos);
  check_ptxas_assembles(hinted);
  for (StoreReduce op : {StoreReduce::min, StoreReduce::max}) {
    std::string ptx = reducing_copy<int32_t>(op, Evict::none).ptx(tma(ibuf, {M, N}, {R, C}), tma(ibuf, {M, N}, {R, C}));
    CHECK(ptx.find(std::string("cp.reduce.async.bulk.tensor.2d.global.shared::cta.") + op_name(op) +
                   ".tile.bulk_group") != std::string::npos);
    check_ptxas_assembles(ptx);
  }
  // StoreReduce::none is the plain store.
  std::string plain =
      reducing_copy<float>(StoreReduce::none, Evict::none).ptx(tma(buf, {M, N}, {R, C}), tma(buf, {M, N}, {R, C}));
  CHECK(plain.find("cp.reduce") == std::string::npos);
  CHECK(plain.find("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [") != std::string::npos);
}

TEST_CASE("reducing TMA stores: the element types the copy engine has no reduction for are errors at the user's line",
          "[async][store_reduce][errors]") {
  Buffer<float> buf = Device::cpu().upload(std::vector<float>(size_t(R) * C, 1.0f));
  Buffer<int64_t> lbuf = Device::cpu().upload(std::vector<int64_t>(size_t(R) * C, 1));
  int line = 0;
  auto store_with = [&](StoreReduce op) {
    return Kernel("bad_store_reduce", [&, op](TensorDesc<float, 2> y) {
      auto s = local_alloc<float>({R, C}, 1, "s");
      local_store(s[0], full<float>({R, C}, 1.0f));
      fence_async_shared();
      line = __LINE__; async_descriptor_store(y, s[0], {0, 0}, op);
      async_store_wait(0);
    });
  };
  SECTION("min of f32") {
    Kernel k = store_with(StoreReduce::min);
    std::string message = require_error([&] { (void)k.ptx(tma(buf, {R, C}, {R, C})); },
                                        {"StoreReduce::min", "no min reduction of f32 elements", "i32, f16 or bf16"});
    CHECK(message.find(at(line)) != std::string::npos);
  }
  SECTION("max of f32, on the CPU backend too") {
    Kernel k = store_with(StoreReduce::max);
    Buffer<float> y = Device::cpu().upload(std::vector<float>(size_t(R) * C, 0.0f));
    std::string message = require_error([&] { k.launch(Device::cpu().stream(), Grid(1), tma(y, {R, C}, {R, C})); },
                                        {"no max reduction of f32 elements"});
    CHECK(message.find(at(line)) != std::string::npos);
  }
  SECTION("add of i64") {
    Kernel k("bad_store_reduce_i64", [&](TensorDesc<int64_t, 2> y) {
      auto s = local_alloc<int64_t>({R, C}, 1, "s");
      local_store(s[0], full<int64_t>({R, C}, 1));
      fence_async_shared();
      line = __LINE__; async_descriptor_store(y, s[0], {0, 0}, StoreReduce::add);
    });
    std::string message = require_error([&] { (void)k.ptx(tma(lbuf, {R, C}, {R, C})); },
                                        {"no add reduction of i64 elements", "i32, f32, f16 or bf16"});
    CHECK(message.find(at(line)) != std::string::npos);
  }
  SECTION("a reduction that does not exist") {
    Kernel k = store_with(static_cast<StoreReduce>(7));
    std::string message =
        require_error([&] { (void)k.ptx(tma(buf, {R, C}, {R, C})); }, {"7 is not a reduction", "StoreReduce::add"});
    CHECK(message.find(at(line)) != std::string::npos);
  }
}
