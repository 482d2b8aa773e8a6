// bench_gemm_fp8: weft's fp8 GEMM (examples/gemm_fp8.h, e4m3, per-tensor scales, bf16 out) against
// cuBLASLt's fp8 GEMM (e4m3, the same scales through A_SCALE/B_SCALE pointers, bf16 out) in the same run.
//
//   bench_gemm_fp8 [--json] [--runs N] [--sizes 4096,8192] [--fast-accum]
//   bench_gemm_fp8 --configs all|NAME,NAME... [--runs N] [--sizes 4096,8192] [--fast-accum]
//
// For each size (M = N = K), C = a_scale b_scale A B^T with B stored N x K (the only fp8 layout of
// Hopper's tensor cores, "TN" in cuBLAS's terms):
//   1. check: C poisoned with NaN, one cuBLASLt call and one weft call on the same inputs; weft's C against
//      cuBLAS's by relative Frobenius error (host, double; must be < 1e-2), and both against a host
//      double-precision reference on the same fp8 values at sampled elements.
//   2. time: as bench_gemm: events around each call, calls queued back to back, warm-up first, two
//      rounds of --runs (default 30) calls per implementation, cuBLAS and weft alternating call by call, the
//      median over both rounds, the difference between the rounds' medians as the noise.
// Inputs: uniform in [-1, 1] rounded to e4m3 (never zeros), scales 0.75 and 1.25; calls rotate among
// enough input sets that no set is still in the L2 when it comes round again. TFLOP/s = 2 M N K / time.
// cuBLASLt runs with its default accumulation (promoting the tensor cores' partial sums to f32, as weft
// does every 128 of K); --fast-accum times its tensor-core-only accumulation instead.
//
// --configs times configurations of the kernel (GemmFp8Config, per-tensor scales) side by side instead of
// gemm_fp8()'s default: the candidates of gemm_fp8_candidates() by name ("all": every one; a wrong name lists
// them), each checked against cuBLASLt as above, then all of them and cuBLASLt timed call by call interleaved (three
// rounds of --runs calls each, rotating the input sets; median over the rounds). One row per configuration:
// time, TFLOP/s, cuBLAS/this and first/this (the first configuration named: the reference point).
//
// Exit status 1, with the reason on stderr: no CUDA device, no usable cuBLASLt, any error, a failed check.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../examples/gemm_fp8.h"
#include "bench_data.h"
#include "cublaslt.h"
#include "gpu_timing.h"

using namespace weft;
using weft::driver::cuda::CUdeviceptr;

namespace {

constexpr size_t kL2Bytes = size_t(60) << 20;         // the H200's L2
constexpr size_t kWorkspaceBytes = size_t(32) << 20;  // cuBLAS's recommended workspace on Hopper
constexpr double kMaxRelError = 1e-2;                 // bf16 output: rounding alone is ~2e-3
constexpr int kSamples = 256;
constexpr float kScaleA = 0.75f, kScaleB = 1.25f;

struct Options {
  bool json = false, fast_accum = false;
  int runs = 30;
  std::vector<int> sizes = {4096, 8192};
  std::vector<GemmFp8Config> configs;  // --configs: these instead of gemm_fp8()'s default
};

std::string candidate_names() {
  std::string out;
  for (const GemmFp8Config& c : gemm_fp8_candidates()) out += "\n  " + c.name();
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  auto usage = [&](const std::string& why) {
    std::fprintf(stderr,
                 "bench_gemm_fp8: %s\nusage: bench_gemm_fp8 [--json] [--runs N>=20] [--sizes 4096,8192] "
                 "[--fast-accum] [--configs all|NAME,NAME...]\nconfigurations (--configs):%s\n",
                 why.c_str(), candidate_names().c_str());
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--json") {
      o.json = true;
    } else if (arg == "--fast-accum") {
      o.fast_accum = true;
    } else if (arg == "--runs" && i + 1 < argc) {
      o.runs = std::atoi(argv[++i]);
      if (o.runs < 20) usage("--runs must be at least 20");
    } else if (arg == "--configs" && i + 1 < argc) {
      const std::vector<GemmFp8Config> all = gemm_fp8_candidates();
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ",")) {
        if (std::string(p) == "all") {
          o.configs.insert(o.configs.end(), all.begin(), all.end());
          continue;
        }
        auto it = std::find_if(all.begin(), all.end(), [&](const GemmFp8Config& c) { return c.name() == p; });
        if (it == all.end()) usage(std::string("unknown configuration '") + p + "'");
        o.configs.push_back(*it);
      }
      if (o.configs.empty()) usage("--configs needs at least one name");
    } else if (arg == "--sizes" && i + 1 < argc) {
      o.sizes.clear();
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ",")) {
        int n = std::atoi(p);
        if (n <= 0 || n % 16 != 0) usage(std::string("bad size '") + p + "' (a positive multiple of 16)");
        o.sizes.push_back(n);
      }
      if (o.sizes.empty()) usage("--sizes needs at least one size");
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  if (!o.configs.empty() && o.json) usage("--configs prints a table: no --json");
  return o;
}

