// The plain-load kernels of examples/gemm_plain_loads.h (small-M FMA, tensor cores with plain loads,
// bulk copies of B's rows) called directly, across M, both B layouts, odd N and K and unaligned buffers,
// against a double-precision reference with C poisoned before each call. The shapes are small: the CPU
// backend runs them too; with WEFT_BACKEND=cuda (ctest's gpu-ops: copies) the same checks run on the GPU.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../../examples/gemm.h"
#include "gemm_problems.h"
#include "scratch_cache.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;
using namespace weft_test::gemm_test;

TEST_CASE("gemm(): the small-M kernel across M, both B layouts, odd N and K, one K slice or several", "[async][gemm]") {
  EnvAutotune off("0");
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  struct Case {
    int M, N, K;
  };
  // M 1, 2, 3 (rows padded to 4) and 16 (more than gemm() sends it: the kernel called directly); N and K
  // odd. Planned for 2 multiprocessors (a 2-core CPU), 16 x 200 x 4095 cuts K into slices with both layouts
  // and 1 x 4095 x 1031 does not (checked below); a GPU cuts both.
  for (Case s : {Case{1, 4095, 1031}, Case{2, 33, 1031}, Case{3, 200, 257}, Case{16, 200, 4095}}) {
    Problem p = make_problem(rng, s.M, s.N, s.K);
    for (bool b_is_nk : {true, false}) {
      INFO("M " << s.M << " N " << s.N << " K " << s.K << " B " << (b_is_nk ? "N x K" : "K x N"));
      GemmChoice choice;
      if (s.M <= gemm_detail::small_m_limit(b_is_nk)) {
        check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) { choice = gemm(a, b, c, s.M, s.N, s.K, b_is_nk); });
        CHECK(choice.small_m);
      } else {
        check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) {
          gemm_detail::gemm_small_m(a, b, c, s.M, s.N, s.K, b_is_nk, dev, SourceLoc::current());
        });
      }
    }
  }
  for (bool b_is_nk : {true, false}) {
    CHECK(gemm_detail::plan_small_m(16, 200, 4095, b_is_nk, 2).slices > 1);
    CHECK(gemm_detail::plan_small_m(1, 4095, 1031, b_is_nk, 2).slices == 1);
    CHECK(gemm_detail::plan_small_m(1, 4095, 1031, b_is_nk, 132).slices > 1);
  }
}

TEST_CASE("gemm(): the tensor-core plain-load kernel across M, both B layouts, odd N and K, one K slice or several", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  struct Case {
    int M, N, K, bn;
  };
  // M 1 to 64 (A's rows padded to 8, 16, 32, 64), N and K odd, a last block of columns that overlaps the one
  // before (N not a multiple of BN) and a last partial step of K;
  // 2 multiprocessors (a 2-core CPU) cut K = 4095 into slices, K = 100 has one slice and a masked step alone.
  // Two steps of loads in flight with MP 8-16 and BN 64: K = 197 gives three whole steps (an odd
  // count: the last one alone after the pairs), K = 257 four, K = 129 two.
  for (Case s : {Case{1, 65, 100, 64}, Case{5, 200, 257, 128}, Case{16, 130, 4095, 64}, Case{37, 131, 129, 128},
                 Case{64, 99, 1031, 64}, Case{9, 170, 197, 64}, Case{3, 77, 129, 64}}) {
    Problem p = make_problem(rng, s.M, s.N, s.K);
    for (bool b_is_nk : {true, false}) {
      INFO("M " << s.M << " N " << s.N << " K " << s.K << " BN " << s.bn << " B " << (b_is_nk ? "N x K" : "K x N"));
      check_gemm(p, b_is_nk, [&](auto& a, auto& b, auto& c) {
        gemm_detail::gemm_rows_mma(a, b, c, s.M, s.N, s.K, b_is_nk, s.bn, dev, SourceLoc::current());
      });
    }
  }
  CHECK(gemm_detail::plan_rows_mma(16, 130, 4095, 64, 2).slices > 1);
  CHECK(gemm_detail::plan_rows_mma(1, 33, 100, 64, 2).slices == 1);
  CHECK(gemm_detail::plan_rows_mma(37, 131, 129, 128, 2).mp == 64);
  // Fewer columns than a program takes: an Error that names the call.
  Problem p = make_problem(rng, 4, 100, 64);
  Buffer<bf16> a = dev.upload(p.a), b = dev.upload(p.b_nk), c = dev.upload(std::vector<bf16>(400));
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_detail::gemm_rows_mma(a, b, c, 4, 100, 64, true, 128, dev, SourceLoc::current()),
                    Catch::Contains("N = 100 is less than the 128 columns") &&
                        Catch::Contains("test_gemm_plain_loads.cpp:" + std::to_string(line)));
}

