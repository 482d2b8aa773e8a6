// local_gather and local_scatter (weft/async.h, TLX's names): elements of a shared-memory view picked by an
// index tile along one axis, read into a tile or written from one. Values against plain C++ loops over
// fresh random data on the current device (the CPU backend in CI, the GPU in the gpu suite), the TLX tests'
// own shapes among them; the PTX; and the errors.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "error_checks.h"
#include "ptxas_check.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

template <class T> std::vector<T> random_values(size_t n, Rng& rng) {
  std::vector<T> v(n);
  for (T& x : v) x = T(std::uniform_real_distribution<float>(-100.f, 100.f)(rng));
  return v;
}

template <class T> double as_double(T x) { return static_cast<double>(static_cast<float>(x)); }

// TLX's test_local_gather_1d_native / test_scatter_gather_multiwarp: the diagonal of an N x M matrix kept
// as one row of N * M elements, gathered with indices i * (M + 1); and scattered into zeros.
void diagonal_1d(Device dev, int N, int M, int warps, Rng& rng) {
  INFO(N << " x " << M << ", " << warps << " warps");
  std::vector<float> matrix = random_values<float>(size_t(N) * M, rng), values = random_values<float>(N, rng);
  Kernel gather("gather_diagonal", [N, M](Ptr<float> m, Ptr<float> out) {
    auto smem = local_alloc<float>({N * M}, 1, "smem");
    Int all = arange(0, N * M);
    local_store(smem[0], load(m + all));
    Int diagonal = arange(0, N) * (M + 1);
    store(out + arange(0, N), local_gather(smem[0], diagonal, 0));
  }, KernelOptions{.num_warps = warps});
  Buffer<float> out = dev.upload(std::vector<float>(N, std::nanf("")));
  gather.launch(Grid(1), dev.upload(matrix), out);
  std::vector<float> got = out.download();
  int wrong = 0;
  for (int i = 0; i < N; ++i)
    if (got[i] != matrix[size_t(i) * (M + 1)] && ++wrong <= 8)
      UNSCOPED_INFO("gather " << i << ": " << got[i] << ", want " << matrix[size_t(i) * (M + 1)]);
  CHECK(wrong == 0);

  Kernel scatter("scatter_diagonal", [N, M](Ptr<float> v, Ptr<float> out) {
    auto smem = local_alloc<float>({N * M}, 1, "smem");
    Int all = arange(0, N * M);
    local_store(smem[0], zeros<float>({N * M}));
    local_scatter(smem[0], load(v + arange(0, N)), arange(0, N) * (M + 1), 0);
    store(out + all, local_load(smem[0]));
  }, KernelOptions{.num_warps = warps});
  Buffer<float> whole = dev.upload(std::vector<float>(size_t(N) * M, std::nanf("")));
  scatter.launch(Grid(1), dev.upload(values), whole);
  std::vector<float> w = whole.download();
  wrong = 0;
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < M; ++c) {
      float want = r == c ? values[r] : 0.f;
      if (w[size_t(r) * M + c] != want && ++wrong <= 8) UNSCOPED_INFO("scatter (" << r << ", " << c << "): " << w[size_t(r) * M + c]);
    }
  CHECK(wrong == 0);
}