using bench::count_not_finite;
using bench::Rng;
using bench::device_ptr;
using bench::rel_frobenius;
using bench::seconds_since;

struct Inputs {
  std::vector<Buffer<f8e4m3>> a, b;  // A [M, K], B [N, K]
  std::vector<f8e4m3> a0, b0;
};

Inputs make_inputs(Device& dev, int M, int N, int K) {
  size_t set_bytes = size_t(M) * K + size_t(N) * K;
  size_t sets = 1 + (2 * kL2Bytes + set_bytes - 1) / set_bytes;
  Inputs in;
  for (size_t s = 0; s < sets; ++s) {
    std::vector<f8e4m3> a = bench::random_values<f8e4m3>(size_t(M) * K, 2 * s + 1);
    std::vector<f8e4m3> b = bench::random_values<f8e4m3>(size_t(N) * K, 2 * s + 2);
    in.a.push_back(dev.upload(a));
    in.b.push_back(dev.upload(b));
    if (s == 0) {
      in.a0 = std::move(a);
      in.b0 = std::move(b);
    }
  }
  return in;
}

double sampled_error(const Inputs& in, const std::vector<bf16>& c, int M, int N, int K) {
  Rng rng{12345};
  double diff = 0, norm = 0;
  for (int s = 0; s < kSamples; ++s) {
    size_t i = rng.next() % M, j = rng.next() % N;
    double ref = 0;
    for (int k = 0; k < K; ++k) ref += double(float(in.a0[i * K + k])) * double(float(in.b0[j * K + k]));
    ref *= double(kScaleA) * double(kScaleB);
    double got = float(c[i * N + j]);
    if (!std::isfinite(got)) return NAN;
    diff += (got - ref) * (got - ref);
    norm += ref * ref;
  }
  return std::sqrt(diff / norm);
}

struct Row {
  int M, N, K;
  double cublas_ms, weft_ms, cublas_spread, weft_spread;
  double rel_error, weft_sample_error, cublas_sample_error, weft_first_call_ms;
  size_t cublas_algo_workspace;
  bool pass;
  double tflops(double ms) const { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; }
};

