// bench_gemm: weft's bf16 GEMM (examples/gemm.h: the warp-specialized kernel of gemm_hopper_ws.h in the
// configuration weft::Autotuner picks per shape; operands copied to padded buffers where TMA cannot describe
// them) against cuBLASLt in the same run.
//
//   bench_gemm [--json] [--runs N] [--sizes 4096,8192|none] [--sweep] [--m 1,16,...] [--nk 4095x4095,...] [--tune]
//   bench_gemm --compare-epilogue [--runs N] [--sizes 4096,8192]
//   bench_gemm --compare-candidates [--runs N] [--sizes 4096,8192]
//   bench_gemm --configs NAME,NAME,... [--runs N] [--sizes 4096,8192] [--shapes 64x1000x1000,...]
//
// Squares (M = N = K, --sizes; the default) and, with --sweep, M in {1, 16, 64, 256, 1024, 4096, 16384}
// (--m picks some) x (N, K) of LLM layers {(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096),
// (1024, 8192), (8192, 1024)} plus sizes no tile divides {(1000, 1000), (4095, 4095), (8191, 8191)}; each
// shape with both layouts of B (K x N, and N x K i.e. C = A B^T):
//   0. weft's first call: the configuration is chosen (tuned now, or found in the process or on disk; with
//      --tune every shape's bucket is tuned again, WEFT_AUTOTUNE=force) and the call runs; its host-to-result
//      wall time (trace, compile or cache load, tuning, run, synchronize) is reported, with the tuning's own
//      time and the configuration chosen.
//   1. check: C poisoned with NaN, one cuBLASLt call and one weft call on the same inputs; weft's C against
//      cuBLAS's by relative Frobenius error (host, double; must be < 1e-2), and both against a host
//      double-precision reference at sampled elements (so that a wrong cuBLAS call is caught as such).
//   2. time: events around each call, calls queued back to back, warm-up first, two rounds of --runs
//      (default 30) calls per implementation, cuBLAS and weft alternating call by call (so that both see the
//      same clocks: the H200's drift under its power cap); the median over both rounds is reported, and the
//      difference between the rounds' medians as a measure of noise.
// Inputs are uniform in [-1, 1] (never zeros: they run faster and hide unwritten outputs), generated on the
// host once and uploaded; calls rotate among enough input sets that no set's bytes are still in the L2
// when it comes round again. TFLOP/s = 2 M N K / time. The summary: the geometric mean of cuBLAS time /
// weft time over the rows, and the five worst rows.
//
// --compare-epilogue times fixed configurations of gemm_hopper_ws instead of gemm()'s choice, on the
// squares of --sizes, both B layouts: the default configuration, the same with two C staging buffers per
// consumer (epilogue_buffers = 2, "_eb2"), that with 32-column stores ("_e32_eb2", the default's shared
// memory), and ping-pong configurations ("_pp": two consumers computing alternate whole tiles, one's
// epilogue under the other's main loop) of 128 x 128 and 64 x 256 tiles per consumer. Each is checked against
// cuBLASLt first; then cuBLASLt and the configurations are timed interleaved call by call, three rounds of
// --runs calls each, and each row gives a configuration's median, cuBLAS
// time / its time and the first configuration's (the default's) time / its time: > 1 means faster.
// --compare-candidates does the same with the autotuner's candidates for each square (gemm_candidates, the
// model's favourite first): timed as this benchmark times, back to back on rotating inputs, to set beside the
// tuner's own ranking (each launch after an L2 eviction, on one input set). --configs does it with the
// configurations named (GemmConfig::name(), e.g. 128x128x64_s6_g8_c2_pp; one the kernel does not support for a
// layout is skipped, with its reason). --shapes 64x1000x1000,... puts these modes on those M x N x K products
// instead of the squares.
//
// Exit status 1, with the reason on stderr: no CUDA device, no usable cuBLASLt (see benchmarks/cublaslt.h
// for where it is looked for; $WEFT_CUBLASLT overrides), any CUDA/cuBLAS/weft error, or a failed check.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <array>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../examples/gemm.h"
#include "bench_data.h"
#include "cublaslt.h"
#include "gpu_timing.h"

