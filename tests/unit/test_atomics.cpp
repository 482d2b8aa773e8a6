// Atomics (weft/ops.h): every operation's final memory and returned old values against a host reference,
// with colliding addresses, masks, tiles smaller than the block (copies), rank-0 pointers, tasks, every
// order and scope, the release/acquire pattern of a last-program reduction, and the errors.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "error_checks.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

// Each program takes a ticket: one atomic_add on one counter, done once per program.
void check_tickets(Device dev, int warps, Atomic how, int programs) {
  Kernel k("atomic_tickets", [how](Ptr<int32_t> counter, Ptr<int32_t> tickets) {
    Int t = atomic_add(counter, 1, how);
    store(tickets + program_id(0), t);
  }, KernelOptions{.num_warps = warps});
  Buffer<int32_t> counter = dev.upload(std::vector<int32_t>{0});
  Buffer<int32_t> tickets = dev.upload(std::vector<int32_t>(programs, -7));
  k.launch(Grid(programs), counter, tickets);
  std::vector<int32_t> got = tickets.download();
  CHECK(counter.download()[0] == programs);
  std::sort(got.begin(), got.end());
  std::vector<int32_t> want(programs);
  std::iota(want.begin(), want.end(), 0);
  CHECK(got == want);
}

// A histogram of random bins with many collisions: every increment counts once, and the old values one
// bin returns are 0, 1, …, its count - 1, each once. BLOCK elements per program, the last one masked.
template <int BLOCK> void check_histogram(Device dev, int warps, std::mt19937_64& rng) {
  const int n = BLOCK * 5 - 3, bins = 13;
  std::vector<int32_t> values(n);
  for (int32_t& v : values) v = std::uniform_int_distribution<int32_t>(0, bins - 1)(rng);
  Kernel k("atomic_histogram", [](Ptr<int32_t> hist, Ptr<int32_t> values, Ptr<int32_t> olds, Int n) {
    Int i = program_id(0) * BLOCK + arange(0, BLOCK);
    Bool in = i < n;
    Int bin = load(values + i, in);
    Int old = atomic_add(hist + bin, 1, in);
    store(olds + i, old, in);
  }, KernelOptions{.num_warps = warps});
  Buffer<int32_t> hist = dev.upload(std::vector<int32_t>(bins, 0));
  Buffer<int32_t> in = dev.upload(values);
  Buffer<int32_t> olds = dev.upload(std::vector<int32_t>(n, -7));
  k.launch(Grid((n + BLOCK - 1) / BLOCK), hist, in, olds, n);
  std::vector<int32_t> h = hist.download(), o = olds.download();
  std::map<int32_t, std::vector<int32_t>> per_bin;
  for (int i = 0; i < n; ++i) per_bin[values[i]].push_back(o[i]);
  for (int b = 0; b < bins; ++b) {
    std::vector<int32_t>& seen = per_bin[b];
    INFO("bin " << b);
    CHECK(h[b] == static_cast<int32_t>(seen.size()));
    std::sort(seen.begin(), seen.end());
    for (size_t j = 0; j < seen.size(); ++j) CHECK(seen[j] == static_cast<int32_t>(j));
  }
}

constexpr int kReduceCols = 256;

