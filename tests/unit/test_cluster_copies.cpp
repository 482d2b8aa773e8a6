// Bulk copies into another block's shared memory (async_remote_shmem_copy), L2 eviction hints on TMA
// copies and the TMA prefetches (include/weft/async.h): values on the CPU backend (and, tagged [async], on
// the GPU in the gpu-ops run, with their PTX assembled by ptxas in ptxas_accepts_every_test_kernel), the
// PTX each one becomes, and the errors of each rule at the user's line.
//
// Inputs are small whole numbers in floats, so every result is exact and compared exactly.
#include <cmath>
#include <functional>
#include <string>

#include "error_checks.h"
#include "test_util.h"

using namespace weft_test;

namespace {

constexpr int R = 8, C = 16, kTile = R * C;  // one tile: R x C floats (512 bytes)

KernelOptions in_clusters(int x) { return KernelOptions{.num_warps = 4, .cluster = {x, 1, 1}}; }

Int tile_offsets() { return expand_dims(arange(0, R), 1) * C + expand_dims(arange(0, C), 0); }

std::vector<float> whole_floats(Rng& rng, size_t n) { return generate<float>(rng, n, small_whole<float>(-1000, 1000)); }

std::string at(int line) { return std::string(__FILE__) + ":" + std::to_string(line); }

// Runs `fn`, which must throw a weft::Error mentioning each phrase, at `line` of this file (read after
// the call: kernels set it while they are traced).
void require_error_at(const std::function<void()>& fn, const int& line, const std::vector<std::string>& phrases) {
  std::string message = require_error(fn, phrases);
  INFO("message:\n" << message);
  CHECK(message.find(at(line) + ": weft::Error") != std::string::npos);
}

// Block 1 of each cluster of 2 sends tile i of its cluster's input, times 2, through a ring of `stages`
// slots to block 0: it writes the tile into its own `send[s]` and copies that into `ring[s]` of block 0,
// completing the bytes on block 0's `full[s]`. Block 0 expects the bytes on its own `full[s]`, waits,
// writes the slot plus 1 out and releases the slot at block 1's `empty[s]` — which also tells block 1
// that the copy has read `send[s]`.
Kernel remote_copy_ring(int steps, int stages) {
  return Kernel("remote_copy_ring", [=](Ptr<float> x, Ptr<float> out) {
    auto send = local_alloc<float>({R, C}, stages, "send");
    auto ring = local_alloc<float>({R, C}, stages, "ring");
    auto full = alloc_barriers(stages, 1, "full");
    auto empty = alloc_barriers(stages, 1, "empty");
    Int rank = cluster_cta_rank();
    Int cluster = program_id(0) / 2;
    Int offs = tile_offsets();
    Pipeline p(stages);
    for_range(0, steps, [&](Int i) {
      if_(rank == 1, [&] {
        p.acquire(empty);
        local_store(send[p.index()], load(x + (cluster * steps + i) * kTile + offs) * 2);
        async_remote_shmem_copy(ring[p.index()], send[p.index()], 0, full[p.index()]);
      }, [&] {
        barrier_expect_bytes(full[p.index()], ring.stage_bytes());
        p.wait(full);
        store(out + (cluster * steps + i) * kTile + offs, local_load(ring[p.index()]) + 1);
        p.release(empty, 1);
      });
      p.advance();
    });
  }, in_clusters(2));
}

}  // namespace

// ---- async_remote_shmem_copy ----------------------------------------------------------------------------

TEST_CASE("async_remote_shmem_copy hands tiles from block 1 to block 0 through a ring", "[async][cluster_copy]") {
  WEFT_SEEDED_RNG(rng);
  for (int stages : {1, 2}) {
    INFO("stages " << stages);
    constexpr int steps = 6, clusters = 3;
    std::vector<float> x = whole_floats(rng, size_t(clusters) * steps * kTile);
    Output<float> out(x.size());
    launch(remote_copy_ring(steps, stages), Grid(2 * clusters), Input<float>(x), out);
    std::vector<float> want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = 2 * x[i] + 1;
    check_near<float>(out, want);
  }
}

