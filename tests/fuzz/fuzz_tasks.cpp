// libFuzzer target: random warp-specialized programs on the CPU backend's fibers: producer and consumer
// tasks (with replicas) passing tiles through a ring of shared-memory stages guarded by mbarriers
// (barrier_arrive / barrier_wait on "full" and "empty"), optionally a named barrier between the producer
// and a third task, under a random fiber schedule (WEFT_CPU_SCHED_SEED). The fuzz bytes perturb the
// protocol: arrive counts, replica and warp counts, iteration counts, phase parities, named-barrier ids and
// thread counts, so many programs deadlock or arrive too often.
//
// Expected: a weft::Error (a deadlock report, an over-arrival, a resource limit). Findings: crashes,
// sanitizer reports, hangs (libFuzzer's -timeout), a weft::InternalError, and, for a program whose
// protocol is well formed (counts agree, parities right), any deadlock report or a wrong output: the
// consumers store stage i's tile, x + i, to out[i].
#include <fuzzer/FuzzedDataProvider.h>
#include <weft/weft.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace weft;

namespace {

struct Program {
  int rows = 2, cols = 4;
  int stages = 2;
  int producers = 1, consumers = 1;            // replicas
  int producer_warps = 1, consumer_warps = 4;  // per replica
  int full_count = 1, empty_count = 1;         // arrive counts
  int produced = 4, consumed = 4;              // iterations
  int producer_flip = 0, consumer_flip = 0;    // phase parity errors
  bool named = false;                          // producer arrives, a third task waits
  int named_id = 1, named_threads = 0, waiter_warps = 1;
  bool loop_in_dsl = true;                     // for_range, or the iterations unrolled in C++
  uint32_t seed = 0;

