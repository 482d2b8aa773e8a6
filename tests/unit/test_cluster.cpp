// Thread-block clusters (KernelOptions::cluster, include/weft/async.h): cluster_cta_rank, arrivals at
// another block's mbarrier, TMA multicast, cluster_sync, and the errors of cluster shapes, ranks and masks.
//
// On the CPU backend a cluster's blocks run as one set of fibers under one scheduler
// (src/driver/cpu/block_runtime.h). Tests tagged [async] run on the GPU too (gpu-ops) and their PTX goes
// through ptxas; [cpu-only] ones check what only the CPU backend reports (deadlocks, bad ranks and masks).
// Inputs are small whole numbers in floats, so every result is exact and compared exactly.
#include <optional>
#include <string>

#include "test_util.h"
#include "error_checks.h"

using namespace weft_test;

namespace {

constexpr int R = 8, C = 16, kTile = R * C;  // one tile: R x C floats

KernelOptions in_clusters(int x, int y = 1, int z = 1) { return KernelOptions{.num_warps = 4, .cluster = {x, y, z}}; }

// Offsets of a row-major R x C tile.
Int tile_offsets() { return expand_dims(arange(0, R), 1) * C + expand_dims(arange(0, C), 0); }

// This block's index in a grid of any shape, x fastest.
Int linear_block() { return program_id(0) + program_id(1) * num_programs(0) + program_id(2) * num_programs(0) * num_programs(1); }

std::vector<float> whole_floats(Rng& rng, size_t n) { return generate<float>(rng, n, small_whole<float>(-1000, 1000)); }


std::string at(int line) { return std::string(__FILE__) + ":" + std::to_string(line); }

bool contains(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The memory scope of a kernel's remote arrivals and waits (sm_90a PTX): cluster scope where it writes
// memory that another block reads after a wait (store(), local_store to a rank), else CTA scope.
void check_cluster_scope(const std::string& ptx, bool cluster_scope) {
  CHECK(contains(ptx, "mbarrier.arrive.release.cluster.shared::cluster.b64") == cluster_scope);
  CHECK(contains(ptx, "mbarrier.arrive.shared::cluster.b64") == !cluster_scope);
  CHECK(contains(ptx, "mbarrier.try_wait.parity.acquire.cluster") == cluster_scope);
}

}  // namespace

// ---- cluster_cta_rank ---------------------------------------------------------------------------------

TEST_CASE("cluster_cta_rank counts the blocks of each cluster, x fastest", "[async]") {
  WEFT_SEEDED_RNG(rng);
  struct Case {
    ClusterDims cluster;
    int64_t gx, gy, gz;
  };
  for (Case c : {Case{{2, 1, 1}, 6, 2, 1}, Case{{2, 2, 1}, 4, 4, 1}, Case{{1, 2, 2}, 3, 2, 4}, Case{{1, 1, 1}, 3, 1, 1}}) {
    INFO("cluster (" << c.cluster.x << ", " << c.cluster.y << ", " << c.cluster.z << ") grid (" << c.gx << ", " << c.gy
                     << ", " << c.gz << ")");
    Kernel k("cluster_rank", [](Ptr<int32_t> x, Ptr<int32_t> out) {
      Int b = linear_block();
      store(out + b, load(x + b) + cluster_cta_rank() * 1000);
    }, in_clusters(c.cluster.x, c.cluster.y, c.cluster.z));
    const int64_t blocks = c.gx * c.gy * c.gz;
    std::vector<int32_t> x = generate<int32_t>(rng, size_t(blocks), small_whole<int32_t>(-500, 500));
    Output<int32_t> out(x.size());
    launch(k, Grid(c.gx, c.gy, c.gz), Input<int32_t>(x), out);
    std::vector<int32_t> want(x.size());
    for (int64_t z = 0; z < c.gz; ++z)
      for (int64_t y = 0; y < c.gy; ++y)
        for (int64_t bx = 0; bx < c.gx; ++bx) {
          int64_t i = bx + y * c.gx + z * c.gx * c.gy;
          int64_t rank = bx % c.cluster.x + (y % c.cluster.y) * c.cluster.x + (z % c.cluster.z) * c.cluster.x * c.cluster.y;
          want[size_t(i)] = x[size_t(i)] + int32_t(rank) * 1000;
        }
    check_near<int32_t>(out, want);
  }
}

// ---- arrivals at another block's barrier -----------------------------------------------------------------

TEST_CASE("a remote arrival hands tiles from block 1 of a cluster to a task of block 0 and back", "[async]") {
  WEFT_SEEDED_RNG(rng);
  static constexpr int steps = 6, slots = 2;
  // Block 1's sender writes tile i of its cluster's input, times 2, to slot i % 2 of a global scratch and
  // arrives at `full` of block 0; block 0's receiver waits on its own `full`, writes the slot plus 1 out
  // and arrives at `empty` of block 1, where the sender waits before reusing the slot. Each block waits
  // only on its own barriers.
  Kernel k("remote_handoff", [](Ptr<float> x, Ptr<float> scratch, Ptr<float> out) {
    auto full = alloc_barriers(slots, 1, "full");
    auto empty = alloc_barriers(slots, 1, "empty");
    Int rank = cluster_cta_rank();
    Int cluster = program_id(0) / 2;
    Int offs = tile_offsets();
    async_tasks(
        task("sender", {.warps = 4}, [&] {
          if_(rank == 1, [&] {
            Pipeline p(slots);
            for_range(0, steps, [&](Int i) {
              p.acquire(empty);
              store(scratch + (cluster * slots + p.index()) * kTile + offs, load(x + (cluster * steps + i) * kTile + offs) * 2);
              barrier_arrive(full[p.index()], 0);
              p.advance();
            });
          });
        }),
        task("receiver", {.warps = 4}, [&] {
          if_(rank == 0, [&] {
            Pipeline p(slots);
            for_range(0, steps, [&](Int i) {
              p.wait(full);
              store(out + (cluster * steps + i) * kTile + offs, load(scratch + (cluster * slots + p.index()) * kTile + offs) + 1);
              p.release(empty, 1);  // at block 1's `empty`
              p.advance();
            });
          });
        }));
  }, in_clusters(2));
  constexpr int clusters = 3;
  std::vector<float> x = whole_floats(rng, size_t(clusters) * steps * kTile);
  Output<float> scratch(size_t(clusters) * slots * kTile), out(x.size());
  launch(k, Grid(2 * clusters), Input<float>(x), scratch, out);
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = 2 * x[i] + 1;
  check_near<float>(out, want);
  // The hand-over goes through global memory: the arrivals release, the waits acquire, at cluster scope.
  check_cluster_scope(k.ptx(), true);
}

TEST_CASE("local_store into another block's shared memory, handed over with remote arrivals", "[async]") {
  WEFT_SEEDED_RNG(rng);
  static constexpr int steps = 6, stages = 2;
  // Block 1 writes tile i of its cluster's input, times 2, into stage i % 2 of block 0's ring and arrives
  // at block 0's `full`; block 0 reads the stage after waiting on its own `full`, writes it plus 1 out and
  // releases the stage at block 1's `empty`.
  Kernel k("remote_store", [](Ptr<float> x, Ptr<float> out) {
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
        local_store(ring[p.index()], load(x + (cluster * steps + i) * kTile + offs) * 2, 0);
        barrier_arrive(full[p.index()], 0);
      }, [&] {
        p.wait(full);
        store(out + (cluster * steps + i) * kTile + offs, local_load(ring[p.index()]) + 1);
        p.release(empty, 1);
      });
      p.advance();
    });
  }, in_clusters(2));
  constexpr int clusters = 3;
  std::vector<float> x = whole_floats(rng, size_t(clusters) * steps * kTile);
  Output<float> out(x.size());
  launch(k, Grid(2 * clusters), Input<float>(x), out);
  std::vector<float> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = 2 * x[i] + 1;
  check_near<float>(out, want);
  check_cluster_scope(k.ptx(), true);  // st.shared::cluster, published by the arrivals
}

