// async_load / async_commit_group / async_wait_group (cp.async, include/weft/async.h): values of
// double-buffered copies, masked copies with zero and non-zero fills, copies the GPU does element by
// element (gathers, 16-bit elements), and, on the CPU backend, the poison a stage shows before its wait.
//
// Inputs are small whole numbers, so every result is exact. The PTX of every [async] kernel here also goes
// through ptxas (ctest ptxas_accepts_every_test_kernel): the 16-byte, 4/8-byte and synchronous paths.
#include <cstring>
#include <string>

#include "test_util.h"

using namespace weft_test;

namespace {

constexpr int R = 16, C = 64, kTile = R * C;  // 8 elements per thread of 4 warps: 16-byte copies

Int tile_offsets() { return expand_dims(arange(0, R), 1) * C + expand_dims(arange(0, C), 0); }
Int tile_cols() { return expand_dims(arange(0, C), 0) + zeros<int32_t>({R, C}); }

// Each block streams `iters` tiles of x through a 2-stage ring: the copy of tile i + 1 is in flight while
// tile i is read (async_wait_group(1)); `pending` 0 waits for both. `gather` reads each tile transposed
// (x holds it column-major), so no run of pointers is consecutive: the GPU copies element by element.
template <class T> Kernel ring_kernel(int pending, bool gather) {
  // Named per variant, so that WEFT_DUMP keeps the PTX of each.
  std::string name = "cp_async_ring_" + type_name<T>() + "_wait" + std::to_string(pending) + (gather ? "_gather" : "");
  return Kernel(name, [=](Ptr<T> x, Ptr<T> out, Int iters) {
    auto buf = local_alloc<T>({R, C}, 2, "buf");
    Int offs = tile_offsets();
    Int src = gather ? expand_dims(arange(0, C), 0) * R + expand_dims(arange(0, R), 1) : offs;
    Int base = program_id(0) * iters * kTile;
    async_load(x + base + src, buf[0]);
    async_commit_group();
    for_range(0, iters, [&](Int i) {
      Int next = i + 1;
      // Past the last tile the copy is masked off (it reads nothing); the group keeps the count even.
      async_load(x + base + minimum(next, iters - 1) * kTile + src, buf[next % 2], offs * 0 + next < iters);
      async_commit_group();
      async_wait_group(pending);
      Tile<T> v = local_load(buf[i % 2]);
      store(out + base + i * kTile + offs, v * 2 + 1);
    });
  });
}

template <class T> void check_ring(Rng& rng, int pending, bool gather) {
  INFO(type_name<T>() << ", async_wait_group(" << pending << ")" << (gather ? ", gathered" : ""));
  const int programs = 3, iters = 5;
  std::vector<host_t<T>> x = generate<T>(rng, programs * iters * kTile, small_whole<T>(-60, 60));
  Output<T> out(x.size());
  launch(ring_kernel<T>(pending, gather), Grid(programs), Input<T>(x), out, iters);
  std::vector<host_t<T>> want(x.size());
  for (size_t t = 0; t < x.size() / kTile; ++t)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        size_t from = t * kTile + (gather ? c * R + r : r * C + c);
        want[t * kTile + r * C + c] = from_ref<T>(2 * to_ref<T>(x[from]) + 1);
      }
  check_near<T>(out, want);
}

}  // namespace

TEST_CASE("async_load double-buffers a stream of tiles with async_wait_group(1) and (0)", "[async]") {
  WEFT_SEEDED_RNG(rng);
  for (int pending : {1, 0}) {
    check_ring<float>(rng, pending, false);
    check_ring<int32_t>(rng, pending, false);
    check_ring<bf16>(rng, pending, false);
    check_ring<double>(rng, pending, false);
  }
}

TEST_CASE("async_load of gathered elements (no consecutive run): element by element, 16-bit ones synchronously", "[async]") {
  WEFT_SEEDED_RNG(rng);
  check_ring<float>(rng, 1, true);
  check_ring<bf16>(rng, 1, true);
  check_ring<int8_t>(rng, 0, true);
}