// [memcheck_reports_dsmem]: scripts/gpu-sanitize leaves it out of memcheck, which reports rank 2's copy
// into block 0 as outside the remote block (it reports the same on scripts/sanitizer-probes/dsmem_gather.cu).
TEST_CASE("async_remote_shmem_copy gathers the partial tiles of a cluster of 4 into block 0, itself included",
          "[async][cluster_copy][memcheck_reports_dsmem]") {
  WEFT_SEEDED_RNG(rng);
  // Block r computes its partial tile (its input times r + 1) and copies it into parts[r] of block 0 (block
  // 0 copies into itself); block 0 expects the four tiles on its `full[0]`, waits and writes their sum and
  // each part. The cluster syncs before its blocks exit, so no sender's `mine` goes away early.
  Kernel k("gather_partials", [](Ptr<float> x, Ptr<float> sums, Ptr<float> parts_out) {
    auto mine = local_alloc<float>({R, C}, 1, "mine");
    auto parts = local_alloc<float>({R, C}, 4, "parts");
    auto full = alloc_barriers(1, 1, "full");
    Int rank = cluster_cta_rank();
    Int cluster = program_id(0) / 4;
    Int offs = tile_offsets();
    local_store(mine[0], load(x + program_id(0) * kTile + offs) * cast<float>(rank + 1));
    async_remote_shmem_copy(parts[rank], mine[0], 0, full[0]);
    if_(rank == 0, [&] {
      barrier_expect_bytes(full[0], 4 * parts.stage_bytes());
      barrier_wait(full[0], 0);
      Var<float> sum = zeros<float>({R, C});
      for_range(0, 4, [&](Int r) {
        Tile<float> part = local_load(parts[r]);
        store(parts_out + (cluster * 4 + r) * kTile + offs, part);
        sum = sum.read() + part;
      });
      store(sums + cluster * kTile + offs, sum.read());
    });
  }, in_clusters(4));
  constexpr int clusters = 2;
  std::vector<float> x = whole_floats(rng, size_t(clusters) * 4 * kTile);
  Output<float> sums(size_t(clusters) * kTile), parts(x.size());
  launch(k, Grid(4 * clusters), Input<float>(x), sums, parts);
  std::vector<float> want_sums(sums.size(), 0.0f), want_parts(x.size());
  for (int c = 0; c < clusters; ++c)
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < kTile; ++e) {
        float v = x[size_t((c * 4 + r) * kTile + e)] * float(r + 1);
        want_parts[size_t((c * 4 + r) * kTile + e)] = v;
        want_sums[size_t(c * kTile + e)] += v;
      }
  check_near<float>(parts, want_parts);
  check_near<float>(sums, want_sums);
  // The device is still usable after the gather: a kernel launched next runs and its result arrives (an
  // error the gather left behind would surface here, not in some later test of the same process).
  Device::current().synchronize();
  Kernel after("after_gather", [](Ptr<float> out) { store(out + arange(0, kTile), full<float>({kTile}, 7.0)); });
  Output<float> sevens(kTile);
  launch(after, Grid(1), sevens);
  check_near<float>(sevens, std::vector<float>(kTile, 7.0f));
}

TEST_CASE("async_remote_shmem_copy: the destination reads as poison until the receiving barrier's phase completes",
          "[async][cluster_copy][cpu-only]") {
  // Block 0 reads the slot without waiting: on the CPU backend the bytes are not there yet (NaN).
  if (Device::current().kind() != BackendKind::cpu) {
    WARN("SKIPPED: the poison the CPU backend reads is CPU-only");
    return;
  }
  Kernel k("copy_unwaited", [](Ptr<float> out) {
    auto send = local_alloc<float>({R, C}, 1, "send");
    auto ring = local_alloc<float>({R, C}, 1, "ring");
    auto full = alloc_barriers(1, 1, "full");
    Int rank = cluster_cta_rank();
    Int offs = tile_offsets();
    if_(rank == 1, [&] {
      local_store(send[0], weft::full<float>({R, C}, 3.0));
      async_remote_shmem_copy(ring[0], send[0], 0, full[0]);
    }, [&] {
      store(out + offs, local_load(ring[0]));
      barrier_expect_bytes(full[0], ring.stage_bytes());
      barrier_wait(full[0], 0);
      store(out + kTile + offs, local_load(ring[0]));
    });
  }, in_clusters(2));
  Device dev = Device::cpu();
  Buffer<float> out = dev.upload(std::vector<float>(2 * kTile, -1.0f));
  k.launch(Grid(2), out);
  std::vector<float> got = out.download();
  CHECK(std::isnan(got[0]));
  CHECK(got[kTile] == 3.0f);
}

TEST_CASE("async_remote_shmem_copy becomes mapa and cp.async.bulk.shared::cluster with complete_tx",
          "[async][cluster_copy][ptx]") {
  std::string ptx = remote_copy_ring(4, 2).ptx();
  CHECK(count_occurrences(ptx, "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes") == 1);
  CHECK(ptx.find("mapa.shared::cluster.u32") != std::string::npos);
  CHECK(ptx.find("fence.proxy.async.shared::cta") != std::string::npos);
  CHECK(ptx.find("mbarrier.try_wait.parity.acquire.cluster") != std::string::npos);
}

