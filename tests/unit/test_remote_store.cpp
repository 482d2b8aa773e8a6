// async_remote_shmem_store (weft/async.h, TLX's name): a tile from registers into another block's shared
// memory with st.async, completed on that block's mbarrier. TLX's test (a cluster sums the row sums of its
// column slices in block 0) on the current device against a double reference, other element types and a
// tile smaller than the group, the poison a receiver reads before its wait (CPU), the PTX and the errors.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "error_checks.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// TLX's test_async_remote_shmem_store: cluster c of `ctas` blocks takes rows [64 c, 64 c + 64) of an
// [M, N] matrix; block r sums its N / ctas columns per row and stores the 64 sums into block 0's slot r;
// block 0 waits for each slot and adds them to its own.
void row_sums_in_block_0(Device dev, int ctas, int warps, Rng& rng) {
  INFO(ctas << " blocks per cluster, " << warps << " warps");
  const int BM = 64, N = 256, clusters = 3, M = BM * clusters, BN = N / ctas;
  std::vector<float> x(size_t(M) * N);
  for (float& v : x) v = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
  Kernel k("remote_row_sums", [=](Ptr<float> x, Ptr<float> out) {
    auto slots = local_alloc<float>({BM}, ctas, "slots");
    auto bars = alloc_barriers(ctas, 1, "landed");
    for (int i = 1; i < ctas; ++i) barrier_expect_bytes(bars[i], slots.stage_bytes());
    cluster_barrier();
    Int rank = cluster_cta_rank();
    Int cluster = program_id(0) / ctas;
    Int rows = expand_dims(cluster * BM + arange(0, BM), 1);
    Int cols = expand_dims(rank * BN + arange(0, BN), 0);
    Tile<float> mine = sum(load(x + rows * N + cols), 1);
    if_(rank != 0, [&] { async_remote_shmem_store(slots[rank], mine, 0, bars[rank]); }, [&] {
      Var<float> total = mine;
      for (int i = 1; i < ctas; ++i) {
        barrier_wait(bars[i], 0);
        total = total + local_load(slots[i]);
      }
      store(out + cluster * BM + arange(0, BM), total);
    });
  }, KernelOptions{.num_warps = warps, .cluster = {ctas, 1, 1}});
  Buffer<float> out = dev.upload(std::vector<float>(M, std::nanf("")));
  k.launch(Grid(clusters * ctas), dev.upload(x), out);
  std::vector<float> got = out.download();
  int wrong = 0;
  for (int r = 0; r < M; ++r) {
    double want = 0;
    for (int c = 0; c < N; ++c) want += x[size_t(r) * N + c];
    if (!(std::fabs(got[r] - want) <= 1e-4) && ++wrong <= 8) UNSCOPED_INFO("row " << r << ": " << got[r] << ", want " << want);
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("async_remote_shmem_store: TLX's row sums of a cluster gathered in block 0, clusters of 2 and 4",
          "[async][remote_store]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  row_sums_in_block_0(dev, 2, 1, rng);
  row_sums_in_block_0(dev, 4, 1, rng);
  row_sums_in_block_0(dev, 2, 4, rng);  // 64 sums on 128 threads: each stored once, by its owner
}

TEST_CASE("async_remote_shmem_store of i32 and f64 tiles into a 2-D stage of the other block", "[async][remote_store]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<int32_t> a(2 * 16 * 32);
  for (int32_t& v : a) v = std::uniform_int_distribution<int32_t>(-1000000, 1000000)(rng);
  Kernel k("remote_store_types", [](Ptr<int32_t> a, Ptr<int32_t> ints, Ptr<double> wides) {
    auto is = local_alloc<int32_t>({16, 32}, 1, "ints");
    auto ds = local_alloc<double>({16, 32}, 1, "wides");
    auto bars = alloc_barriers(2, 1, "landed");
    barrier_expect_bytes(bars[0], is.stage_bytes());
    barrier_expect_bytes(bars[1], ds.stage_bytes());
    cluster_barrier();
    Int rank = cluster_cta_rank();
    Int offs = expand_dims(arange(0, 16), 1) * 32 + expand_dims(arange(0, 32), 0);
    Int mine = load(a + rank * 512 + offs);
    Int other = 1 - rank;  // each block sends to the other
    async_remote_shmem_store(is[0], mine * 3, other, bars[0]);
    async_remote_shmem_store(ds[0], cast<double>(mine) * 0.5, other, bars[1]);
    barrier_wait(bars[0], 0);
    barrier_wait(bars[1], 0);
    store(ints + rank * 512 + offs, local_load(is[0]));
    store(wides + rank * 512 + offs, local_load(ds[0]));
    cluster_barrier();  // no block leaves while the other may still store into it
  }, KernelOptions{.num_warps = 4, .cluster = {2, 1, 1}});
  Buffer<int32_t> ints = dev.upload(std::vector<int32_t>(a.size(), -7));
  Buffer<double> wides = dev.upload(std::vector<double>(a.size(), std::nan("")));
  k.launch(Grid(2), dev.upload(a), ints, wides);
  std::vector<int32_t> gi = ints.download();
  std::vector<double> gd = wides.download();
  int wrong = 0;
  for (int r = 0; r < 2; ++r)
    for (int e = 0; e < 512; ++e) {
      int32_t sent = a[size_t(1 - r) * 512 + e];
      if ((gi[size_t(r) * 512 + e] != sent * 3 || gd[size_t(r) * 512 + e] != sent * 0.5) && ++wrong <= 8)
        UNSCOPED_INFO("block " << r << " element " << e << ": " << gi[size_t(r) * 512 + e] << ", " << gd[size_t(r) * 512 + e]);
    }
  CHECK(wrong == 0);
}

TEST_CASE("async_remote_shmem_store: the destination reads as poison until the receiving barrier's phase completes",
          "[async][remote_store][cpu-only]") {
  if (Device::current().kind() != BackendKind::cpu) {
    WARN("SKIPPED: the poison the CPU backend reads is CPU-only");
    return;
  }
  Kernel k("remote_store_unwaited", [](Ptr<float> out) {
    auto slot = local_alloc<float>({64}, 1, "slot");
    auto bar = alloc_barriers(1, 1, "landed");
    Int rank = cluster_cta_rank();
    if_(rank == 1, [&] { async_remote_shmem_store(slot[0], full<float>({64}, 3.0), 0, bar[0]); }, [&] {
      store(out + arange(0, 64), local_load(slot[0]));
      barrier_expect_bytes(bar[0], slot.stage_bytes());
      barrier_wait(bar[0], 0);
      store(out + 64 + arange(0, 64), local_load(slot[0]));
    });
  }, KernelOptions{.num_warps = 1, .cluster = {2, 1, 1}});
  Device dev = Device::cpu();
  Buffer<float> out = dev.upload(std::vector<float>(128, -1.0f));
  k.launch(Grid(2), out);
  std::vector<float> got = out.download();
  CHECK(std::isnan(got[0]));
  CHECK(got[64] == 3.0f);
}

TEST_CASE("async_remote_shmem_store becomes mapa and st.async with complete_tx", "[async][remote_store][ptx]") {
  Kernel k("remote_store_ptx", [](Ptr<float> x, Ptr<double> y) {
    auto f = local_alloc<float>({256}, 1, "f");
    auto d = local_alloc<double>({128}, 1, "d");
    auto bars = alloc_barriers(2, 1, "landed");
    barrier_expect_bytes(bars[0], f.stage_bytes());
    barrier_expect_bytes(bars[1], d.stage_bytes());
    cluster_barrier();
    Int other = 1 - cluster_cta_rank();
    async_remote_shmem_store(f[0], load(x + arange(0, 256)), other, bars[0]);
    async_remote_shmem_store(d[0], load(y + arange(0, 128)), other, bars[1]);
    barrier_wait(bars[0], 0);
    barrier_wait(bars[1], 0);
    store(x + arange(0, 256), local_load(f[0]));
    cluster_barrier();
  }, KernelOptions{.num_warps = 4, .cluster = {2, 1, 1}});
  std::string ptx = k.ptx();
  CHECK(ptx.find("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32") != std::string::npos);
  CHECK(ptx.find("st.async.shared::cluster.mbarrier::complete_tx::bytes.b64") != std::string::npos);
  CHECK(ptx.find("mapa.shared::cluster.u32") != std::string::npos);
}

TEST_CASE("async_remote_shmem_store: errors name the line and what to change", "[async][remote_store][errors]") {
  int line = 0;
  require_weft_error([&] {
    Kernel k("remote_store_half", [&](Ptr<bf16> x) {
      auto s = local_alloc<bf16>({64}, 1, "s");
      auto bars = alloc_barriers(1, 1, "landed");
      barrier_expect_bytes(bars[0], s.stage_bytes());
      line = __LINE__ + 1;
      async_remote_shmem_store(s[0], load(x + arange(0, 64)), 1, bars[0]);
    }, KernelOptions{.num_warps = 1, .cluster = {2, 1, 1}});
    k.ir();
  }, __FILE__, line, "st.async stores 4 or 8 bytes at a time");
  require_weft_error([&] {
    Kernel k("remote_store_no_cluster", [&](Ptr<float> x) {
      auto s = local_alloc<float>({64}, 1, "s");
      auto bars = alloc_barriers(1, 1, "landed");
      barrier_expect_bytes(bars[0], s.stage_bytes());
      line = __LINE__ + 1;
      async_remote_shmem_store(s[0], load(x + arange(0, 64)), 0, bars[0]);
    }, KernelOptions{.num_warps = 1});
    (void)k.ptx();
  }, __FILE__, line, "does not run in clusters");
  require_weft_error([&] {
    Kernel k("remote_store_unexpected", [&](Ptr<float> x) {
      auto s = local_alloc<float>({64}, 1, "s");
      auto bars = alloc_barriers(1, 1, "quiet");
      line = __LINE__ + 1;
      async_remote_shmem_store(s[0], load(x + arange(0, 64)), 1, bars[0]);
    }, KernelOptions{.num_warps = 1, .cluster = {2, 1, 1}});
    (void)k.ptx();
  }, __FILE__, line, "no barrier_expect_bytes names that barrier array");
  require_weft_error([&] {
    Kernel k("remote_store_shape", [&](Ptr<float> x) {
      auto s = local_alloc<float>({64}, 1, "s");
      auto bars = alloc_barriers(1, 1, "landed");
      barrier_expect_bytes(bars[0], s.stage_bytes());
      line = __LINE__ + 1;
      async_remote_shmem_store(s[0], load(x + arange(0, 32)), 1, bars[0]);
    }, KernelOptions{.num_warps = 1, .cluster = {2, 1, 1}});
    k.ir();
  }, __FILE__, line, "the tile must have the view's shape and element type");
}