TEST_CASE("gemm(): the bulk-copy kernel (B's rows streamed by cp.async.bulk) across M, odd N and K", "[async][gemm]") {
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::current();
  struct Case {
    int M, N, K;
  };
  // M 1 to 4, B K x N. N odd (every row's window of 1024 + 8 elements starts at another offset in its 16 bytes),
  // one column block or two that overlap; K short (no whole stage of 4 rows: plain loads only), odd (a slice's
  // rows past its stages) and long (the ring wraps). B's last row is read with plain loads: its window would
  // pass B's end (4 x 1027 x 40: one slice of 10 stages but for that row), which the CPU backend's bounds checks
  // (WEFT_CHECK_BOUNDS=1, the ctest entry aligned_windows_stay_inside_their_buffers) catch.
  for (Case s : {Case{1, 1025, 37}, Case{2, 1500, 9}, Case{3, 4095, 1031}, Case{4, 2051, 130}, Case{1, 1031, 515},
                 Case{4, 1027, 40}}) {
    Problem p = make_problem(rng, s.M, s.N, s.K);
    INFO("M " << s.M << " N " << s.N << " K " << s.K);
    check_gemm(p, false, [&](auto& a, auto& b, auto& c) {
      gemm_detail::gemm_rows_bulk(a, b, c, s.M, s.N, s.K, false, dev, SourceLoc::current());
    });
  }
  CHECK(gemm_detail::plan_rows_bulk(3, 4095, 1031, 2).slices > 1);
  CHECK(gemm_detail::plan_rows_bulk(2, 1500, 9, 2).slices == 1);
  CHECK(gemm_detail::plan_rows_bulk(3, 4095, 1031, 2).mp == 4);
  for (bool b_is_nk : {false, true}) {
    // Through gemm(), tuned: M <= 4 with N odd tries it (B K x N only) beside the small-M kernel, the tensor-core
    // plain-load kernel (64 and 128 columns) and the copies; the winner's C is right.
    weft::test::ScratchCache cache;
    EnvAutotune tune("force");
    const int N = 1501, K = 300;
    Problem q = make_problem(rng, 2, N, K);
    GemmChoice choice;
    check_gemm(q, b_is_nk, [&](auto& a, auto& b, auto& c) { choice = gemm(a, b, c, 2, N, K, b_is_nk); });
    CHECK(choice.report.tried == (b_is_nk ? 4 : 5));
    CHECK(choice.report.dropped == 0);
    INFO(choice.report.winner);
    CHECK(choice.rows_bulk == (choice.report.winner == "rows_bulk"));
    if (b_is_nk) CHECK_FALSE(choice.rows_bulk);
  }
  // Shapes it does not take: Errors that name the call.
  Problem p = make_problem(rng, 2, 1000, 64);
  Buffer<bf16> a = dev.upload(p.a), b = dev.upload(p.b_kn), c = dev.upload(std::vector<bf16>(2000));
  const int line = __LINE__ + 1;
  CHECK_THROWS_WITH(gemm_detail::gemm_rows_bulk(a, b, c, 2, 1000, 64, false, dev, SourceLoc::current()),
                    Catch::Contains("N = 1000") && Catch::Contains("test_gemm_plain_loads.cpp:" + std::to_string(line)));
  CHECK_THROWS_WITH(gemm_detail::gemm_rows_bulk(a, b, c, 2, 1000, 64, true, dev, SourceLoc::current()),
                    Catch::Contains("B N x K") && Catch::Contains("B K x N"));
}

TEST_CASE("gemm(): the small-M kernel reads A, B and C at unaligned addresses", "[async][gemm][cpu-only]") {
  EnvAutotune off("0");
  WEFT_SEEDED_RNG(rng);
  Device dev = Device::cpu();
  // Each operand in turn starts 2 bytes past an aligned address (the others aligned).
  Problem p = make_problem(rng, 3, 37, 129);
  for (bool b_is_nk : {true, false})
    for (int odd : {0, 1, 2}) {
      INFO("operand " << odd << " unaligned, B " << (b_is_nk ? "N x K" : "K x N"));
      auto place = [&](std::vector<bf16>& storage, const std::vector<bf16>& values, bool shift) {
        storage.assign(values.size() + 8, bf16(0.f));
        std::copy(values.begin(), values.end(), storage.begin() + (shift ? 1 : 0));
        return dev.wrap(storage.data() + (shift ? 1 : 0), values.size());
      };
      std::vector<bf16> sa, sb, sc;
      Buffer<bf16> a = place(sa, p.a, odd == 0), b = place(sb, b_is_nk ? p.b_nk : p.b_kn, odd == 1);
      Buffer<bf16> c = place(sc, std::vector<bf16>(size_t(p.M) * p.N, poison_value<bf16>()), odd == 2);
      GemmChoice choice = gemm(a, b, c, p.M, p.N, p.K, b_is_nk);
      CHECK(choice.small_m);
      check_within<bf16>(c.download(), p.want, p.tol, "C");
    }
}
