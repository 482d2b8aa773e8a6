// bench_compile: how long weft takes to compile a kernel, stage by stage (issue 12), for softmax,
// layernorm, the warp-specialized GEMM (both B layouts) and attention (head dim 128, plain and causal).
//
// Each run is a fresh process (`bench_compile --once NAME`) with weft's compile cache off (WEFT_CACHE=0)
// and the driver's off (CUDA_CACHE_DISABLE=1); it compiles the kernel on the current device with
// Kernel::compile and reads the stage times weft recorded (src/support/compile_timing.h, the same figures
// WEFT_TIME_PASSES=1 prints): trace, passes (verifier and plans), LLVM IR construction, LLVM optimization,
// code generation (PTX text), link (the driver's cuModuleLoadDataEx: it compiles the PTX and loads the
// module in one call, so load is 0) and own = everything before the driver. The process then compiles the
// same kernel again `--warm` times from a new Kernel (traced anew; LLVM and the driver already started):
// "own warm" is the median of those, what the second and later kernels of a process pay.
// The table shows the median of each column over the runs. Without a GPU, run with WEFT_TARGET=sm_90a:
// every stage up to the PTX (link and load are 0).
//
//   bench_compile [--runs N] [--warm N] [--json] [--only NAME]
//   bench_compile --parallel [--runs N] [--json]   every kernel one after the other, then all at once with
//                                                  Kernel::compile_async (in one process, after a warm-up)
//   bench_compile --once NAME [--warm N] [--rusage]    (internal) one process's compiles, one line of
//                                          numbers each; --rusage adds, on stderr, each compile's page faults
//                                          and user / system CPU time (where a slow host spends it)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <tuple>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <weft/weft.h>

#include "../examples/attention_fwd.h"
#include "../examples/gemm_hopper_ws.h"
#include "../examples/norms.h"
#include "support/compile_timing.h"

using namespace weft;

namespace {

using support::CompileStage;
using support::CompileTimes;

Kernel make_softmax() {
  return Kernel("softmax", [](Ptr<float> in, Ptr<float> out, Int n_cols, Const<int> block) {
    Int row = program_id(0);
    Int cols = arange(0, block);
    Bool valid = cols < n_cols;
    Float x = load(in + row * n_cols + cols, valid, -INFINITY);
    Float e = exp(x - max(x, 0));
    store(out + row * n_cols + cols, e / sum(e, 0), valid);
  });
}

// A compile under way: the future, and the Kernel and Tmas it reads (alive until it is ready).
struct Pending {
  std::shared_ptr<void> keep;
  std::future<std::shared_ptr<const detail::CompiledKernel>> done;
};

// Compiles k's specialization for `args` on `dev`: now (Kernel::compile), or with Kernel::compile_async.
template <class... A> Pending start(Device& dev, bool async, Kernel k, A... args) {
  auto keep = std::make_shared<std::tuple<Kernel, A...>>(std::move(k), std::move(args)...);
  Pending p;
  p.keep = keep;
  p.done = std::apply(
      [&](Kernel& kernel, A&... a) {
        if (async) return kernel.compile_async(dev, a...);
        std::promise<std::shared_ptr<const detail::CompiledKernel>> ready;
        ready.set_value(kernel.compile(dev, a...));
        return ready.get_future();
      },
      *keep);
  return p;
}

// A kernel to compile: `start(dev, async)` makes a new Kernel and compiles its specialization on `dev`.
struct Case {
  const char* name;
  std::function<Pending(Device&, bool)> start;
  void compile(Device& dev) const { start(dev, false).done.get(); }
};

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"softmax", [](Device& dev, bool async) { return start(dev, async, make_softmax(), 1024); }});
  out.push_back({"layernorm", [](Device& dev, bool async) { return start(dev, async, make_layernorm(), 2048); }});
  for (bool nk : {true, false}) {
    out.push_back({nk ? "gemm_ws_nk" : "gemm_ws_kn", [nk](Device& dev, bool async) {
                     const int M = 4096, N = 4096, K = 4096;
                     GemmConfig cfg;
                     static std::vector<Buffer<bf16>> b;  // allocated once per process (one device)
                     if (b.empty())
                       for (int i = 0; i < 3; ++i) b.push_back(dev.alloc<bf16>(size_t(M) * N));
                     auto a_desc = tma(b[0], {M, K}, {cfg.BM, cfg.BK});
                     auto b_desc = nk ? tma(b[1], {N, K}, {cfg.BN, cfg.BK}) : tma(b[1], {K, N}, {cfg.BK, 64});
                     auto c_desc = tma(b[2], {M, N}, {cfg.BM / 2, cfg.epilogue_n});
                     return start(dev, async, make_gemm_hopper_ws(cfg, nk), a_desc, b_desc, c_desc);
                   }});
  }
  for (bool causal : {false, true}) {
    out.push_back({causal ? "attention_d128_causal" : "attention_d128", [causal](Device& dev, bool async) {
                     const int B = 1, H = 16, S = 4096, D = 128;
                     AttentionConfig cfg = attention_config(D);
                     static std::vector<Buffer<bf16>> b;
                     if (b.empty())
                       for (int i = 0; i < 4; ++i) b.push_back(dev.alloc<bf16>(size_t(B) * H * S * D));
                     const int64_t bh = B * H, half = cfg.BM / 2;
                     auto q = tma(b[0], {bh, S, D}, {1, half, 64}), o = tma(b[3], {bh, S, D}, {1, half, 64});
                     auto k = tma(b[1], {bh, S, D}, {1, cfg.BN, 64}), v = tma(b[2], {bh, S, D}, {1, cfg.BN, 64});
                     return start(dev, async, make_attention_fwd<bf16>(cfg, D, causal), q, k, v, o);
                   }});
  }
  return out;
}