// ---- TMA multicast ----------------------------------------------------------------------------------------

TEST_CASE("a multicast TMA load lands in both blocks of a cluster and completes both barriers", "[async]") {
  WEFT_SEEDED_RNG(rng);
  // Block r of each cluster loads row band (cluster * 2 + r) into stage r of every block of the cluster
  // (mask 0b11): each block expects both boxes on its own `full[0]`, waits, and writes out both stages.
  Kernel k("multicast_load", [](TensorDesc<float, 2> a, Ptr<float> out) {
    auto tiles = local_alloc<float>({R, C}, 2, "tiles");
    auto full = alloc_barriers(1, 1, "full");
    Int rank = cluster_cta_rank();
    Int cluster = program_id(0) / 2;
    barrier_expect_bytes(full[0], 2 * tiles.stage_bytes());
    async_descriptor_load(a, tiles[rank], {(cluster * 2 + rank) * R, 0}, full[0], 0b11);
    barrier_wait(full[0], 0);
    Int offs = tile_offsets();
    for_range(0, 2, [&](Int s) { store(out + (program_id(0) * 2 + s) * kTile + offs, local_load(tiles[s])); });
  }, in_clusters(2));
  constexpr int clusters = 3;
  std::vector<float> a = whole_floats(rng, size_t(clusters) * 2 * kTile);
  Buffer<float> da = Device::current().upload(a);
  Output<float> out(size_t(clusters) * 2 * 2 * kTile);
  launch(k, Grid(2 * clusters), tma(da, {clusters * 2 * R, C}, {R, C}), out);
  std::vector<float> want(out.size());
  for (int c = 0; c < clusters; ++c)
    for (int block = 0; block < 2; ++block)
      for (int s = 0; s < 2; ++s)
        for (int e = 0; e < kTile; ++e)
          want[size_t(((c * 2 + block) * 2 + s) * kTile + e)] = a[size_t((c * 2 + s) * kTile + e)];
  check_near<float>(out, want);
}