// A [R, C] view and an [IR, IC] tile of random indices along `axis` (IR <= R or IC <= C off the axis, any
// size along it): result[i, j] = view[idx[i, j], j] (axis 0) or view[i, idx[i, j]] (axis 1); and a scatter
// of random values through a permutation of the axis (no two elements to one place) into a buffer of other
// random values, which keeps the elements no index names.
template <class T> void gather_scatter_2d(Device dev, int R, int C, int IR, int IC, int axis, int warps, Rng& rng) {
  INFO(type_name<T>() << " view [" << R << ", " << C << "], indices [" << IR << ", " << IC << "], axis " << axis << ", "
                      << warps << " warps");
  const int extent = axis == 0 ? R : C;
  std::vector<T> view = random_values<T>(size_t(R) * C, rng), values = random_values<T>(size_t(IR) * IC, rng);
  std::vector<int32_t> idx(size_t(IR) * IC);
  for (int32_t& i : idx) i = std::uniform_int_distribution<int32_t>(0, extent - 1)(rng);
  Kernel k("gather_2d", [=](Ptr<T> v, Ptr<int32_t> ix, Ptr<T> out) {
    auto smem = local_alloc<T>({R, C}, 2, "view");
    Int r = expand_dims(arange(0, R), 1), c = expand_dims(arange(0, C), 0);
    local_store(smem[1], load(v + r * C + c));
    Int ir = expand_dims(arange(0, IR), 1), ic = expand_dims(arange(0, IC), 0);
    store(out + ir * IC + ic, local_gather(smem[1], load(ix + ir * IC + ic), axis));
  }, KernelOptions{.num_warps = warps});
  Buffer<T> out = dev.upload(std::vector<T>(idx.size(), T(-7.f)));
  k.launch(Grid(1), dev.upload(view), dev.upload(idx), out);
  std::vector<T> got = out.download();
  int wrong = 0;
  for (int i = 0; i < IR; ++i)
    for (int j = 0; j < IC; ++j) {
      int at = idx[size_t(i) * IC + j];
      T want = axis == 0 ? view[size_t(at) * C + j] : view[size_t(i) * C + at];
      if (as_double(got[size_t(i) * IC + j]) != as_double(want) && ++wrong <= 8)
        UNSCOPED_INFO("gather (" << i << ", " << j << ") index " << at << ": " << as_double(got[size_t(i) * IC + j])
                                 << ", want " << as_double(want));
    }
  CHECK(wrong == 0);

  // Scatter: along the axis, each line of the indices a prefix of its own permutation of [0, extent).
  const int lines = axis == 0 ? IC : IR, per_line = axis == 0 ? IR : IC;
  if (per_line > extent) return;
  for (int line = 0; line < lines; ++line) {
    std::vector<int32_t> perm(extent);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int p = 0; p < per_line; ++p) (axis == 0 ? idx[size_t(p) * IC + line] : idx[size_t(line) * IC + p]) = perm[p];
  }
  Kernel s("scatter_2d", [=](Ptr<T> v, Ptr<T> vals, Ptr<int32_t> ix, Ptr<T> out) {
    auto smem = local_alloc<T>({R, C}, 1, "view");
    Int r = expand_dims(arange(0, R), 1), c = expand_dims(arange(0, C), 0);
    local_store(smem[0], load(v + r * C + c));
    Int ir = expand_dims(arange(0, IR), 1), ic = expand_dims(arange(0, IC), 0);
    local_scatter(smem[0], load(vals + ir * IC + ic), load(ix + ir * IC + ic), axis);
    store(out + r * C + c, local_load(smem[0]));
  }, KernelOptions{.num_warps = warps});
  Buffer<T> whole = dev.upload(std::vector<T>(view.size(), T(-7.f)));
  s.launch(Grid(1), dev.upload(view), dev.upload(values), dev.upload(idx), whole);
  std::vector<T> want = view, w = whole.download();
  for (int i = 0; i < IR; ++i)
    for (int j = 0; j < IC; ++j) {
      int at = idx[size_t(i) * IC + j];
      (axis == 0 ? want[size_t(at) * C + j] : want[size_t(i) * C + at]) = values[size_t(i) * IC + j];
    }
  wrong = 0;
  for (size_t e = 0; e < want.size(); ++e)
    if (as_double(w[e]) != as_double(want[e]) && ++wrong <= 8)
      UNSCOPED_INFO("scatter element " << e << ": " << as_double(w[e]) << ", want " << as_double(want[e]));
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("local_gather and local_scatter: TLX's diagonal of a matrix kept in one row, 1 to 4 warps", "[ops][async][gather]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  for (auto [N, M, warps] : {std::tuple{32, 32, 1}, {64, 64, 1}, {64, 64, 2}, {128, 128, 4}}) diagonal_1d(dev, N, M, warps, rng);
}

TEST_CASE("local_gather and local_scatter along either axis of a 2-D view: random indices, index tiles of other shapes",
          "[ops][async][gather]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  for (int axis : {0, 1}) {
    gather_scatter_2d<float>(dev, 32, 32, 32, 32, axis, 1, rng);
    gather_scatter_2d<float>(dev, 64, 32, 16, 32, axis, 4, rng);   // fewer indices than the view off the axis
    if (axis == 0)
      gather_scatter_2d<bf16>(dev, 32, 64, 64, 64, axis, 4, rng);  // more indices than the view along the axis
    else
      gather_scatter_2d<bf16>(dev, 64, 32, 64, 64, axis, 4, rng);
    gather_scatter_2d<int32_t>(dev, 16, 16, 16, 8, axis, 2, rng);  // a tile smaller than the group: copies
  }
  gather_scatter_2d<float>(dev, 8, 64, 4, 4, -1, 1, rng);  // axis -1: the last
}