// The last program of the grid to take a ticket sums every program's partials (x * 2 per column, program 0
// first, in f32). Ordered by an acq_rel ticket, or (`fenced`, CUDA's threadFenceReduction) by fence()
// before a relaxed ticket and again before the last program reads. Three launches on fresh outputs; the
// counter must be back at 0 after each.
void check_last_program_reduces(Device dev, bool fenced, int warps, const std::vector<float>& x, int programs) {
  const int cols = kReduceCols;
  Kernel k(fenced ? "fence_last_program_reduces" : "atomic_last_program_reduces",
           [fenced](Ptr<float> partials, Ptr<int32_t> counter, Ptr<float> out, Ptr<float> x, Int programs) {
             Int c = arange(0, cols);
             Int p = program_id(0);
             store(partials + p * cols + c, load(x + p * cols + c) * 2.0f);
             if (fenced) fence();
             Int done = atomic_add(counter, 1, fenced ? Atomic{.order = MemOrder::relaxed} : Atomic{});
             if_(done == programs - 1, [&] {
               if (fenced) fence();
               Var<float> acc = zeros<float>({cols});
               for_range(0, programs, [&](Int q) { acc = acc + load(partials + q * cols + c); });
               store(out + c, acc);
               store(counter, 0);  // ready for the next launch
             });
           }, KernelOptions{.num_warps = warps});
  Buffer<float> partials = dev.upload(std::vector<float>(size_t(programs) * cols, std::nanf("")));
  Buffer<int32_t> counter = dev.upload(std::vector<int32_t>{0});
  Buffer<float> xs = dev.upload(x);
  for (int round = 0; round < 3; ++round) {
    Buffer<float> out = dev.upload(std::vector<float>(cols, std::nanf("")));
    k.launch(Grid(programs), partials, counter, out, xs, programs);
    std::vector<float> got = out.download();
    int wrong = 0;
    for (int c = 0; c < cols; ++c) {
      float want = 0.0f;  // the kernel's order: program 0 first, in f32
      for (int p = 0; p < programs; ++p) want += x[size_t(p) * cols + c] * 2.0f;
      if (!(got[c] == want) && ++wrong <= 8) UNSCOPED_INFO("column " << c << ": " << got[c] << ", want " << want);
    }
    INFO(warps << " warps, " << (fenced ? "fenced" : "acq_rel") << ", round " << round);
    CHECK(wrong == 0);
    CHECK(counter.download()[0] == 0);
  }
}

}  // namespace

TEST_CASE("atomic_add on one pointer: each program once, in any order and scope", "[ops][atomics]") {
  Device dev = Device::current();
  for (int warps : {1, 4}) check_tickets(dev, warps, {}, 37);
  for (MemOrder order : {MemOrder::relaxed, MemOrder::acquire, MemOrder::release, MemOrder::acq_rel})
    for (MemScope scope : {MemScope::cta, MemScope::cluster, MemScope::gpu, MemScope::system})
      check_tickets(dev, 2, Atomic{.order = order, .scope = scope}, 9);
}

TEST_CASE("atomic_add of a tile: colliding addresses, masks, tiles smaller than the block", "[ops][atomics]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  check_histogram<256>(dev, 4, rng);  // two elements per thread
  check_histogram<32>(dev, 4, rng);   // 128 threads hold 4 copies of each element
  check_histogram<64>(dev, 1, rng);
}

TEST_CASE("atomic_add of f32 and f64 tiles sums every program's values", "[ops][atomics]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int programs = 23, cols = 64;
  std::vector<float> xf(programs * cols);
  std::vector<double> xd(programs * cols);
  for (size_t i = 0; i < xf.size(); ++i) {
    xf[i] = std::uniform_real_distribution<float>(-4, 4)(rng);
    xd[i] = std::uniform_real_distribution<double>(-4, 4)(rng);
  }
  Kernel k("atomic_sum_floats", [](Ptr<float> sf, Ptr<double> sd, Ptr<float> xf, Ptr<double> xd) {
    Int c = arange(0, cols);
    Int at = program_id(0) * cols + c;
    atomic_add(sf + c, load(xf + at), Atomic{.order = MemOrder::relaxed});
    atomic_add(sd + c, load(xd + at));
  }, KernelOptions{.num_warps = 2});
  std::vector<float> init_f(cols);
  std::vector<double> init_d(cols);
  for (int c = 0; c < cols; ++c) {
    init_f[c] = std::uniform_real_distribution<float>(-1, 1)(rng);
    init_d[c] = std::uniform_real_distribution<double>(-1, 1)(rng);
  }
  Buffer<float> sf = dev.upload(init_f);
  Buffer<double> sd = dev.upload(init_d);
  k.launch(Grid(programs), sf, sd, dev.upload(xf), dev.upload(xd));
  std::vector<float> gf = sf.download();
  std::vector<double> gd = sd.download();
  for (int c = 0; c < cols; ++c) {
    double wf = init_f[c], wd = init_d[c], mag = std::abs(init_f[c]);
    for (int p = 0; p < programs; ++p) {
      wf += xf[p * cols + c];
      wd += xd[p * cols + c];
      mag += std::abs(xf[p * cols + c]);
    }
    INFO("column " << c);
    // The sum's order is the programs' arrival order: within the f32 rounding of each partial sum.
    CHECK(std::abs(gf[c] - wf) <= programs * mag * 6e-8 + 1e-6);
    CHECK(std::abs(gd[c] - wd) <= 1e-12 * programs * 8);
  }
}