using namespace weft;
using weft::driver::cuda::CUdeviceptr;

namespace {

constexpr size_t kL2Bytes = size_t(60) << 20;         // the H200's L2 (50 MB on an H100)
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommended workspace on Hopper
constexpr double kMaxRelError = 1e-2;                 // bf16 outputs: rounding alone is ~1e-3
constexpr int kSamples = 256;                         // elements checked against the host reference

struct Options {
  bool json = false;
  int runs = 30;
  std::vector<int> sizes = {4096, 8192};
  bool sweep = false, tune = false, compare_epilogue = false, compare_candidates = false;
  std::vector<GemmConfig> configs;  // --configs
  std::vector<int> sweep_m = {1, 16, 64, 256, 1024, 4096, 16384};
  std::vector<std::pair<int, int>> sweep_nk;  // --nk: these (N, K) pairs instead of kSweepNK
  std::vector<std::array<int, 3>> shapes;     // --shapes: M x N x K products for the fixed-configuration modes
};

// The (N, K) pairs of the sweep: LLM layers (Llama-3 8B/70B-like projections and the vocabulary), then
// sizes that no tile divides.
const std::vector<std::pair<int, int>> kSweepNK = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096},
                                                   {1024, 8192}, {8192, 1024},  {1000, 1000},  {4095, 4095},
                                                   {8191, 8191}};

std::vector<int> int_list(char* text, const std::function<bool(int)>& ok, const std::function<void(const std::string&)>& bad) {
  std::vector<int> out;
  for (char* p = std::strtok(text, ","); p; p = std::strtok(nullptr, ",")) {
    int n = std::atoi(p);
    if (!ok(n)) bad(p);
    out.push_back(n);
  }
  return out;
}

// Exits with a usage message on anything it does not understand.
Options parse(int argc, char** argv) {
  Options o;
  auto usage = [&](const std::string& why) {
    std::fprintf(stderr,
                 "bench_gemm: %s\nusage: bench_gemm [--json] [--runs N>=20] [--sizes 4096,8192] [--sweep] "
                 "[--m 1,16,64,256,1024,4096,16384] [--nk 4095x4095,...] [--tune] (--sizes none: no squares)\n       bench_gemm --compare-epilogue|--compare-candidates|"
                 "--configs NAME,... [--runs N>=20] [--sizes 4096,8192] [--shapes 64x1000x1000,...]\n",
                 why.c_str());
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json") {
      o.json = true;
    } else if (arg == "--runs" && i + 1 < argc) {
      o.runs = std::atoi(argv[++i]);
      if (o.runs < 20) usage("--runs must be at least 20");
    } else if (arg == "--sizes" && i + 1 < argc && std::string(argv[i + 1]) == "none") {
      o.sizes.clear();
      ++i;
    } else if (arg == "--nk" && i + 1 < argc) {
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ",")) {
        int n = 0, k = 0;
        if (std::sscanf(p, "%dx%d", &n, &k) != 2 || n <= 0 || k <= 0) usage(std::string("bad --nk pair '") + p + "' (e.g. 4095x4095)");
        o.sweep_nk.emplace_back(n, k);
      }
      if (o.sweep_nk.empty()) usage("--nk needs at least one NxK pair");
    } else if (arg == "--sizes" && i + 1 < argc) {
      o.sizes = int_list(argv[++i], [](int n) { return n > 0; },
                         [&](const std::string& p) { usage("bad size '" + p + "' (a positive number)"); });
      if (o.sizes.empty()) usage("--sizes needs at least one size");
    } else if (arg == "--m" && i + 1 < argc) {
      o.sweep_m = int_list(argv[++i], [](int n) { return n > 0; },
                           [&](const std::string& p) { usage("bad M '" + p + "' (a positive number)"); });
      if (o.sweep_m.empty()) usage("--m needs at least one M");
    } else if (arg == "--shapes" && i + 1 < argc) {
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ",")) {
        int m = 0, n = 0, k = 0;
        if (std::sscanf(p, "%dx%dx%d", &m, &n, &k) != 3 || m <= 0 || n <= 0 || k <= 0)
          usage(std::string("bad --shapes product '") + p + "' (e.g. 64x1000x1000)");
        o.shapes.push_back({m, n, k});
      }
      if (o.shapes.empty()) usage("--shapes needs at least one MxNxK product");
    } else if (arg == "--sweep") {
      o.sweep = true;
    } else if (arg == "--tune") {
      o.tune = true;
    } else if (arg == "--compare-epilogue") {
      o.compare_epilogue = true;
    } else if (arg == "--compare-candidates") {
      o.compare_candidates = true;
    } else if (arg == "--configs" && i + 1 < argc) {
      std::string list = argv[++i];
      for (size_t at = 0; at <= list.size();) {
        size_t end = std::min(list.find(',', at), list.size());
        std::optional<GemmConfig> c = GemmConfig::from_name(list.substr(at, end - at));
        if (!c) usage("--configs: '" + list.substr(at, end - at) + "' is not a configuration name (e.g. 128x128x64_s6_g8_c2_pp)");
        o.configs.push_back(*c);
        at = end + 1;
      }
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  if (int(o.compare_epilogue) + int(o.compare_candidates) + int(!o.configs.empty()) > 1 ||
      ((o.compare_epilogue || o.compare_candidates || !o.configs.empty()) && (o.sweep || o.tune || o.json)))
    usage("--compare-epilogue, --compare-candidates and --configs time fixed configurations on the --sizes squares "
          "(or the --shapes products): one of them, no --sweep, --tune or --json");
  if (!o.shapes.empty() && !o.compare_epilogue && !o.compare_candidates && o.configs.empty())
    usage("--shapes is for --compare-epilogue, --compare-candidates and --configs (the sweep takes --m and --nk)");
  return o;
}