TEST_CASE("a multicast ring whose stages both blocks release: CTA-scope arrivals when only TMA writes",
          "[async]") {
  WEFT_SEEDED_RNG(rng);
  static constexpr int steps = 5, stages = 2;
  // As a GEMM's producer and consumers in clusters of two: at step i block r loads band r of the cluster's
  // tile i (rows 2 R) and multicasts it into both blocks' stage; each block waits for both bands, releases
  // the stage at both blocks' `empty` (it is overwritten by both blocks' multicasts) and TMA-stores the
  // tile plus 1 to its own rows of the output. Every write another block sees is a TMA's, so the
  // arrivals need no cluster-scope release (a MEMBAR.GPU each in the SASS) and the waits no
  // cluster-scope acquire.
  Kernel k("multicast_ring", [](TensorDesc<float, 2> a, TensorDesc<float, 2> c) {
    auto ring = local_alloc<float>({2 * R, C}, stages, "ring");
    auto staging = local_alloc<float>({2 * R, C}, 1, "staging");
    auto full = alloc_barriers(stages, 1, "full");
    auto empty = alloc_barriers(stages, 2, "empty");
    Int rank = cluster_cta_rank();
    Int cluster = program_id(0) / 2;
    Pipeline p(stages);
    for_range(0, steps, [&](Int i) {
      p.acquire(empty);
      barrier_expect_bytes(full[p.index()], ring.stage_bytes());
      async_descriptor_load(a, ring[p.index()].rows(rank * R, R), {((cluster * steps + i) * 2 + rank) * R, 0},
                            full[p.index()], 0b11);
      p.wait(full);
      Tile<float> tile = local_load(ring[p.index()]) + 1.0f;
      p.release(empty, 0);
      p.release(empty, 1);
      async_store_wait(0);
      local_store(staging[0], tile);
      async_descriptor_store(c, staging[0], {(program_id(0) * steps + i) * 2 * R, 0});
      p.advance();
    });
    async_store_wait(0);
  }, in_clusters(2));
  constexpr int clusters = 2, rows = clusters * steps * 2 * R;
  std::vector<float> a = whole_floats(rng, size_t(rows) * C);
  Device dev = Device::current();
  Buffer<float> da = dev.upload(a);
  Buffer<float> dc = dev.upload(std::vector<float>(2 * a.size(), -1.0f));
  k.launch(Grid(2 * clusters), tma(da, {rows, C}, {R, C}), tma(dc, {2 * rows, C}, {2 * R, C}));
  std::vector<float> got = dc.download(), want(got.size());
  for (int cl = 0; cl < clusters; ++cl)
    for (int block = 0; block < 2; ++block)
      for (int i = 0; i < steps; ++i)
        for (int e = 0; e < 2 * kTile; ++e)
          want[size_t(((cl * 2 + block) * steps + i) * 2 * kTile + e)] = a[size_t((cl * steps + i) * 2 * kTile + e)] + 1;
  check_near<float>(got, want);
  check_cluster_scope(k.ptx(tma(da, {rows, C}, {R, C}), tma(dc, {2 * rows, C}, {2 * R, C})), false);
}