// f16 / bf16 counters: a histogram of whole increments (exact in 16 bits up to 256), with old values returned
// (each bin's olds are 0, 1, …, count - 1) and without (PTX red), masked and colliding; and a value that 16 bits
// cannot hold, rounded before it is added (as the GPU's atom.add.noftz.f16 / .bf16 take it).
template <class H> void check_half_histogram(Device dev, std::mt19937_64& rng) {
  constexpr int BLOCK = 64;
  const int n = BLOCK * 4 - 5, bins = 11;
  std::vector<int32_t> values(n);
  for (int32_t& v : values) v = std::uniform_int_distribution<int32_t>(0, bins - 1)(rng);
  Kernel k("atomic_half_histogram", [bins](Ptr<H> hist, Ptr<H> quiet, Ptr<int32_t> values, Ptr<float> olds, Ptr<H> tenth, Int n) {
    Int i = program_id(0) * BLOCK + arange(0, BLOCK);
    Bool in = i < n;
    Int bin = load(values + i, in);
    Tile<H> one = full<H>({BLOCK}, 1.0);
    store(olds + i, cast<float>(atomic_add(hist + bin, one, in)), in);
    atomic_add(quiet + bin, one, in, Atomic{.order = MemOrder::relaxed});  // nothing reads the old values: red
    atomic_add(tenth + program_id(0), cast<H>(scalar<float>(0.1f)));
    // One per program, its old value handed to every thread: the program's ticket, 0 .. programs - 1.
    Tile<H> ticket = atomic_add(hist + bins, cast<H>(scalar<float>(1.f)));
    store(olds + n + program_id(0), cast<float>(ticket));
  }, KernelOptions{.num_warps = 2});
  const int programs = (n + BLOCK - 1) / BLOCK;
  Buffer<H> hist = dev.upload(std::vector<H>(bins + 1, H(0.f))), quiet = dev.upload(std::vector<H>(bins, H(0.f)));
  Buffer<float> olds = dev.upload(std::vector<float>(n + programs, -7.f));
  Buffer<H> tenth = dev.upload(std::vector<H>(programs, H(0.f)));
  k.launch(Grid(programs), hist, quiet, dev.upload(values), olds, tenth, n);
  std::vector<H> h = hist.download(), q = quiet.download(), t = tenth.download();
  std::vector<float> o = olds.download();
  std::map<int32_t, std::vector<float>> per_bin;
  for (int i = 0; i < n; ++i) per_bin[values[i]].push_back(o[i]);
  for (int b = 0; b < bins; ++b) {
    std::vector<float>& seen = per_bin[b];
    INFO(dtype_of<H>.str() << " bin " << b);
    CHECK(float(h[b]) == float(seen.size()));
    CHECK(float(q[b]) == float(seen.size()));
    std::sort(seen.begin(), seen.end());
    for (size_t j = 0; j < seen.size(); ++j) CHECK(seen[j] == float(j));
  }
  for (int p = 0; p < programs; ++p) CHECK(float(t[p]) == float(H(0.1f)));  // 0 + the rounded 0.1: exact
  std::vector<float> tickets(o.begin() + n, o.end());
  std::sort(tickets.begin(), tickets.end());
  for (int p = 0; p < programs; ++p) CHECK(tickets[p] == float(p));
  CHECK(float(h[bins]) == float(programs));
}