Row measure(Device& dev, const bench::cublaslt::CublasLt& lt, const Buffer<uint8_t>& workspace, const Inputs& in,
            const Buffer<float>& a_scale, const Buffer<float>& b_scale, int M, int N, int K, const Options& opt) {
  Row row{};
  row.M = M, row.N = N, row.K = K;
  bench::cublaslt::Fp8Gemm cublas(lt, M, N, K, device_ptr(a_scale), device_ptr(b_scale), opt.fast_accum,
                                  device_ptr(workspace), workspace.bytes());
  row.cublas_algo_workspace = cublas.algo_workspace_bytes();
  const size_t sets = in.a.size();

  const std::vector<bf16> poison(size_t(M) * N, bf16::from_bits(0x7fc0));
  Buffer<bf16> c_cublas = dev.upload(poison), c_weft = dev.upload(poison);
  cublas.run(device_ptr(in.a[0]), device_ptr(in.b[0]), device_ptr(c_cublas), nullptr);
  dev.synchronize();
  auto t0 = std::chrono::steady_clock::now();
  gemm_fp8(in.a[0], in.b[0], c_weft, a_scale, b_scale, M, N, K, Fp8Scaling::per_tensor);
  dev.synchronize();
  row.weft_first_call_ms = seconds_since(t0) * 1e3;
  std::vector<bf16> want = c_cublas.download(), got = c_weft.download();
  row.rel_error = rel_frobenius(got, want);
  row.cublas_sample_error = sampled_error(in, want, M, N, K);
  row.weft_sample_error = sampled_error(in, got, M, N, K);
  bool cublas_ok = row.cublas_sample_error < kMaxRelError;
  row.pass = cublas_ok && row.rel_error < kMaxRelError && row.weft_sample_error < kMaxRelError;
  if (!cublas_ok)
    std::fprintf(stderr,
                 "CHECK FAILED: cuBLASLt's C (%d x %d x %d) is off the host reference by %.3e (%zu elements not "
                 "finite): the cuBLASLt call itself is wrong, so weft cannot be judged against it\n",
                 M, N, K, row.cublas_sample_error, count_not_finite(want));
  else if (!row.pass)
    std::fprintf(stderr,
                 "CHECK FAILED: weft's C (%d x %d x %d): relative Frobenius error %.3e against cuBLAS (limit %.0e), "
                 "%.3e against the host reference at %d elements, %zu elements not finite\n",
                 M, N, K, row.rel_error, kMaxRelError, row.weft_sample_error, kSamples, count_not_finite(got));

  size_t next_cublas = 0, next_weft = 0;
  auto run_cublas = [&] {
    size_t s = next_cublas++ % sets;
    cublas.run(device_ptr(in.a[s]), device_ptr(in.b[s]), device_ptr(c_cublas), nullptr);
  };
  auto run_weft = [&] {
    size_t s = next_weft++ % sets;
    gemm_fp8(in.a[s], in.b[s], c_weft, a_scale, b_scale, M, N, K, Fp8Scaling::per_tensor);
  };
  const bench::RoundTimes t = bench::gpu_times_ms_rounds({run_cublas, run_weft}, 2, opt.runs);
  dev.synchronize();
  const std::vector<double>&cublas_round = t.round_medians[0], &weft_round = t.round_medians[1];
  row.cublas_ms = t.median_ms(0);
  row.weft_ms = t.median_ms(1);
  row.cublas_spread = std::abs(cublas_round[0] - cublas_round[1]) / row.cublas_ms;
  row.weft_spread = std::abs(weft_round[0] - weft_round[1]) / row.weft_ms;
  std::fprintf(stderr,
               "  %5d x %5d x %5d: cuBLAS %.3f ms (rounds %.3f / %.3f), weft %.3f ms (rounds %.3f / %.3f), %zu input "
               "sets, cuBLAS algorithm workspace %zu bytes, weft config %s, check %s\n",
               M, N, K, row.cublas_ms, cublas_round[0], cublas_round[1], row.weft_ms, weft_round[0], weft_round[1], sets,
               row.cublas_algo_workspace,
               gemm_fp8_default_config(Fp8Scaling::per_tensor, M, N, dev.multiprocessors()).name().c_str(),
               row.pass ? "pass" : "FAIL");
  return row;
}