// ---- cluster_sync ---------------------------------------------------------------------------------------

TEST_CASE("cluster_sync orders each round's writes before the partner block reads them", "[async]") {
  WEFT_SEEDED_RNG(rng);
  static constexpr int rounds = 3;
  // Each round every block writes its tile (its input plus the round) to its slot of a global scratch;
  // after a cluster_sync it reads its partner's (rank ^ 1) slot, and a second cluster_sync keeps the next
  // round from overwriting a slot the partner still reads. An idle task syncs along: cluster_sync counts
  // every task replica of every block.
  Kernel k("cluster_sync_rounds", [](Ptr<float> x, Ptr<float> scratch, Ptr<float> out) {
    Int rank = cluster_cta_rank();
    Int partner = program_id(0) - rank + (rank ^ 1);
    Int offs = tile_offsets();
    async_tasks(
        task("exchange", {.warps = 4}, [&] {
          for_range(0, rounds, [&](Int r) {
            store(scratch + program_id(0) * kTile + offs, load(x + program_id(0) * kTile + offs) + cast<float>(r) * 10000);
            cluster_sync();
            store(out + (r * num_programs(0) + program_id(0)) * kTile + offs, load(scratch + partner * kTile + offs));
            cluster_sync();
          });
        }),
        task("idle", {.warps = 1, .replicas = 2}, [&] {
          for_range(0, 2 * rounds, [&](Int) { cluster_sync(); });
        }));
  }, in_clusters(2));
  constexpr int blocks = 8;
  std::vector<float> x = whole_floats(rng, size_t(blocks) * kTile);
  Output<float> scratch(x.size()), out(size_t(rounds) * x.size());
  launch(k, Grid(blocks), Input<float>(x), scratch, out);
  std::vector<float> want(out.size());
  for (int r = 0; r < rounds; ++r)
    for (int b = 0; b < blocks; ++b)
      for (int e = 0; e < kTile; ++e) want[size_t((r * blocks + b) * kTile + e)] = x[size_t((b ^ 1) * kTile + e)] + r * 10000.0f;
  check_near<float>(out, want);
}

// ---- errors ---------------------------------------------------------------------------------------------

TEST_CASE("cluster shapes: a grid not a multiple of the cluster, a cluster too big, a dimension below 1", "[async]") {
  Kernel k("cluster_grid", [](Ptr<int32_t> out) { store(out + linear_block(), cluster_cta_rank()); }, in_clusters(2, 2));
  Output<int32_t> out(16);
  int line = __LINE__; Grid grid(3, 2);
  require_error([&] { k.launch(grid, out.arg()); },
                {at(line), "kernel 'cluster_grid' runs in clusters of (2, 2, 1) blocks but is launched on grid (3, 2, 1)",
                 "each grid dimension must be a multiple of the cluster's"});
  int big = __LINE__ + 1;
  require_error([&] { Kernel("too_big", [](Ptr<int32_t>) {}, in_clusters(4, 2, 2)); },
                {at(big), "kernel 'too_big': a cluster of (4, 2, 2) is 16 blocks, more than the 8 a cluster may have",
                 "portable limit"});
  int zero = __LINE__ + 1;
  require_error([&] { Kernel("flat", [](Ptr<int32_t>) {}, in_clusters(2, 0)); },
                {at(zero), "kernel 'flat': cluster (2, 0, 1) has a dimension below 1"});
}