TEST_CASE("atomic_add on f16 and bf16: counts, old values, rounding of the value", "[ops][atomics]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  check_half_histogram<f16>(dev, rng);
  check_half_histogram<bf16>(dev, rng);
}

TEST_CASE("atomic_max, atomic_min, atomic_and, atomic_or, atomic_xor on i32 and i64", "[ops][atomics]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int programs = 19, cols = 32;
  std::vector<int32_t> a(programs * cols);
  std::vector<int64_t> b(programs * cols);
  for (int32_t& v : a) v = std::uniform_int_distribution<int32_t>(-1000000, 1000000)(rng);
  for (int64_t& v : b) v = static_cast<int64_t>(rng());
  Kernel k("atomic_bitwise_and_extremes",
           [](Ptr<int32_t> mx, Ptr<int32_t> mn, Ptr<int64_t> mx64, Ptr<int64_t> band, Ptr<int64_t> bor,
              Ptr<int64_t> bxor, Ptr<int32_t> a, Ptr<int64_t> b) {
             Int c = arange(0, cols);
             Int at = program_id(0) * cols + c;
             Int x = load(a + at);
             Long y = load(b + at);
             atomic_max(mx + c, x);
             atomic_min(mn + c, x, Atomic{.order = MemOrder::relaxed, .scope = MemScope::gpu});
             atomic_max(mx64 + c, y);
             atomic_and(band + c, y);
             atomic_or(bor + c, y);
             atomic_xor(bxor + c, y);
           }, KernelOptions{.num_warps = 1});
  Buffer<int32_t> mx = dev.upload(std::vector<int32_t>(cols, INT32_MIN)), mn = dev.upload(std::vector<int32_t>(cols, INT32_MAX));
  Buffer<int64_t> mx64 = dev.upload(std::vector<int64_t>(cols, INT64_MIN)), band = dev.upload(std::vector<int64_t>(cols, -1)),
                  bor = dev.upload(std::vector<int64_t>(cols, 0)), bxor = dev.upload(std::vector<int64_t>(cols, 0x5a5a));
  k.launch(Grid(programs), mx, mn, mx64, band, bor, bxor, dev.upload(a), dev.upload(b));
  std::vector<int32_t> gmx = mx.download(), gmn = mn.download();
  std::vector<int64_t> gmx64 = mx64.download(), gand = band.download(), gor = bor.download(), gxor = bxor.download();
  for (int c = 0; c < cols; ++c) {
    int32_t wmx = INT32_MIN, wmn = INT32_MAX;
    int64_t wmx64 = INT64_MIN, wand = -1, wor = 0, wxor = 0x5a5a;
    for (int p = 0; p < programs; ++p) {
      wmx = std::max(wmx, a[p * cols + c]);
      wmn = std::min(wmn, a[p * cols + c]);
      int64_t y = b[p * cols + c];
      wmx64 = std::max(wmx64, y);
      wand &= y;
      wor |= y;
      wxor ^= y;
    }
    INFO("column " << c);
    CHECK(gmx[c] == wmx);
    CHECK(gmn[c] == wmn);
    CHECK(gmx64[c] == wmx64);
    CHECK(gand[c] == wand);
    CHECK(gor[c] == wor);
    CHECK(gxor[c] == wxor);
  }
}

