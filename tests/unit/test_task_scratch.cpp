// Scratch shared memory (for exchanges between a group's threads: reductions, layout changes) is reserved
// per task, sized by what that task exchanges: a producer that exchanges nothing takes none.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <cmath>
#include <vector>

#include "driver/backend.h"

using namespace weft;

namespace {

// 188 KB of buffers; each consumer's row sums of a [64, 64] f32 tile exchange 18 KB through scratch, the
// producer exchanges nothing: 188 + 2 x 18 KB fits in 227 KB, one 18 KB area for every task replica
// (3 x 18) would not. `extra_kb` (a power of two) more of buffers make it too much for the GPU.
Kernel make_scratch_kernel(int extra_kb = 0) {
  return Kernel("scratch_per_task", [extra_kb](Ptr<float> x, Ptr<float> out) {
    auto a = local_alloc<float>({32768}, 1, "a"), b = local_alloc<float>({8192}, 1, "b");  // 128 + 32 KB
    auto c = local_alloc<float>({4096}, 1, "c"), d = local_alloc<float>({2048}, 1, "d");    // 16 + 8 KB
    auto e = local_alloc<float>({1024}, 1, "e");                                             // 4 KB
    if (extra_kb) local_alloc<float>({256 * extra_kb}, 1, "extra");
    auto ready = alloc_barriers(1, 1, "ready");
    async_tasks(
        task("producer", {.warps = 4}, [&] { barrier_arrive(ready[0]); }),
        task("consumer", {.warps = 4, .replicas = 2}, [&] {
          barrier_wait(ready[0], 0);
          Int row = expand_dims(arange(0, 64), 1), col = expand_dims(arange(0, 64), 0);
          Tile<float> t = load(x + row * 64 + col) * cast<float>(task_replica_id() + 1);
          store(out + task_replica_id() * 64 + arange(0, 64), sum(t, 1));
        }));
  });
}

}  // namespace

TEST_CASE("scratch shared memory is reserved per task, only where a task exchanges", "[async][scratch]") {
  Kernel k = make_scratch_kernel();
  std::string ptx = k.ptx();  // would throw "needs ... bytes of shared memory" with one area per replica
  CHECK(ptx.find("shfl.sync") != std::string::npos);
  Device dev = Device::current();
  std::vector<float> x(64 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * float(i)) + 0.25f;
  Buffer<float> dx = dev.upload(x), out = dev.upload(std::vector<float>(128, std::nanf("")));
  k.launch(dev.stream(), Grid(1), dx, out);
  std::vector<float> got = out.download();
  for (int rep = 0; rep < 2; ++rep)
    for (int i = 0; i < 64; ++i) {
      double want = 0;
      for (int j = 0; j < 64; ++j) want += double(x[i * 64 + j]) * (rep + 1);
      CHECK(std::abs(got[rep * 64 + i] - want) <= 1e-4 * (1 + std::abs(want)));
    }
}

// The CPU backend runs what the GPU runs, no more: with 16 KB more of buffers the buffers still fit (204 KB)
// but not with the consumers' scratch, and every backend says so at the launch, naming the exchanges.
TEST_CASE("a kernel whose buffers fit but whose exchanges do not is rejected on every backend", "[async][scratch]") {
  Kernel k = make_scratch_kernel(16);
  Device dev = Device::current();
  Buffer<float> dx = dev.upload(std::vector<float>(64 * 64, 1.f)), out = dev.upload(std::vector<float>(128, 0.f));
  CHECK_THROWS_WITH(k.launch(dev.stream(), Grid(1), dx, out),
                    Catch::Contains("bytes of shared memory per block") && Catch::Contains("exchanges between threads") &&
                        Catch::Contains("task 'consumer'"));
}