TEST_CASE("async_remote_shmem_copy errors: no cluster, sizes, alignment, types, no expecting barrier",
          "[async][cluster_copy][errors]") {
  int line = 0;
  auto copy_kernel = [&](KernelOptions options, auto body) {
    return Kernel("bad_copy", [&, body](Ptr<float>) {
      auto a = local_alloc<float>({R, C}, 2, "a");
      auto small = local_alloc<float>({2}, 2, "small");
      auto narrow = local_alloc<float>({4, 2}, 1, "narrow");
      auto h = local_alloc<bf16>({R, C}, 1, "h");
      auto bar = alloc_barriers(1, 1, "bar");
      auto silent = alloc_barriers(1, 1, "silent");
      barrier_expect_bytes(bar[0], 512);
      body(a, small, narrow, h, bar, silent);
    }, options);
  };
  SECTION("outside a cluster launch") {
    Kernel k = copy_kernel(KernelOptions{.num_warps = 4}, [&](auto& a, auto&, auto&, auto&, auto& bar, auto&) {
      line = __LINE__; async_remote_shmem_copy(a[1], a[0], 0, bar[0]);
    });
    require_error_at([&] { (void)k.ptx(); }, line, {"kernel 'bad_copy' does not run in clusters", ".cluster = {2, 1, 1}"});
    Output<float> out(1);
    require_error_at([&] { launch(k, Grid(1), out); }, line, {"does not run in clusters"});
  }
  SECTION("not a multiple of 16 bytes") {
    Kernel k = copy_kernel(in_clusters(2), [&](auto&, auto& small, auto&, auto&, auto& bar, auto&) {
      line = __LINE__; async_remote_shmem_copy(small[1], small[0], 1, bar[0]);
    });
    require_error_at([&] { (void)k.ptx(); }, line, {"moves 8 bytes", "multiple of 16 bytes"});
  }
  SECTION("rows that may start off a 16-byte boundary") {
    Kernel k = copy_kernel(in_clusters(2), [&](auto&, auto&, auto& narrow, auto&, auto& bar, auto&) {
      line = __LINE__; async_remote_shmem_copy(narrow[0].rows(2, 2), narrow[0].rows(0, 2), 1, bar[0]);
    });
    require_error_at([&] { (void)k.ptx(); }, line, {"rows are 8 bytes", "multiple of 16"});
  }
  SECTION("different shapes") {
    Kernel k = copy_kernel(in_clusters(2), [&](auto& a, auto&, auto&, auto&, auto& bar, auto&) {
      line = __LINE__; async_remote_shmem_copy(a[1].rows(0, 4), a[0], 1, bar[0]);
    });
    require_error_at([&] { (void)k.ptx(); }, line,
                     {"the destination is f32[4x16] but the source is f32[8x16]"});
  }
  SECTION("a transposed view") {
    Kernel k = copy_kernel(in_clusters(2), [&](auto&, auto&, auto&, auto& h, auto& bar, auto&) {
      line = __LINE__; async_remote_shmem_copy(local_trans(h[0]), local_trans(h[0]), 1, bar[0]);
    });
    require_error_at([&] { (void)k.ptx(); }, line, {"local_trans view", "bytes as they are stored"});
  }
  SECTION("a barrier no barrier_expect_bytes names") {
    Kernel k = copy_kernel(in_clusters(2), [&](auto& a, auto&, auto&, auto&, auto&, auto& silent) {
      line = __LINE__; async_remote_shmem_copy(a[1], a[0], 1, silent[0]);
    });
    require_error_at([&] { (void)k.ptx(); }, line, {"barrier 'silent'", "no barrier_expect_bytes"});
    Output<float> out(1);
    require_error_at([&] { launch(k, Grid(2), out); }, line, {"no barrier_expect_bytes"});
  }
}