using bench::count_not_finite;
using bench::Rng;
using bench::device_ptr;
using bench::rel_frobenius;
using bench::seconds_since;

// The inputs of one size: `sets` pairs (A, B) on the device; set 0 also on the host for the reference.
struct Inputs {
  std::vector<Buffer<bf16>> a, b;
  std::vector<bf16> a0, b0;
};

Inputs make_inputs(Device& dev, int M, int N, int K) {
  size_t set_bytes = 2 * (size_t(M) * K + size_t(K) * N);
  // Between two uses of a set, the other sets stream at least twice the L2's size through it.
  size_t sets = 1 + (2 * kL2Bytes + set_bytes - 1) / set_bytes;
  Inputs in;
  for (size_t s = 0; s < sets; ++s) {
    std::vector<bf16> a = bench::random_values<bf16>(size_t(M) * K, 2 * s + 1);
    std::vector<bf16> b = bench::random_values<bf16>(size_t(K) * N, 2 * s + 2);
    in.a.push_back(dev.upload(a));
    in.b.push_back(dev.upload(b));  // the same values serve as K x N or as N x K
    if (s == 0) {
      in.a0 = std::move(a);
      in.b0 = std::move(b);
    }
  }
  return in;
}

// Relative error of `c` against a double-precision host reference at kSamples pseudo-random elements.
double sampled_error(const Inputs& in, const std::vector<bf16>& c, int M, int N, int K, bool b_is_nk) {
  Rng rng{12345};
  double diff = 0, norm = 0;
  for (int s = 0; s < kSamples; ++s) {
    size_t i = rng.next() % M, j = rng.next() % N;
    double ref = 0;
    for (int k = 0; k < K; ++k) {
      float bv = b_is_nk ? float(in.b0[j * K + k]) : float(in.b0[size_t(k) * N + j]);
      ref += double(float(in.a0[i * K + k])) * double(bv);
    }
    double got = float(c[i * N + j]);
    if (!std::isfinite(got)) return NAN;
    diff += (got - ref) * (got - ref);
    norm += ref * ref;
  }
  return std::sqrt(diff / norm);
}