TEST_CASE("atomic_xchg and atomic_cas: one winner per slot, old values returned", "[ops][atomics]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  const int programs = 29, slots = 16;
  const int64_t start = std::uniform_int_distribution<int64_t>(1000, 2000)(rng);
  Kernel k("atomic_exchange_and_claim",
           [](Ptr<int64_t> claims, Ptr<int64_t> got, Ptr<float> swap, Ptr<float> swapped, Int start) {
             Int s = arange(0, slots);
             Int p = program_id(0);
             Long me = cast<int64_t>(p + start);
             // Claim every slot still free (-1): exactly one program wins each.
             Long before = atomic_cas(claims + s, -1, me);
             store(got + p * slots + s, before);
             // Pass a float around: each program's value goes in once and comes out once.
             Float mine = cast<float>(p) + 0.5f + cast<float>(s) * 100.0f;
             store(swapped + p * slots + s, atomic_xchg(swap + s, mine));
           }, KernelOptions{.num_warps = 1});
  Buffer<int64_t> claims = dev.upload(std::vector<int64_t>(slots, -1));
  Buffer<int64_t> got = dev.upload(std::vector<int64_t>(programs * slots, -7));
  std::vector<float> swap0(slots);
  for (int s = 0; s < slots; ++s) swap0[s] = -1.0f - s;
  Buffer<float> swap = dev.upload(swap0);
  Buffer<float> swapped = dev.upload(std::vector<float>(programs * slots, 7.25f));
  k.launch(Grid(programs), claims, got, swap, swapped, static_cast<int32_t>(start));
  std::vector<int64_t> c = claims.download(), g = got.download();
  std::vector<float> sw = swap.download(), sd = swapped.download();
  for (int s = 0; s < slots; ++s) {
    INFO("slot " << s);
    int winners = 0;
    for (int p = 0; p < programs; ++p) {
      int64_t before = g[p * slots + s];
      if (before == -1) {
        ++winners;
        CHECK(c[s] == start + p);  // the winner's id is what stays
      } else {
        CHECK(before == c[s]);     // every loser saw the winner's id
      }
    }
    CHECK(winners == 1);
    // The values that came out plus the one left in are the initial value plus every program's value.
    std::vector<float> out{sw[s]}, in{swap0[s]};
    for (int p = 0; p < programs; ++p) {
      out.push_back(sd[p * slots + s]);
      in.push_back(static_cast<float>(p) + 0.5f + s * 100.0f);
    }
    std::sort(out.begin(), out.end());
    std::sort(in.begin(), in.end());
    CHECK(out == in);
  }
}

// The last program to finish sums every program's partial row in program order: release on the counter
// publishes a program's row, acquire lets the last one read all of them (a split-K reduction in one kernel).
TEST_CASE("atomic_add with acq_rel orders a program's stores: the last program reduces", "[ops][atomics]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<float> x(41 * kReduceCols);
  for (float& v : x) v = std::uniform_real_distribution<float>(-2, 2)(rng);
  for (int warps : {4, 8}) check_last_program_reduces(dev, /*fenced=*/false, warps, x, 41);
}

TEST_CASE("atomics inside tasks: each replica's rank-0 atomic once, a task's tile atomic per element", "[ops][atomics]") {
  Device dev = Device::current();
  Kernel k("atomic_in_tasks", [](Ptr<int32_t> counter, Ptr<int32_t> hist, Ptr<int32_t> olds) {
    async_tasks(task("count", {.warps = 4, .replicas = 2}, [&] {
                  Int old = atomic_add(counter, 1);
                  store(olds + program_id(0) * 2 + task_replica_id(), old);
                }),
                task("bins", {.warps = 4}, [&] { atomic_add(hist + (arange(0, 512) % 8), 1); }));
  });
  const int programs = 5, start = 3;
  Buffer<int32_t> counter = dev.upload(std::vector<int32_t>{start});
  Buffer<int32_t> hist = dev.upload(std::vector<int32_t>(8, 1));
  Buffer<int32_t> olds = dev.upload(std::vector<int32_t>(2 * programs, -7));
  k.launch(Grid(programs), counter, hist, olds);
  CHECK(counter.download()[0] == start + 2 * programs);
  CHECK(hist.download() == std::vector<int32_t>(8, 1 + 64 * programs));
  std::vector<int32_t> o = olds.download(), want(2 * programs);
  std::sort(o.begin(), o.end());
  std::iota(want.begin(), want.end(), start);
  CHECK(o == want);
}