TEST_CASE("async_remote_shmem_copy between buffers of different layouts is an error at its line",
          "[async][cluster_copy][errors]") {
  // `tiles` takes its TMA descriptor's 64-byte swizzle, `plain` is row-major: the bytes of one are not the
  // tile in the other.
  std::vector<float> host(size_t(2) * kTile, 1.0f);
  Buffer<float> buf = Device::current().upload(host);  // the launch below runs where the suite runs
  int line = 0;
  Kernel k("copy_layouts", [&](TensorDesc<float, 2> a) {
    auto tiles = local_alloc<float>({R, C}, 1, "tiles");
    auto plain = local_alloc<float>({R, C}, 1, "plain");
    auto full = alloc_barriers(1, 1, "full");
    barrier_expect_bytes(full[0], 2 * tiles.stage_bytes());
    async_descriptor_load(a, tiles[0], {0, 0}, full[0]);
    barrier_wait(full[0], 0);
    line = __LINE__; async_remote_shmem_copy(plain[0], tiles[0], cluster_cta_rank() ^ 1, full[0]);
  }, in_clusters(2));
  auto desc = tma(buf, {2 * R, C}, {R, C});
  require_error_at([&] { (void)k.ptx(desc); }, line,
                   {"from buffer 'tiles' (64-byte swizzle, no panels) into buffer 'plain' (0-byte swizzle, no panels)"});
  require_error_at([&] { k.launch(Grid(2), desc); }, line, {"from buffer 'tiles'"});
}

TEST_CASE("async_remote_shmem_copy to a rank outside the cluster is an error at its line", "[async][cluster_copy][cpu-only]") {
  // Only the CPU backend checks a run-time rank; on a GPU this kernel faults and takes the process's CUDA
  // context with it (every later case of the process then fails), so it never runs there, even when a test
  // spec selects it under WEFT_BACKEND=cuda.
  if (Device::current().kind() != BackendKind::cpu) {
    WARN("SKIPPED: the copy to a rank outside the cluster would fault the GPU's context");
    return;
  }
  int line = 0;
  Kernel k("copy_bad_rank", [&](Ptr<float> out) {
    auto a = local_alloc<float>({R, C}, 1, "a");
    auto bar = alloc_barriers(1, 1, "bar");
    local_store(a[0], full<float>({R, C}, 1.0));
    line = __LINE__; async_remote_shmem_copy(a[0], a[0], cluster_cta_rank() + 1, bar[0]);
    barrier_expect_bytes(bar[0], a.stage_bytes());
    store(out + program_id(0), scalar<float>(1));
  }, in_clusters(2));
  (void)k.ir();
  Output<float> out(2);
  require_error_at([&] { launch(k, Grid(2), out); }, line,
                   {"async_remote_shmem_copy names cluster rank 2, but the kernel's cluster of (2, 1, 1) has ranks 0 to 1"});
}

// ---- L2 eviction hints and prefetch -------------------------------------------------------------------

namespace {

// Each block prefetches its descriptor and its box, loads the box of row band b (evict-first), and
// stores it plus 1 to row band b of `out` (evict-last).
Kernel hinted_copy() {
  return Kernel("hinted_copy", [](TensorDesc<float, 2> a, TensorDesc<float, 2> out) {
    auto s = local_alloc<float>({R, C}, 1, "s");
    auto full = alloc_barriers(1, 1, "full");
    Int row = program_id(0) * R;
    prefetch_descriptor(a);
    prefetch_descriptor(out);
    async_descriptor_prefetch(a, {row, 0});
    async_descriptor_prefetch(a, {row, 0}, Evict::last);
    barrier_expect_bytes(full[0], s.stage_bytes());
    async_descriptor_load(a, s[0], {row, 0}, full[0], Evict::first);
    barrier_wait(full[0], 0);
    local_store(s[0], local_load(s[0]) + 1.0f);
    fence_async_shared();
    async_descriptor_store(out, s[0], {row, 0}, Evict::last);
    async_store_wait(0);
  });
}

}  // namespace

TEST_CASE("TMA copies with L2 eviction hints and prefetches move the same values", "[async][cache_hints]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int blocks = 5;
  std::vector<float> a = whole_floats(rng, size_t(blocks) * kTile);
  Device dev = Device::current();
  Buffer<float> da = dev.upload(a);
  Buffer<float> dout = dev.upload(std::vector<float>(a.size(), std::nanf("")));  // poisoned
  launch(hinted_copy(), Grid(blocks), tma(da, {blocks * R, C}, {R, C}), tma(dout, {blocks * R, C}, {R, C}));
  std::vector<float> got = dout.download(), want(a.size());
  for (size_t i = 0; i < a.size(); ++i) want[i] = a[i] + 1;
  CHECK(got == want);
}