struct Row {
  int M, N, K;
  bool b_is_nk;
  double cublas_ms, weft_ms;          // medians over both rounds
  double cublas_spread, weft_spread;  // |median of round 1 - median of round 2| / median
  double rel_error;                   // weft's C against cuBLAS's, relative Frobenius
  double weft_sample_error, cublas_sample_error;
  double weft_first_call_ms;
  size_t cublas_algo_workspace;
  bool pass;
  std::string set;             // "square" or "sweep"
  std::string config;          // weft's configuration ("+pad": operands copied to padded buffers first;
                               // "small_m": the plain-load kernel for M <= 16 with rows TMA cannot stride)
  std::string problem;         // the shape bucket it was chosen for
  bool tuned_now = false;      // tuned in this run (else from the process's or the disk's cache, or untuned)
  double tune_ms = 0, compile_ms = 0;  // of that tuning
  double ratio() const { return cublas_ms / weft_ms; }  // > 1: weft is faster
  double tflops(double ms) const { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; }
};

const char* layout_name(bool b_is_nk) { return b_is_nk ? "NxK" : "KxN"; }

Row measure(Device& dev, const bench::cublaslt::CublasLt& lt, const Buffer<uint8_t>& workspace, const Inputs& in,
            int M, int N, int K, bool b_is_nk, int runs, const char* set) {
  Row row{};
  row.M = M, row.N = N, row.K = K, row.b_is_nk = b_is_nk, row.set = set;
  bench::cublaslt::Bf16Gemm cublas(lt, M, N, K, b_is_nk, reinterpret_cast<CUdeviceptr>(workspace.data()),
                                   workspace.bytes());
  row.cublas_algo_workspace = cublas.algo_workspace_bytes();
  const size_t sets = in.a.size();

  // ---- check, on set 0, both outputs poisoned first so that an unwritten element shows as NaN
  const std::vector<bf16> poison(size_t(M) * N, bf16::from_bits(0x7fc0));
  Buffer<bf16> c_cublas = dev.upload(poison), c_weft = dev.upload(poison);
  cublas.run(device_ptr(in.a[0]), device_ptr(in.b[0]), device_ptr(c_cublas), nullptr);
  dev.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  GemmChoice choice = gemm(in.a[0], in.b[0], c_weft, M, N, K, b_is_nk);
  dev.synchronize();
  row.weft_first_call_ms = seconds_since(t0) * 1e3;
  row.config = choice.name();
  row.problem = choice.problem;
  row.tuned_now = !choice.report.from_cache && choice.report.tried > 0;
  row.tune_ms = choice.report.tune_ms;
  row.compile_ms = choice.report.compile_ms;
  // Tuning ran candidates into C: poison it again so that the checked call is the winner's alone.
  c_weft.upload(poison);
  gemm(in.a[0], in.b[0], c_weft, M, N, K, b_is_nk);
  dev.synchronize();
  std::vector<bf16> want = c_cublas.download(), got = c_weft.download();
  row.rel_error = rel_frobenius(got, want);
  row.cublas_sample_error = sampled_error(in, want, M, N, K, b_is_nk);
  row.weft_sample_error = sampled_error(in, got, M, N, K, b_is_nk);
  // NaN compares false: an unwritten or non-finite element fails.
  bool cublas_ok = row.cublas_sample_error < kMaxRelError;
  row.pass = cublas_ok && row.rel_error < kMaxRelError && row.weft_sample_error < kMaxRelError;
  if (!cublas_ok)
    std::fprintf(stderr,
                 "CHECK FAILED: cuBLASLt's C (%d x %d x %d, B %s) is off the host reference by %.3e (%zu elements "
                 "not finite): the cuBLASLt call itself is wrong, so weft cannot be judged against it\n",
                 M, N, K, layout_name(b_is_nk), row.cublas_sample_error, count_not_finite(want));
  else if (!row.pass)
    std::fprintf(stderr,
                 "CHECK FAILED: weft's C (%d x %d x %d, B %s): relative Frobenius error %.3e against cuBLAS (limit "
                 "%.0e), %.3e against the host reference at %d elements, %zu elements not finite\n",
                 M, N, K, layout_name(b_is_nk), row.rel_error, kMaxRelError, row.weft_sample_error, kSamples,
                 count_not_finite(got));

  // ---- time: two interleaved rounds per implementation, each call on the next input set
  size_t next_cublas = 0, next_weft = 0;
  auto run_cublas = [&] {
    size_t s = next_cublas++ % sets;
    cublas.run(device_ptr(in.a[s]), device_ptr(in.b[s]), device_ptr(c_cublas), nullptr);
  };
  auto run_weft = [&] {
    size_t s = next_weft++ % sets;
    gemm(in.a[s], in.b[s], c_weft, M, N, K, b_is_nk);
  };
  const bench::RoundTimes t = bench::gpu_times_ms_rounds({run_cublas, run_weft}, 2, runs);
  dev.synchronize();  // any fault of the last calls surfaces here, not in the next size
  const std::vector<double>&cublas_round = t.round_medians[0], &weft_round = t.round_medians[1];
  row.cublas_ms = t.median_ms(0);
  row.weft_ms = t.median_ms(1);
  row.cublas_spread = std::abs(cublas_round[0] - cublas_round[1]) / row.cublas_ms;
  row.weft_spread = std::abs(weft_round[0] - weft_round[1]) / row.weft_ms;
  std::fprintf(stderr,
               "  %5d x %5d x %5d B %s: cuBLAS %.3f ms (rounds %.3f / %.3f), weft %.3f ms (rounds %.3f / %.3f), "
               "%zu input sets, cuBLAS algorithm workspace %zu bytes, weft config %s%s, check %s\n",
               M, N, K, layout_name(b_is_nk), row.cublas_ms, cublas_round[0], cublas_round[1], row.weft_ms, weft_round[0],
               weft_round[1], sets, row.cublas_algo_workspace, row.config.c_str(),
               row.tuned_now ? " (tuned now)" : "", row.pass ? "pass" : "FAIL");
  return row;
}