TEST_CASE("atomics: errors name the line and what to change", "[ops][atomics][errors]") {
  int line = 0;
  Device dev = Device::current();
  auto trace = [&](auto body) {
    Kernel k("atomic_error", body);
    (void)k.compile(dev);
  };
  REQUIRE_WEFT_ERROR(trace([&](Ptr<float> p) { line = __LINE__; atomic_max(p + arange(0, 32), 1.0f); }), line, "i32 or i64 elements");
  REQUIRE_WEFT_ERROR(trace([&](Ptr<int16_t> p) { line = __LINE__; atomic_add(p, 1); }), line, "i32, i64, f16, bf16, f32 or f64");
  REQUIRE_WEFT_ERROR(trace([&](Ptr<bf16> p) { line = __LINE__; atomic_xchg(p, cast<bf16>(scalar<float>(1.f))); }), line, "i32, i64, f32 or f64");
  REQUIRE_WEFT_ERROR(trace([&](Ptr<f16> p) { line = __LINE__; atomic_max(p, cast<f16>(scalar<float>(1.f))); }), line, "i32 or i64 elements");
  REQUIRE_WEFT_ERROR(trace([&](Ptr<int32_t> p, Ptr<float> q) { line = __LINE__; atomic_add(p + arange(0, 32), load(q + arange(0, 32))); }), line, "cast<i32>");
  REQUIRE_WEFT_ERROR(trace([&](Ptr<int32_t> p) { line = __LINE__; atomic_add(p + arange(0, 32), arange(0, 64)); }), line, "broadcast");
  REQUIRE_WEFT_ERROR(trace([&](Ptr<int64_t> p) { line = __LINE__; atomic_cas(p, 1, 2, arange(0, 16) < 3); }), line, "mask");
  auto before_tasks = [&](Ptr<int32_t> p) {
    line = __LINE__; atomic_add(p, 1);
    async_tasks(task("t", {.warps = 4}, [&] { store(p, 0); }));
  };
  REQUIRE_WEFT_ERROR(trace(before_tasks), line, "move the atomic into the task");
  auto fence_before_tasks = [&](Ptr<int32_t> p) {
    line = __LINE__; fence(MemScope::gpu);
    async_tasks(task("t", {.warps = 4}, [&] { store(p, 0); }));
  };
  REQUIRE_WEFT_ERROR(trace(fence_before_tasks), line, "move the fence into the task");
}

TEST_CASE("fence: TLX's two atomics around a fence, in every scope", "[ops][atomics][fence]") {
  Device dev = Device::current();
  const int programs = 7;
  for (MemScope scope : {MemScope::cta, MemScope::cluster, MemScope::gpu, MemScope::system}) {
    Kernel k("fence_between_atomics", [scope](Ptr<int32_t> x) {
      atomic_add(x, 1);
      fence(scope);
      atomic_add(x + 1, 1);
    }, KernelOptions{.num_warps = 1});
    Buffer<int32_t> x = dev.upload(std::vector<int32_t>{0, 0});
    k.launch(Grid(programs), x);
    INFO("scope " << static_cast<int>(scope));
    CHECK(x.download() == std::vector<int32_t>{programs, programs});
  }
}

TEST_CASE("fence with relaxed atomics: the last program reads every program's stores", "[ops][atomics][fence]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  std::vector<float> x(37 * kReduceCols);
  for (float& v : x) v = std::uniform_real_distribution<float>(-2, 2)(rng);
  check_last_program_reduces(dev, /*fenced=*/true, 4, x, 37);
}

TEST_CASE("fence: the PTX has fence.acq_rel of each scope between two barriers", "[atomics][fence][ptx]") {
  Kernel k("fence_ptx", [](Ptr<int32_t> x) {
    store(x + arange(0, 128), arange(0, 128));
    fence(MemScope::cta);
    fence(MemScope::cluster);
    fence(MemScope::gpu);
    fence(MemScope::system);
    atomic_add(x, 1, Atomic{.order = MemOrder::relaxed});
  });
  std::string ptx = k.ptx();
  for (const char* f : {"fence.acq_rel.cta;", "fence.acq_rel.cluster;", "fence.acq_rel.gpu;", "fence.acq_rel.sys;"}) {
    INFO(f);
    CHECK(ptx.find(f) != std::string::npos);
  }
  CHECK(ptx.find("bar.sync") != std::string::npos);
}