TEST_CASE("eviction hints become createpolicy and .L2::cache_hint and prefetches their PTX", "[async][cache_hints][ptx]") {
  std::vector<float> host(size_t(4) * kTile, 1.0f);
  Buffer<float> buf = Device::cpu().upload(host);
  std::string ptx = hinted_copy().ptx(tma(buf, {4 * R, C}, {R, C}), tma(buf, {4 * R, C}, {R, C}));
  CHECK(ptx.find("createpolicy.fractional.L2::evict_first.b64") != std::string::npos);
  CHECK(ptx.find("createpolicy.fractional.L2::evict_last.b64") != std::string::npos);
  CHECK(ptx.find("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint") !=
        std::string::npos);
  CHECK(ptx.find("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group.L2::cache_hint") != std::string::npos);
  CHECK(count_occurrences(ptx, "cp.async.bulk.prefetch.tensor.2d.L2.global.tile") == 2);
  CHECK(count_occurrences(ptx, "cp.async.bulk.prefetch.tensor.2d.L2.global.tile.L2::cache_hint") == 1);
  CHECK(count_occurrences(ptx, "prefetch.tensormap") == 2);

  // The multicast load with a hint, in a cluster.
  Kernel mc("hinted_multicast", [](TensorDesc<float, 2> a, Ptr<float> out) {
    auto tiles = local_alloc<float>({R, C}, 2, "tiles");
    auto full = alloc_barriers(1, 1, "full");
    Int rank = cluster_cta_rank();
    barrier_expect_bytes(full[0], 2 * tiles.stage_bytes());
    async_descriptor_load(a, tiles[rank], {rank * R, 0}, full[0], 0b11, Evict::first);
    barrier_wait(full[0], 0);
    store(out + program_id(0) * kTile + tile_offsets(), local_load(tiles[0]));
  }, in_clusters(2));
  std::string mptx = mc.ptx(tma(buf, {4 * R, C}, {R, C}));
  CHECK(mptx.find("complete_tx::bytes.multicast::cluster.L2::cache_hint") != std::string::npos);
}

TEST_CASE("TMA hints and prefetch: the errors at the user's line", "[async][cache_hints][errors]") {
  std::vector<float> host(size_t(4) * kTile, 1.0f);
  Buffer<float> buf = Device::cpu().upload(host);
  int line = 0;
  SECTION("a prefetch with too few coordinates") {
    Kernel k("bad_prefetch", [&](TensorDesc<float, 2> a) { line = __LINE__; async_descriptor_prefetch(a, {0}); });
    require_error_at([&] { (void)k.ptx(tma(buf, {4 * R, C}, {R, C})); }, line,
                     {"async_descriptor_prefetch: 1 coordinates for a 2-dimensional descriptor"});
  }
  SECTION("an eviction priority that does not exist") {
    Kernel k("bad_evict", [&](TensorDesc<float, 2> a) {
      auto s = local_alloc<float>({R, C}, 1, "s");
      auto full = alloc_barriers(1, 1, "full");
      line = __LINE__; async_descriptor_load(a, s[0], {0, 0}, full[0], static_cast<Evict>(9));
    });
    require_error_at([&] { (void)k.ptx(tma(buf, {4 * R, C}, {R, C})); }, line,
                     {"9 is not an L2 eviction priority", "Evict::first"});
  }
}

TEST_CASE("async_load with L2 eviction hints copies the same values and cp.async takes .L2::cache_hint",
          "[async][cache_hints]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int rows = 16, cols = 64, n = rows * cols;  // 8 floats per thread of 4 warps: 16-byte cp.async
  // Stage 0 gets the tile (evict-first), stage 1 the tile where it is positive and -7 elsewhere
  // (evict-last); the output is their sum.
  Kernel k("hinted_async_load", [](Ptr<float> x, Ptr<float> out) {
    auto buf = local_alloc<float>({rows, cols}, 2, "buf");
    Int offs = expand_dims(arange(0, rows), 1) * cols + expand_dims(arange(0, cols), 0);
    Tile<float> v = load(x + program_id(0) * n + offs);
    async_load(x + program_id(0) * n + offs, buf[0], Evict::first);
    async_load(x + program_id(0) * n + offs, buf[1], v > 0.0f, -7.0f, Evict::last);
    async_commit_group();
    async_wait_group(0);
    store(out + program_id(0) * n + offs, local_load(buf[0]) + local_load(buf[1]));
  });
  constexpr int programs = 3;
  std::vector<float> x = whole_floats(rng, size_t(programs) * n);
  Output<float> out(x.size());
  launch(k, Grid(programs), Input<float>(x), out);
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = x[i] + (x[i] > 0 ? x[i] : -7.0f);
  check_near<float>(out, want);
  std::string ptx = k.ptx();
  CHECK(ptx.find("createpolicy.fractional.L2::evict_first.b64") != std::string::npos);
  CHECK(ptx.find("createpolicy.fractional.L2::evict_last.b64") != std::string::npos);
  CHECK(ptx.find("cp.async.cg.shared.global.L2::cache_hint") != std::string::npos);
}