// --compare-epilogue: `configs` of gemm_hopper_ws and cuBLASLt on one shape, each checked against cuBLAS,
// then timed interleaved (rounds x runs calls each, rotating the input sets). Prints one row per
// configuration; returns false when a check failed.
bool compare_configs(Device& dev, const bench::cublaslt::CublasLt& lt, const Buffer<uint8_t>& workspace,
                     const Inputs& in, int M, int N, int K, bool b_is_nk, int runs,
                     const std::vector<GemmConfig>& configs) {
  bench::cublaslt::Bf16Gemm cublas(lt, M, N, K, b_is_nk, reinterpret_cast<CUdeviceptr>(workspace.data()),
                                   workspace.bytes());
  const size_t sets = in.a.size();
  const std::vector<bf16> poison(size_t(M) * N, bf16::from_bits(0x7fc0));
  Buffer<bf16> c_cublas = dev.upload(poison), c_weft = dev.upload(poison);
  cublas.run(device_ptr(in.a[0]), device_ptr(in.b[0]), device_ptr(c_cublas), nullptr);
  dev.synchronize();
  const std::vector<bf16> want = c_cublas.download();
  const SourceLoc loc = SourceLoc::current();
  // Every configuration's launches, planned (descriptors built) once per input set and compiled before
  // any timing.
  std::vector<std::vector<gemm_detail::GemmLaunch>> plans(configs.size());
  bool pass = true;
  std::vector<double> errors;
  for (size_t i = 0; i < configs.size(); ++i) {
    for (size_t s = 0; s < sets; ++s)
      plans[i].push_back(gemm_detail::plan_gemm(configs[i], in.a[s], in.b[s], c_weft, M, N, K, b_is_nk, loc));
    plans[i][0].compile(dev);
    c_weft.upload(poison);
    plans[i][0].run(dev.stream(), loc);
    dev.synchronize();
    std::vector<bf16> got = c_weft.download();
    errors.push_back(rel_frobenius(got, want));
    if (!(errors.back() < kMaxRelError)) {
      pass = false;
      std::fprintf(stderr,
                   "CHECK FAILED: weft %s (%d x %d x %d, B %s): relative Frobenius error %.3e against cuBLAS, %zu "
                   "elements not finite\n",
                   configs[i].name().c_str(), M, N, K, layout_name(b_is_nk), errors.back(), count_not_finite(got));
    }
  }
  std::vector<size_t> next(configs.size() + 1, 0);
  auto run_one = [&](size_t which) {  // 0: cuBLAS, i + 1: configs[i]
    size_t s = next[which]++ % sets;
    if (which == 0) cublas.run(device_ptr(in.a[s]), device_ptr(in.b[s]), device_ptr(c_cublas), nullptr);
    else plans[which - 1][s].run(dev.stream(), loc);
  };
  constexpr int kRounds = 3;
  std::vector<std::function<void()>> contenders;
  for (size_t which = 0; which <= configs.size(); ++which) contenders.push_back([&, which] { run_one(which); });
  const bench::RoundTimes times = bench::gpu_times_ms_rounds(contenders, kRounds, runs);
  dev.synchronize();
  auto tflops = [&](double ms) { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; };
  auto rounds_text = [&](size_t which) { return bench::rounds_text(times.round_medians[which]); };
  const double cublas_ms = times.median_ms(0);
  std::printf("%5d x %5d x %5d B %s  %-28s %9.4f ms %7.1f TFLOP/s  (rounds %s)\n", M, N, K,
              layout_name(b_is_nk), "cuBLASLt", cublas_ms, tflops(cublas_ms), rounds_text(0).c_str());
  const double default_ms = times.median_ms(1);
  for (size_t i = 0; i < configs.size(); ++i) {
    const double ms = times.median_ms(i + 1);
    std::printf("%5d x %5d x %5d B %s  %-28s %9.4f ms %7.1f TFLOP/s  cuBLAS/this %.3fx  first/this %.3fx  "
                "(rounds %s, rel.err %.1e)%s\n",
                M, N, K, layout_name(b_is_nk), configs[i].name().c_str(), ms, tflops(ms), cublas_ms / ms,
                default_ms / ms, rounds_text(i + 1).c_str(), errors[i],
                errors[i] < kMaxRelError ? "" : " CHECK FAILED");
  }
  std::fflush(stdout);
  return pass;
}