TEST_CASE("masked async_load: masked-off elements are zero, or the fill value", "[async]") {
  WEFT_SEEDED_RNG(rng);
  const int n = 40;  // valid columns of each row: a multiple of the 8 elements a thread copies at once
  auto check = [&]<class T>(std::type_identity<T>, bool with_fill, bool per_element) {
    INFO(type_name<T>() << (with_fill ? ", fill -7" : ", zero fill") << (per_element ? ", mask per element" : ", mask per column"));
    std::string name = "cp_async_masked_" + type_name<T>() + (with_fill ? "_fill" : "") + (per_element ? "_each" : "");
    Kernel k(name, [=](Ptr<T> x, Ptr<T> out) {
      auto buf = local_alloc<T>({R, C}, 1, "buf");
      Int offs = tile_offsets();
      // Per column: one run of a row is all in or all out; per element: a checkerboard-like pattern.
      Bool mask = per_element ? (offs % 3) != 1 : tile_cols() < n;
      Ptr<T> p = x + program_id(0) * kTile + offs;
      if (with_fill)
        async_load(p, buf[0], mask, -7);
      else
        async_load(p, buf[0], mask);
      async_commit_group();
      async_wait_group(0);
      store(out + program_id(0) * kTile + offs, local_load(buf[0]));
    });
    const int programs = 2;
    std::vector<host_t<T>> x = generate<T>(rng, programs * kTile, small_whole<T>(-60, 60));
    Output<T> out(x.size());
    launch(k, Grid(programs), Input<T>(x), out);
    std::vector<host_t<T>> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      int e = static_cast<int>(i % kTile);
      bool in = per_element ? e % 3 != 1 : e % C < n;
      want[i] = in ? x[i] : from_ref<T>(with_fill ? -7 : 0);
    }
    check_near<T>(out, want);
  };
  for (bool with_fill : {false, true})
    for (bool per_element : {false, true}) {
      check(std::type_identity<float>{}, with_fill, per_element);
      check(std::type_identity<bf16>{}, with_fill, per_element);
    }
}

TEST_CASE("async_load in two task replicas, each streaming its own half of the tiles", "[async]") {
  WEFT_SEEDED_RNG(rng);
  const int tiles_per_replica = 6;
  Kernel k("cp_async_tasks", [](Ptr<float> x, Ptr<float> out, Int iters) {
    auto buf = local_alloc<float>({R, C}, 4, "buf");  // stages 2r and 2r + 1 belong to replica r
    Int offs = tile_offsets();
    async_tasks(task("copier", {.warps = 2, .replicas = 2}, [&] {
      Int r = task_replica_id();
      for_range(0, iters, [&](Int i) {
        Int tile = i * 2 + r;
        async_load(x + tile * kTile + offs, buf[r * 2 + i % 2]);
        async_commit_group();
        async_wait_group(0);
        store(out + tile * kTile + offs, local_load(buf[r * 2 + i % 2]) * 3.0f);
      });
    }));
  });
  std::vector<float> x = generate<float>(rng, 2 * tiles_per_replica * kTile, small_whole<float>(-1000, 1000));
  Output<float> out(x.size());
  launch(k, Grid(1), Input<float>(x), out, tiles_per_replica);
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = 3 * x[i];
  check_near<float>(out, want);
}

TEST_CASE("a stage read before the async_wait_group that retires its copy is poison (CPU semantics)", "[async][cpu-only]") {
  // The stages hold 5 first; then, read 0: after the commit, before any wait. Read 1: after async_wait_group(1) with one group in flight.
  // Read 2: a copy never committed is not waited for by async_wait_group(0). Read 3: after the wait.
  Kernel k("cp_async_early", [](Ptr<float> x, Ptr<float> out) {
    auto buf = local_alloc<float>({R, C}, 2, "buf");
    Int offs = tile_offsets();
    local_store(buf[0], full<float>({R, C}, 5.0));
    local_store(buf[1], full<float>({R, C}, 5.0));
    async_load(x + offs, buf[0]);
    async_commit_group();
    store(out + offs, local_load(buf[0]));
    async_wait_group(1);
    store(out + kTile + offs, local_load(buf[0]));
    async_load(x + kTile + offs, buf[1]);
    async_wait_group(0);
    store(out + 2 * kTile + offs, local_load(buf[1]));
    store(out + 3 * kTile + offs, local_load(buf[0]));
  });
  std::vector<float> x(2 * kTile);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  Output<float> out(4 * kTile);
  launch(k, Grid(1), Input<float>(x), out);
  std::vector<float> got = out.read();
  for (int read = 0; read < 3; ++read) {
    INFO("read " << read);
    size_t not_poison = 0;
    for (int e = 0; e < kTile; ++e) {
      uint32_t bits;
      std::memcpy(&bits, &got[read * kTile + e], 4);
      not_poison += bits != 0xFFFFFFFFu;
    }
    CHECK(not_poison == 0);
  }
  for (int e = 0; e < kTile; ++e) CHECK(got[3 * kTile + e] == x[e]);
}