// --configs: each configuration checked against cuBLASLt on the first input set, then every one and cuBLASLt
// timed interleaved. Prints one row per configuration; returns false when a check failed.
bool compare_configs(Device& dev, const bench::cublaslt::CublasLt& lt, const Buffer<uint8_t>& workspace,
                     const Inputs& in, const Buffer<float>& a_scale, const Buffer<float>& b_scale, int M, int N, int K,
                     const Options& opt) {
  const std::vector<GemmFp8Config>& configs = opt.configs;
  bench::cublaslt::Fp8Gemm cublas(lt, M, N, K, device_ptr(a_scale), device_ptr(b_scale), opt.fast_accum,
                                  device_ptr(workspace), workspace.bytes());
  const size_t sets = in.a.size();
  const std::vector<bf16> poison(size_t(M) * N, bf16::from_bits(0x7fc0));
  Buffer<bf16> c_cublas = dev.upload(poison), c_weft = dev.upload(poison);
  cublas.run(device_ptr(in.a[0]), device_ptr(in.b[0]), device_ptr(c_cublas), nullptr);
  dev.synchronize();
  const std::vector<bf16> want = c_cublas.download();
  if (!(sampled_error(in, want, M, N, K) < kMaxRelError)) {
    std::fprintf(stderr, "CHECK FAILED: cuBLASLt's C (%d x %d x %d) is off the host reference\n", M, N, K);
    return false;
  }
  bool pass = true;
  std::vector<double> errors;
  for (const GemmFp8Config& cfg : configs) {
    c_weft.upload(poison);
    gemm_fp8(in.a[0], in.b[0], c_weft, a_scale, b_scale, M, N, K, Fp8Scaling::per_tensor, cfg);  // compiles
    dev.synchronize();
    std::vector<bf16> got = c_weft.download();
    double sampled = sampled_error(in, got, M, N, K);
    errors.push_back(rel_frobenius(got, want));
    if (!(errors.back() < kMaxRelError) || !(sampled < kMaxRelError)) {
      pass = false;
      std::fprintf(stderr,
                   "CHECK FAILED: weft %s (%d x %d x %d): relative Frobenius error %.3e against cuBLAS, %.3e against "
                   "the host reference at %d elements, %zu elements not finite\n",
                   cfg.name().c_str(), M, N, K, errors.back(), sampled, kSamples, count_not_finite(got));
    }
  }
  std::vector<size_t> next(configs.size() + 1, 0);
  auto run_one = [&](size_t which) {  // 0: cuBLAS, i + 1: configs[i]
    size_t s = next[which]++ % sets;
    if (which == 0) cublas.run(device_ptr(in.a[s]), device_ptr(in.b[s]), device_ptr(c_cublas), nullptr);
    else gemm_fp8(in.a[s], in.b[s], c_weft, a_scale, b_scale, M, N, K, Fp8Scaling::per_tensor, configs[which - 1]);
  };
  constexpr int kRounds = 3;
  std::vector<std::function<void()>> contenders;
  for (size_t which = 0; which <= configs.size(); ++which) contenders.push_back([&, which] { run_one(which); });
  const bench::RoundTimes times = bench::gpu_times_ms_rounds(contenders, kRounds, opt.runs);
  dev.synchronize();
  auto tflops = [&](double ms) { return 2.0 * M * N * K / (ms * 1e-3) / 1e12; };
  auto rounds_text = [&](size_t which) { return bench::rounds_text(times.round_medians[which]); };
  const double cublas_ms = times.median_ms(0);
  std::printf("%5d x %5d x %5d  %-34s %9.4f ms %7.1f TFLOP/s  (rounds %s; gemm_fp8's default here: %s)\n", M, N, K,
              opt.fast_accum ? "cuBLASLt (fast accumulation)" : "cuBLASLt", cublas_ms, tflops(cublas_ms),
              rounds_text(0).c_str(),
              gemm_fp8_default_config(Fp8Scaling::per_tensor, M, N, dev.multiprocessors()).name().c_str());
  const double first_ms = times.median_ms(1);
  for (size_t i = 0; i < configs.size(); ++i) {
    const double ms = times.median_ms(i + 1);
    std::printf("%5d x %5d x %5d  %-34s %9.4f ms %7.1f TFLOP/s  cuBLAS/this %.3fx  first/this %.3fx  "
                "(rounds %s, rel.err %.1e)%s\n",
                M, N, K, configs[i].name().c_str(), ms, tflops(ms), cublas_ms / ms, first_ms / ms,
                rounds_text(i + 1).c_str(), errors[i], errors[i] < kMaxRelError ? "" : " CHECK FAILED");
  }
  std::fflush(stdout);
  return pass;
}