TEST_CASE("local_gather of a buffer TMA filled with a 128-byte swizzle reads the logical elements", "[ops][async][gather]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<bf16> a = random_values<bf16>(64 * 64, rng);
  std::vector<int32_t> idx(64 * 64);
  for (int32_t& i : idx) i = std::uniform_int_distribution<int32_t>(0, 63)(rng);
  Kernel k("gather_swizzled", [](TensorDesc<bf16, 2> A, Ptr<int32_t> ix, Ptr<bf16> out) {
    auto a_s = local_alloc<bf16>({64, 64}, 1, "a_s");
    auto ready = alloc_barriers(1, 1, "ready");
    async_tasks(task("reader", {.warps = 4}, [&] {
      barrier_expect_bytes(ready[0], a_s.stage_bytes());
      async_descriptor_load(A, a_s[0], {0, 0}, ready[0]);
      barrier_wait(ready[0], 0);
      Int r = expand_dims(arange(0, 64), 1), c = expand_dims(arange(0, 64), 0);
      store(out + r * 64 + c, local_gather(a_s[0], load(ix + r * 64 + c), 1));
    }));
  });
  Buffer<bf16> da = dev.upload(a), out = dev.upload(std::vector<bf16>(64 * 64, bf16(-7.f)));
  k.launch(Grid(1), tma(da, {64, 64}, {64, 64}), dev.upload(idx), out);
  std::vector<bf16> got = out.download();
  int wrong = 0;
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 64; ++c) {
      bf16 want = a[size_t(r) * 64 + idx[size_t(r) * 64 + c]];
      if (as_double(got[size_t(r) * 64 + c]) != as_double(want) && ++wrong <= 8)
        UNSCOPED_INFO("(" << r << ", " << c << "): " << as_double(got[size_t(r) * 64 + c]) << ", want " << as_double(want));
    }
  CHECK(wrong == 0);
  std::string ptx = k.ptx(tma(da, {64, 64}, {64, 64}));
  CHECK(ptx.find("ld.shared") != std::string::npos);
}

TEST_CASE("local_gather and local_scatter: the PTX reads and writes shared memory and ptxas assembles it",
          "[async][gather][ptx]") {
  Kernel k("gather_scatter_ptx", [](Ptr<float> x, Ptr<int32_t> ix, Ptr<float> out) {
    auto smem = local_alloc<float>({32, 32}, 1, "smem");
    Int r = expand_dims(arange(0, 32), 1), c = expand_dims(arange(0, 32), 0);
    local_store(smem[0], load(x + r * 32 + c));
    Int i = load(ix + r * 32 + c);
    local_scatter(smem[0], local_gather(smem[0], i, 0) * 2.0f, i, 1);
    store(out + r * 32 + c, local_load(smem[0]));
  });
  std::string ptx = k.ptx();
  CHECK(ptx.find("ld.shared.b32") != std::string::npos);
  CHECK(ptx.find("st.shared.b32") != std::string::npos);
  check_ptxas_assembles(ptx);
}

TEST_CASE("local_gather and local_scatter: errors name the line and what to change", "[async][gather][errors]") {
  int line = 0;
  auto kernel_with = [&](auto body) {
    return [=] {
      Kernel k("gather_error", [&](Ptr<float> out) {
        auto smem = local_alloc<float>({16, 8}, 1, "smem");
        body(smem[0], out);
      });
      k.ir();
    };
  };
  require_weft_error(kernel_with([&](SharedView<float> v, Ptr<float> out) {
    line = __LINE__ + 1;
    store(out + arange(0, 16), local_gather(v, arange(0, 16), 0));
  }), __FILE__, line, "must have the view's rank");
  require_weft_error(kernel_with([&](SharedView<float> v, Ptr<float>) {
    line = __LINE__ + 1;
    local_gather(v, zeros<int32_t>({16, 8}), 2);
  }), __FILE__, line, "axis 2 does not exist");
  require_weft_error(kernel_with([&](SharedView<float> v, Ptr<float>) {
    line = __LINE__ + 1;
    local_gather(v, zeros<int32_t>({16, 16}), 0);
  }), __FILE__, line, "larger than the view [16x8] along axis 1");
  require_weft_error(kernel_with([&](SharedView<float> v, Ptr<float>) {
    line = __LINE__ + 1;
    local_scatter(v, zeros<float>({8, 8}), zeros<int32_t>({16, 8}), 0);
  }), __FILE__, line, "the values must have the indices' shape");
  // An index outside the view: the CPU backend checks each one at run time.
  Device cpu = Device::cpu();
  for (bool scatter : {false, true}) {
    require_weft_error([&] {
      Kernel k("gather_out_of_range", [&](Ptr<int32_t> ix, Ptr<float> out) {
        auto smem = local_alloc<float>({64}, 1, "table");
        local_store(smem[0], zeros<float>({64}));
        line = __LINE__ + 1;
        scatter ? local_scatter(smem[0], zeros<float>({32}), load(ix + arange(0, 32)), 0) : store(out + arange(0, 32), local_gather(smem[0], load(ix + arange(0, 32)), 0));
      });
      std::vector<int32_t> idx(32, 5);
      idx[17] = 64;
      k.launch(cpu.stream(), Grid(1), cpu.upload(idx), cpu.alloc<float>(32));
    }, __FILE__, line, scatter ? "local_scatter: index 64 (element 17 of the indices) is outside buffer 'table'"
                               : "local_gather: index 64 (element 17 of the indices) is outside buffer 'table'");
  }
}