// Fields of one compile, in the order --once prints them.
struct Row {
  double stage[support::kCompileStages] = {};
  double own = 0, total = 0;
};

struct Usage {
  long minor_faults, major_faults;
  double user_ms, sys_ms;
};

Usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return t.tv_sec * 1e3 + t.tv_usec / 1e3; };
  return {u.ru_minflt, u.ru_majflt, ms(u.ru_utime), ms(u.ru_stime)};
}

int run_once(const std::string& name, int warm, bool rusage) {
  Device dev = Device::current();
  Buffer<float> context = dev.alloc<float>(1);  // the driver's start-up is not compile time
  for (const Case& c : cases()) {
    if (name != c.name) continue;
    for (int i = 0; i <= warm; ++i) {
      Usage before = usage_now();
      c.compile(dev);
      if (rusage) {
        Usage after = usage_now();
        std::fprintf(stderr, "compile %d: %ld minor / %ld major page faults, user %.2f ms, system %.2f ms\n", i,
                     after.minor_faults - before.minor_faults, after.major_faults - before.major_faults,
                     after.user_ms - before.user_ms, after.sys_ms - before.sys_ms);
      }
      std::optional<CompileTimes> t = support::last_compile_times();
      if (!t) {
        std::fprintf(stderr, "bench_compile: no compile was recorded for %s\n", c.name);
        return 1;
      }
      for (double ms : t->ms) std::printf("%.4f ", ms);
      std::printf("%.4f %.4f\n", t->own_ms(), t->total_ms);
    }
    return 0;
  }
  std::fprintf(stderr, "bench_compile: no kernel named %s\n", name.c_str());
  return 2;
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Every kernel compiled one after the other, then all at once with compile_async (new Kernels each time,
// after one warm-up compile): prints "serial_ms parallel_ms longest_single_ms threads".
int run_parallel_once() {
  Device dev = Device::current();
  Buffer<float> context = dev.alloc<float>(1);
  std::vector<Case> all = cases();
  all[0].compile(dev);  // LLVM's and the driver's start-up
  double longest = 0;
  auto t = std::chrono::steady_clock::now();
  for (const Case& c : all) {
    auto one = std::chrono::steady_clock::now();
    c.compile(dev);
    longest = std::max(longest, ms_since(one));
  }
  double serial = ms_since(t);
  t = std::chrono::steady_clock::now();
  std::vector<Pending> pending;
  for (const Case& c : all) pending.push_back(c.start(dev, true));
  for (Pending& p : pending) p.done.get();
  double parallel = ms_since(t);
  std::printf("%.3f %.3f %.3f %u\n", serial, parallel, longest, std::thread::hardware_concurrency());
  return 0;
}

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The lines a child process printed.
std::vector<Row> run_child(const char* self, const std::string& name, int warm) {
  std::string command = std::string("WEFT_CACHE=0 CUDA_CACHE_DISABLE=1 ") + self + " --once " + name +
                        " --warm " + std::to_string(warm);
  std::vector<Row> rows;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return rows;
  for (;;) {
    Row r;
    bool ok = true;
    for (double& ms : r.stage) ok = ok && std::fscanf(p, "%lf", &ms) == 1;
    ok = ok && std::fscanf(p, "%lf %lf", &r.own, &r.total) == 2;
    if (!ok) break;
    rows.push_back(r);
  }
  pclose(p);
  return rows;
}

}  // namespace

int main(int argc, char** argv) try {
  int runs = 5, warm = 3;
  bool json = false, parallel = false, rusage = false;
  std::string only, once;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--warm" && i + 1 < argc) warm = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--once" && i + 1 < argc) once = argv[++i];
    else if (a == "--parallel") parallel = true;
    else if (a == "--rusage") rusage = true;
    else {
      std::fprintf(stderr, "usage: bench_compile [--runs N] [--warm N] [--json] [--only NAME]\n");
      return 2;
    }
  }
  if (!once.empty()) return once == "parallel" ? run_parallel_once() : run_once(once, warm, rusage);
  if (parallel) {  // median over `runs` fresh processes
    std::vector<double> serial, together, longest;
    unsigned threads = 0;
    for (int r = 0; r < runs; ++r) {
      std::string command = std::string("WEFT_CACHE=0 CUDA_CACHE_DISABLE=1 ") + argv[0] + " --once parallel";
      FILE* p = popen(command.c_str(), "r");
      double s = 0, t = 0, l = 0;
      if (p && std::fscanf(p, "%lf %lf %lf %u", &s, &t, &l, &threads) == 4) {
        serial.push_back(s), together.push_back(t), longest.push_back(l);
      }
      if (p) pclose(p);
    }
    if (serial.empty()) return 1;
    if (json)
      std::printf("{\"parallel\": {\"kernels\": %zu, \"threads\": %u, \"serial_ms\": %.3f, \"compile_async_ms\": %.3f, "
                  "\"longest_single_ms\": %.3f}}\n",
                  cases().size(), threads, median(serial), median(together), median(longest));
    else
      std::printf("all %zu kernels, new Kernels after a warm-up, median of %d processes: one after the other %.1f ms, "
                  "compile_async on %u compile threads %.1f ms (the longest single compile: %.1f ms)\n",
                  cases().size(), runs, median(serial), threads, median(together), median(longest));
    return 0;
  }

  Device dev = Device::current();
  const std::string device = dev.name();
  struct Result {
    std::string name;
    Row cold;       // medians over the runs' first compiles
    double warm_own = -1;
  };
  std::vector<Result> results;
  for (const Case& c : cases()) {
    if (!only.empty() && only != c.name) continue;
    std::vector<std::vector<double>> columns(support::kCompileStages + 2);
    std::vector<double> warm_own;
    for (int r = 0; r < runs; ++r) {
      std::vector<Row> rows = run_child(argv[0], c.name, warm);
      if (rows.empty()) {
        std::fprintf(stderr, "bench_compile: the run for %s failed\n", c.name);
        return 1;
      }
      for (int s = 0; s < support::kCompileStages; ++s) columns[s].push_back(rows[0].stage[s]);
      columns[support::kCompileStages].push_back(rows[0].own);
      columns[support::kCompileStages + 1].push_back(rows[0].total);
      for (size_t i = 1; i < rows.size(); ++i) warm_own.push_back(rows[i].own);
    }
    Result res{c.name, {}, median(warm_own)};
    for (int s = 0; s < support::kCompileStages; ++s) res.cold.stage[s] = median(columns[s]);
    res.cold.own = median(columns[support::kCompileStages]);
    res.cold.total = median(columns[support::kCompileStages + 1]);
    results.push_back(res);
  }

  auto st = [](const Row& r, CompileStage s) { return r.stage[static_cast<int>(s)]; };
  if (json) {
    std::printf("{\"device\": \"%s\", \"runs\": %d, \"warm\": %d, \"kernels\": [", device.c_str(), runs, warm);
    for (size_t i = 0; i < results.size(); ++i) {
      const Row& r = results[i].cold;
      std::printf("%s\n  {\"name\": \"%s\", \"trace_ms\": %.3f, \"passes_ms\": %.3f, \"llvm_ir_ms\": %.3f, "
                  "\"llvm_opt_ms\": %.3f, \"codegen_ms\": %.3f, \"link_ms\": %.3f, \"load_ms\": %.3f, "
                  "\"own_ms\": %.3f, \"total_ms\": %.3f, \"own_warm_ms\": %.3f}",
                  i ? "," : "", results[i].name.c_str(), st(r, CompileStage::trace), st(r, CompileStage::passes),
                  st(r, CompileStage::llvm_ir), st(r, CompileStage::llvm_opt), st(r, CompileStage::codegen),
                  st(r, CompileStage::link), st(r, CompileStage::load), r.own, r.total, results[i].warm_own);
    }
    std::printf("\n]}\n");
    return 0;
  }
  std::printf("bench_compile on %s: cold compile in a fresh process, median of %d runs (ms); load is 0: the "
              "driver compiles and loads in one call (link)\n",
              device.c_str(), runs);
  std::printf("%-22s %7s %7s %7s %8s %8s %8s %6s | %8s %9s | %8s\n", "kernel", "trace", "passes", "llvm-ir",
              "llvm-opt", "codegen", "link", "load", "own", "own warm", "total");
  for (const Result& res : results) {
    const Row& r = res.cold;
    std::printf("%-22s %7.2f %7.2f %7.2f %8.2f %8.2f %8.2f %6.2f | %8.2f %9.2f | %8.2f\n", res.name.c_str(),
                st(r, CompileStage::trace), st(r, CompileStage::passes), st(r, CompileStage::llvm_ir),
                st(r, CompileStage::llvm_opt), st(r, CompileStage::codegen), st(r, CompileStage::link),
                st(r, CompileStage::load), r.own, res.warm_own, r.total);
  }
  return 0;
} catch (const weft::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