std::string version_string(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace

int main(int argc, char** argv) try {
  Options opt = parse(argc, argv);
  Device dev = Device::current();
  if (dev.kind() != BackendKind::cuda) {
    std::fprintf(stderr, "bench_gemm_fp8 needs a CUDA device (current device: %s; WEFT_BACKEND=%s)\n",
                 dev.name().c_str(), std::getenv("WEFT_BACKEND") ? std::getenv("WEFT_BACKEND") : "unset");
    return 1;
  }
  Buffer<uint8_t> workspace = dev.alloc<uint8_t>(kWorkspaceBytes);
  std::unique_ptr<bench::cublaslt::CublasLt> lt;
  try {
    lt = std::make_unique<bench::cublaslt::CublasLt>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm_fp8 needs cuBLASLt: %s\n", e.what());
    return 1;
  }
  Buffer<float> a_scale = dev.upload(std::vector<float>{kScaleA}), b_scale = dev.upload(std::vector<float>{kScaleB});
  const char* cache = std::getenv("WEFT_CACHE");
  const bool cache_on = !(cache && std::strcmp(cache, "0") == 0);
  std::fprintf(stderr, "bench_gemm_fp8 on %s; cuBLASLt %s from %s (%s accumulation); weft compile cache %s\n",
               dev.name().c_str(), version_string(lt->version()).c_str(), lt->path().c_str(),
               opt.fast_accum ? "fast" : "promoted", cache_on ? "on" : "off (WEFT_CACHE=0)");

  if (!opt.configs.empty()) {
    std::printf("fp8 e4m3 GEMM configurations (per-tensor scales, bf16 out) against cuBLASLt %s on %s (median of 3 "
                "interleaved rounds of %d calls)\n",
                version_string(lt->version()).c_str(), dev.name().c_str(), opt.runs);
    bool pass = true;
    for (int n : opt.sizes) {
      Inputs in = make_inputs(dev, n, n, n);
      pass = compare_configs(dev, *lt, workspace, in, a_scale, b_scale, n, n, n, opt) && pass;
    }
    if (!pass) {
      std::fprintf(stderr, "bench_gemm_fp8: FAILED: a result check failed (see CHECK FAILED above)\n");
      return 1;
    }
    return 0;
  }

  std::vector<Row> rows;
  for (int n : opt.sizes) {
    Inputs in = make_inputs(dev, n, n, n);
    rows.push_back(measure(dev, *lt, workspace, in, a_scale, b_scale, n, n, n, opt));
  }

  bool all_pass = true;
  for (const Row& r : rows) all_pass = all_pass && r.pass;
  if (opt.json) {
    std::printf("{\n  \"device\": \"%s\",\n  \"cublaslt\": \"%s\",\n  \"cublaslt_path\": \"%s\",\n", dev.name().c_str(),
                version_string(lt->version()).c_str(), lt->path().c_str());
    std::printf("  \"dtype\": \"e4m3\",\n  \"scaling\": \"per-tensor\",\n  \"cublas_fast_accum\": %s,\n  \"weft_cache\": %s,\n"
                "  \"runs_per_round\": %d,\n  \"rows\": [\n",
                opt.fast_accum ? "true" : "false", cache_on ? "true" : "false", opt.runs);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("    {\"M\": %d, \"N\": %d, \"K\": %d, \"cublas_ms\": %.4f, \"cublas_tflops\": %.1f, \"weft_ms\": %.4f, "
                  "\"weft_tflops\": %.1f, \"weft_over_cublas\": %.4f, \"cublas_spread\": %.4f, \"weft_spread\": %.4f, "
                  "\"rel_frobenius_error\": %.3e, \"weft_sample_error\": %.3e, \"cublas_sample_error\": %.3e, "
                  "\"weft_first_call_ms\": %.2f, \"check\": \"%s\"}%s\n",
                  r.M, r.N, r.K, r.cublas_ms, r.tflops(r.cublas_ms), r.weft_ms, r.tflops(r.weft_ms), r.cublas_ms / r.weft_ms,
                  r.cublas_spread, r.weft_spread, r.rel_error, r.weft_sample_error, r.cublas_sample_error,
                  r.weft_first_call_ms, r.pass ? "pass" : "fail", i + 1 < rows.size() ? "," : "");
    }
    std::printf("  ],\n  \"pass\": %s\n}\n", all_pass ? "true" : "false");
  } else {
    std::printf("fp8 e4m3 GEMM (C = sa sb A B^T, bf16 out), f32 accumulation, on %s; cuBLASLt %s (%s accumulation)\n",
                dev.name().c_str(), version_string(lt->version()).c_str(), opt.fast_accum ? "fast" : "promoted");
    std::printf("%6s %6s %6s | %10s %8s | %10s %8s | %11s | %9s | %s\n", "M", "N", "K", "cuBLAS ms", "TFLOP/s", "weft ms",
                "TFLOP/s", "weft/cuBLAS", "rel.err", "check");
    for (const Row& r : rows)
      std::printf("%6d %6d %6d | %10.3f %8.1f | %10.3f %8.1f | %10.3fx | %9.2e | %s\n", r.M, r.N, r.K, r.cublas_ms,
                  r.tflops(r.cublas_ms), r.weft_ms, r.tflops(r.weft_ms), r.cublas_ms / r.weft_ms, r.rel_error,
                  r.pass ? "pass" : "FAIL");
    std::printf("weft's first call of each (host to result; compile cache %s):\n", cache_on ? "on" : "off");
    for (const Row& r : rows) std::printf("  %5d^3: %9.1f ms\n", r.M, r.weft_first_call_ms);
  }
  if (!all_pass) {
    std::fprintf(stderr, "bench_gemm_fp8: FAILED: a result check failed (see CHECK FAILED above)\n");
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gemm_fp8: error: %s\n", e.what());
  return 1;
}