  bool well_formed() const {
    return full_count == producers && empty_count == consumers && produced == consumed && producer_flip == 0 &&
           consumer_flip == 0 &&
           (!named || (producers == 1 && named_threads == 32 * (producer_warps + waiter_warps)));
  }
  std::string describe() const {
    char s[512];
    std::snprintf(s, sizeof s,
                  "tile [%d, %d], %d stages; producer x%d (%d warps) %d iterations, phase flip %d; consumer x%d (%d "
                  "warps) %d iterations, phase flip %d; full arrive count %d, empty %d; named barrier %s id %d threads "
                  "%d waiter warps %d; %s loop; schedule seed %u; %s",
                  rows, cols, stages, producers, producer_warps, produced, producer_flip, consumers, consumer_warps,
                  consumed, consumer_flip, full_count, empty_count, named ? "on" : "off", named_id, named_threads,
                  waiter_warps, loop_in_dsl ? "for_range" : "unrolled", seed, well_formed() ? "well formed" : "ill formed");
    return s;
  }
};

Program decode(FuzzedDataProvider& in) {
  Program p;
  const int dims[] = {1, 2, 4, 8, 16};
  p.rows = dims[in.ConsumeIntegralInRange<int>(0, 4)];
  p.cols = dims[in.ConsumeIntegralInRange<int>(0, 4)];
  p.stages = in.ConsumeIntegralInRange<int>(1, 3);
  p.producers = in.ConsumeIntegralInRange<int>(1, 2);
  p.consumers = in.ConsumeIntegralInRange<int>(1, 3);
  const int warps[] = {1, 2, 4};
  p.producer_warps = warps[in.ConsumeIntegralInRange<int>(0, 2)];
  p.consumer_warps = warps[in.ConsumeIntegralInRange<int>(0, 2)];
  p.produced = in.ConsumeIntegralInRange<int>(0, 6);
  // Mostly consistent programs, with one perturbation at a time in the rest.
  uint8_t mode = in.ConsumeIntegral<uint8_t>();
  p.full_count = p.producers;
  p.empty_count = p.consumers;
  p.consumed = p.produced;
  switch (mode % 8) {
    case 1: p.full_count = in.ConsumeIntegralInRange<int>(1, 3); break;
    case 2: p.empty_count = in.ConsumeIntegralInRange<int>(1, 4); break;
    case 3: p.consumed = in.ConsumeIntegralInRange<int>(0, 6); break;
    case 4: p.producer_flip = 1; break;
    case 5: p.consumer_flip = 1; break;
    default: break;
  }
  p.named = (mode >> 3) & 1;
  if (p.named) {
    p.producers = 1;
    p.full_count = (mode % 8) == 1 ? p.full_count : 1;
    p.waiter_warps = warps[in.ConsumeIntegralInRange<int>(0, 2)];
    p.named_id = in.ConsumeIntegralInRange<int>(1, 15);
    p.named_threads = 32 * (p.producer_warps + p.waiter_warps);
    if ((mode >> 4) & 1) p.named_threads = 32 * in.ConsumeIntegralInRange<int>(1, 8);
  }
  p.loop_in_dsl = !((mode >> 5) & 1);
  p.seed = in.ConsumeIntegral<uint32_t>();
  return p;
}

void trace(const Program& p, Ptr<float> x, Ptr<float> out) {
  const int n = p.rows * p.cols;
  auto ring = local_alloc<float>({p.rows, p.cols}, p.stages, "ring");
  auto full = alloc_barriers(p.stages, p.full_count, "full");
  auto empty = alloc_barriers(p.stages, p.empty_count, "empty");
  Int offs = reshape(arange(0, n), {p.rows, p.cols});
  // Runs body(i) for i in [0, count): as a DSL loop or unrolled in C++.
  auto repeat = [&](int count, auto body) {
    if (p.loop_in_dsl) {
      for_range(0, count, [&](Int i) { body(i); });
    } else {
      for (int i = 0; i < count; ++i) body(Int(scalar<int32_t>(i)));
    }
  };
  Task producer = task("producer", {.warps = p.producer_warps, .replicas = p.producers}, [&] {
    repeat(p.produced, [&](Int i) {
      Int s = i % p.stages, phase = (i / p.stages) % 2;
      barrier_wait(empty[s], phase ^ (1 ^ p.producer_flip));  // a fresh barrier: parity 1 passes at once
      local_store(ring[s], load(x + offs) + cast<float>(i));
      barrier_arrive(full[s]);
    });
    if (p.named) named_barrier_arrive(p.named_id, p.named_threads);
  });
  Task consumer = task("consumer", {.warps = p.consumer_warps, .replicas = p.consumers}, [&] {
    repeat(p.consumed, [&](Int i) {
      Int s = i % p.stages, phase = (i / p.stages) % 2;
      barrier_wait(full[s], phase ^ p.consumer_flip);
      store(out + i * n + offs, local_load(ring[s]));
      barrier_arrive(empty[s]);
    });
  });
  if (p.named) {
    Task waiter = task("waiter", {.warps = p.waiter_warps}, [&] { named_barrier_wait(p.named_id, p.named_threads); });
    async_tasks(producer, consumer, waiter);
  } else {
    async_tasks(producer, consumer);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("WEFT_BACKEND", "cpu", 1);
  setenv("WEFT_CACHE", "0", 1);
  setenv("WEFT_CPU_THREADS", "1", 1);
  setenv("WEFT_VERIFY_LLVM", "1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const Program p = decode(in);
  const bool verbose = std::getenv("WEFT_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s\n", p.describe().c_str());
  setenv("WEFT_CPU_SCHED_SEED", std::to_string(p.seed).c_str(), 1);
  const int n = p.rows * p.cols, slots = std::max(p.produced, p.consumed) + 1;
  std::vector<float> host(n);
  for (int k = 0; k < n; ++k) host[k] = float(k % 7) - 2.5f;
  std::vector<float> got;
  try {
    Kernel k("fuzz_tasks", [&p](Ptr<float> x, Ptr<float> out) { trace(p, x, out); });
    Device d = Device::cpu();
    Buffer<float> x = d.upload(host);
    Buffer<float> out = d.upload(std::vector<float>(size_t(n) * slots, -1.0f));
    k.launch(Grid(2), x, out);
    got = out.download();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "weft::InternalError (a finding) for %s\n%s\n", p.describe().c_str(), e.what());
    std::abort();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (verbose) std::fprintf(stderr, "weft::Error: %s\n", what.c_str());
    if (p.well_formed() && what.find("deadlock") != std::string::npos) {
      std::fprintf(stderr, "a well-formed program was reported as a deadlock: %s\n%s\n", p.describe().c_str(), what.c_str());
      std::abort();
    }
    return 0;
  }
  if (p.well_formed()) {
    for (int i = 0; i < p.consumed; ++i)
      for (int k = 0; k < n; ++k)
        if (got[size_t(i) * n + k] != host[k] + float(i)) {
          std::fprintf(stderr, "wrong output at stage %d element %d: %g, want %g\n%s\n", i, k, got[size_t(i) * n + k],
                       host[k] + float(i), p.describe().c_str());
          std::abort();
        }
  }
  return 0;
}