TEST_CASE("an arrival at a cluster rank outside the cluster is an error at its line", "[async][cpu-only]") {
  int line = 0;
  Kernel k("bad_rank", [&](Ptr<float> out) {
    auto bar = alloc_barriers(1, 2, "bar");
    line = __LINE__; barrier_arrive(bar[0], cluster_cta_rank() + 1);  // rank 1 reaches rank 2
    store(out + program_id(0), scalar<float>(1));
  }, in_clusters(2));
  (void)k.ir();  // traces the body: sets the lines it records
  Output<float> out(2);
  require_error([&] { launch(k, Grid(2), out); },
                {at(line) + ": weft::Error: kernel 'bad_rank', block (1, 0, 0), task 'main' replica 0: ",
                 "barrier_arrive names cluster rank 2, but the kernel's cluster of (2, 1, 1) has ranks 0 to 1"});
}

TEST_CASE("a multicast mask naming a block outside the cluster, or none, is an error at its line", "[async][cpu-only]") {
  for (int mask : {0b101, 0}) {
    INFO("mask " << mask);
    int line = 0;
    Kernel k("bad_mask", [&](TensorDesc<float, 2> a, Ptr<float> out) {
      auto tiles = local_alloc<float>({R, C}, 1, "tiles");
      auto full = alloc_barriers(1, 1, "full");
      line = __LINE__; async_descriptor_load(a, tiles[0], {0, 0}, full[0], mask);
      store(out + program_id(0), scalar<float>(1));
    }, in_clusters(2));
    Buffer<float> da = Device::cpu().upload(std::vector<float>(kTile, 1.0f));
    Buffer<float> out = Device::cpu().alloc<float>(2);
    (void)k.ir(tma(da, {R, C}, {R, C}));  // traces the body: sets the line it records
    require_error([&] { k.launch(Device::cpu().stream(), Grid(2), tma(da, {R, C}, {R, C}), out); },
                  {at(line) + ": weft::Error: kernel 'bad_mask', block (0, 0, 0), task 'main' replica 0: ",
                   mask ? "multicast mask 0x5 names a block outside the cluster" : "multicast mask 0x0 selects no block",
                   "the kernel's cluster of (2, 1, 1) has ranks 0 to 1"});
  }
}

TEST_CASE("a deadlock across a cluster names the block of every fiber and barrier", "[async][cpu-only]") {
  int wait_line = 0, arrive_line = 0, sync_line = 0;
  // Block 0 waits on its own `ready`, but block 1 arrives at its own instead of block 0's (rank 1, not
  // 0): block 0 never gets past its wait. A second task of each block waits in cluster_sync for the
  // waiting one, which never comes.
  Kernel k("cluster_deadlock", [&](Ptr<float> out) {
    auto ready = alloc_barriers(1, 1, "ready");
    Int rank = cluster_cta_rank();
    async_tasks(
        task("main", {.warps = 4}, [&] {
          if_(rank == 0, [&] { wait_line = __LINE__; barrier_wait(ready[0], 0); },
              [&] { arrive_line = __LINE__; barrier_arrive(ready[0], 1); });
          store(out + program_id(0), scalar<float>(1));
        }),
        task("syncer", {.warps = 1}, [&] { sync_line = __LINE__; cluster_sync(); }));
  }, in_clusters(2));
  (void)k.ir();  // traces the body: sets the lines it records
  Output<float> out(2);
  require_error([&] { launch(k, Grid(2), out); },
                {"deadlock in kernel 'cluster_deadlock', the cluster of blocks (0, 0, 0) to (1, 0, 0), ", "after 1 barrier phases completed:\n",
                 "\n  block (0, 0, 0) task 'main' replica 0    waits on 'ready[0]' of block (0, 0, 0) for phase 0   " +
                     at(wait_line) + "\n",
                 "\n  block (0, 0, 0) task 'syncer' replica 0  waits in cluster_sync",
                 "\n  block (1, 0, 0) task 'main' replica 0    finished\n",
                 "\n  'ready[0]' of block (0, 0, 0) has 0 of 1 arrivals in phase 0 (no arrival yet)",
                 "\n  cluster_sync has 2 of 4 task replicas"});
  (void)arrive_line;
  (void)sync_line;
}