std::string version_string(size_t v) {  // cublasLtGetVersion: major * 10000 + minor * 100 + patch
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace

int main(int argc, char** argv) try {
  Options opt = parse(argc, argv);
  Device dev = Device::current();
  if (dev.kind() != BackendKind::cuda) {
    std::fprintf(stderr, "bench_gemm needs a CUDA device (current device: %s; WEFT_BACKEND=%s)\n", dev.name().c_str(),
                 std::getenv("WEFT_BACKEND") ? std::getenv("WEFT_BACKEND") : "unset");
    return 1;
  }
  // Allocating makes the device's primary context current, which cuBLASLt then uses.
  Buffer<uint8_t> workspace = dev.alloc<uint8_t>(kWorkspaceBytes);
  std::unique_ptr<bench::cublaslt::CublasLt> lt;
  try {
    lt = std::make_unique<bench::cublaslt::CublasLt>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm needs cuBLASLt: %s\n", e.what());
    return 1;
  }
  const char* cache = std::getenv("WEFT_CACHE");
  const bool cache_on = !(cache && std::strcmp(cache, "0") == 0);
  std::fprintf(stderr, "bench_gemm on %s; cuBLASLt %s from %s; weft's GEMM: examples/gemm.h; compile cache %s\n",
               dev.name().c_str(), version_string(lt->version()).c_str(), lt->path().c_str(),
               cache_on ? "on" : "off (WEFT_CACHE=0)");

  if (opt.compare_epilogue)
    // The default, with two staging buffers (224 KB of shared memory), and with two of half the width
    // (the default's 208 KB: eight 32-column stores per consumer and tile). Then ping-pong: 128 x 128 tiles
    // per consumer with 5 and 6 stages (192 and 224 KB), with 5 stages and two staging buffers (224 KB),
    // and 64 x 256 tiles with 5 stages (216 KB).
    opt.configs = {GemmConfig{},
                   GemmConfig{.epilogue_buffers = 2},
                   GemmConfig{.epilogue_n = 32, .epilogue_buffers = 2},
                   GemmConfig{.BM = 128, .BN = 128, .stages = 5, .pingpong = true},
                   GemmConfig{.BM = 128, .BN = 128, .stages = 6, .pingpong = true},
                   GemmConfig{.BM = 128, .BN = 128, .stages = 5, .epilogue_buffers = 2, .pingpong = true},
                   GemmConfig{.BM = 64, .BN = 256, .stages = 5, .pingpong = true}};
  if (opt.compare_candidates || !opt.configs.empty()) {
    std::printf("bf16 GEMM: %s against cuBLASLt %s on %s (median of 3 interleaved rounds of %d calls, rotating "
                "inputs)\n",
                opt.compare_candidates ? "the autotuner's candidates"
                : opt.compare_epilogue ? "epilogue configurations"
                                       : "the configurations of --configs",
                version_string(lt->version()).c_str(), dev.name().c_str(), opt.runs);
    bool pass = true;
    std::vector<std::array<int, 3>> shapes = opt.shapes;
    if (shapes.empty())
      for (int n : opt.sizes) shapes.push_back({n, n, n});
    for (auto [M, N, K] : shapes) {
      Inputs in = make_inputs(dev, M, N, K);
      for (bool b_is_nk : {false, true}) {
        std::vector<GemmConfig> configs = opt.configs;
        if (opt.compare_candidates) configs = gemm_candidates(M, N, K, b_is_nk, dev.multiprocessors());
        std::erase_if(configs, [&](const GemmConfig& c) {
          const std::string why = c.problems(b_is_nk);
          if (!why.empty()) std::printf("%s (B %s): skipped: %s\n", c.name().c_str(), layout_name(b_is_nk), why.c_str());
          return !why.empty();
        });
        if (!configs.empty())
          pass = compare_configs(dev, *lt, workspace, in, M, N, K, b_is_nk, opt.runs, configs) && pass;
      }
    }
    if (!pass) {
      std::fprintf(stderr, "bench_gemm: FAILED: a result check failed (see CHECK FAILED above)\n");
      return 1;
    }
    return 0;
  }
  if (opt.tune) setenv("WEFT_AUTOTUNE", "force", 1);  // every bucket tuned now, its time reported
  std::vector<Row> rows;
  auto run_shape = [&](int M, int N, int K, const char* set) {
    Inputs in = make_inputs(dev, M, N, K);
    for (bool b_is_nk : {false, true})
      rows.push_back(measure(dev, *lt, workspace, in, M, N, K, b_is_nk, opt.runs, set));
  };
  if (opt.sweep)
    for (int M : opt.sweep_m)
      for (auto [N, K] : opt.sweep_nk.empty() ? kSweepNK : opt.sweep_nk) run_shape(M, N, K, "sweep");
  for (int n : opt.sizes) run_shape(n, n, n, "square");

  bool all_pass = true;
  for (const Row& r : rows) all_pass = all_pass && r.pass;
  // Summary: geometric mean of cuBLAS time / weft time, and the five worst rows.
  double log_sum = 0;
  for (const Row& r : rows) log_sum += std::log(r.ratio());
  const double geomean = std::exp(log_sum / double(rows.size()));
  std::vector<const Row*> worst;
  for (const Row& r : rows) worst.push_back(&r);
  std::sort(worst.begin(), worst.end(), [](const Row* x, const Row* y) { return x->ratio() < y->ratio(); });
  worst.resize(std::min<size_t>(5, worst.size()));
  double tune_total = 0;
  int tuned = 0;
  for (const Row& r : rows)
    if (r.tuned_now) tune_total += r.tune_ms, ++tuned;

  if (opt.json) {
    std::printf("{\n  \"device\": \"%s\",\n  \"cublaslt\": \"%s\",\n  \"cublaslt_path\": \"%s\",\n", dev.name().c_str(),
                version_string(lt->version()).c_str(), lt->path().c_str());
    std::printf("  \"weft_cache\": %s,\n  \"tune\": %s,\n  \"runs_per_round\": %d,\n  \"rows\": [\n",
                cache_on ? "true" : "false", opt.tune ? "true" : "false", opt.runs);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("    {\"set\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"b_layout\": \"%s\", \"cublas_ms\": %.4f, "
                  "\"cublas_tflops\": %.1f, \"weft_ms\": %.4f, \"weft_tflops\": %.1f, \"weft_over_cublas\": %.4f, "
                  "\"cublas_spread\": %.4f, \"weft_spread\": %.4f, \"rel_frobenius_error\": %.3e, "
                  "\"weft_sample_error\": %.3e, \"cublas_sample_error\": %.3e, \"weft_first_call_ms\": %.2f, "
                  "\"config\": \"%s\", \"bucket\": \"%s\", \"tuned_now\": %s, \"tune_ms\": %.1f, "
                  "\"compile_ms\": %.1f, \"check\": \"%s\"}%s\n",
                  r.set.c_str(), r.M, r.N, r.K, layout_name(r.b_is_nk), r.cublas_ms, r.tflops(r.cublas_ms), r.weft_ms,
                  r.tflops(r.weft_ms), r.ratio(), r.cublas_spread, r.weft_spread, r.rel_error, r.weft_sample_error,
                  r.cublas_sample_error, r.weft_first_call_ms, r.config.c_str(), r.problem.c_str(),
                  r.tuned_now ? "true" : "false", r.tune_ms, r.compile_ms, r.pass ? "pass" : "fail",
                  i + 1 < rows.size() ? "," : "");
    }
    std::printf("  ],\n  \"geomean_weft_over_cublas\": %.4f,\n  \"worst\": [", geomean);
    for (size_t i = 0; i < worst.size(); ++i)
      std::printf("%s{\"M\": %d, \"N\": %d, \"K\": %d, \"b_layout\": \"%s\", \"weft_over_cublas\": %.4f}",
                  i ? ", " : "", worst[i]->M, worst[i]->N, worst[i]->K, layout_name(worst[i]->b_is_nk), worst[i]->ratio());
    std::printf("],\n  \"tuned_shapes\": %d,\n  \"tune_ms_total\": %.1f,\n  \"pass\": %s\n}\n", tuned, tune_total,
                all_pass ? "true" : "false");
  } else {
    std::printf("bf16 GEMM, f32 accumulation, on %s; cuBLASLt %s\n", dev.name().c_str(),
                version_string(lt->version()).c_str());
    std::printf("%6s %6s %6s %4s | %10s %8s | %10s %8s | %11s | %9s | %-28s | %s\n", "M", "N", "K", "B", "cuBLAS ms",
                "TFLOP/s", "weft ms", "TFLOP/s", "weft/cuBLAS", "rel.err", "weft config", "check");
    for (const Row& r : rows)
      std::printf("%6d %6d %6d %4s | %10.4f %8.1f | %10.4f %8.1f | %10.3fx | %9.2e | %-28s | %s\n", r.M, r.N, r.K,
                  layout_name(r.b_is_nk), r.cublas_ms, r.tflops(r.cublas_ms), r.weft_ms, r.tflops(r.weft_ms), r.ratio(),
                  r.rel_error, r.config.c_str(), r.pass ? "pass" : "FAIL");
    std::printf("geometric mean of cuBLAS time / weft time over %zu rows: %.3fx; worst:", rows.size(), geomean);
    for (const Row* r : worst) std::printf(" %dx%dx%d %s %.3fx;", r->M, r->N, r->K, layout_name(r->b_is_nk), r->ratio());
    std::printf("\nweft's first call of each shape (host to result: trace, compile or cache load, tuning, run, "
                "synchronize; compile cache %s):\n", cache_on ? "on" : "off");
    for (const Row& r : rows) {
      std::printf("  %5d x %5d x %5d B %s: %9.1f ms", r.M, r.N, r.K, layout_name(r.b_is_nk), r.weft_first_call_ms);
      if (r.tuned_now) std::printf("  (tuned now: %.0f ms, of which compiling the candidates %.0f ms)", r.tune_ms, r.compile_ms);
      std::printf("\n");
    }
    if (tuned) std::printf("tuning: %d buckets, %.1f s in all, %.2f s per bucket\n", tuned, tune_total / 1e3,
                           tune_total / 1e3 / tuned);
  }
  if (!all_pass) {
    std::fprintf(stderr, "bench_gemm: FAILED: a result check failed (see CHECK FAILED above)\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {  // weft::Error, CUDA errors (as weft::Error), cuBLASLt errors
  std::fprintf(stderr, "bench_gemm: error: %s\n", e.what());
  return 1;
}
