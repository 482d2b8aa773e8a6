// Several devices in one process: Device::cuda(i), Device::count, Device::index, Buffer::copy_from between
// any two devices, one Kernel launched from several host threads on their own devices. Without a GPU the
// CPU cases run and the GPU cases skip with the reason; with one GPU, the cases that need two say so.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "driver/backend.h"
#include "driver/cuda/cuda_driver.h"

using namespace weft;
using Catch::Matchers::Contains;

namespace {

std::vector<float> random_floats(size_t n) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
  std::vector<float> v(n);
  for (float& x : v) x = uniform(rng);
  return v;
}

// The GPUs this process can use, or an empty list with the reason printed.
std::vector<Device> gpus() {
  std::string why_not;
  if (!driver::cuda::cuda_available(&why_not)) {
    WARN("SKIPPED on the GPU: " << why_not);
    return {};
  }
  std::vector<Device> out;
  for (int i = 0; i < Device::count(BackendKind::cuda); ++i) out.push_back(Device::cuda(i));
  return out;
}

// y = a x + y, in blocks of 256.
Kernel make_saxpy() {
  return Kernel("devices_saxpy", [](Ptr<float> x, Ptr<float> y, Float a, Int n) {
    Int i = program_id(0) * 256 + arange(0, 256);
    Bool in = i < n;
    store(y + i, load(x + i, in, 0.f) * a + load(y + i, in, 0.f), in);
  });
}

}  // namespace

TEST_CASE("Device::count and Device::index for the CPU and a missing backend", "[devices]") {
  CHECK(Device::count(BackendKind::cpu) == 1);
  CHECK(Device::count(BackendKind::hip) == 0);
  CHECK(Device::cpu().index() == 0);
  std::string why_not;
  if (!driver::cuda::cuda_available(&why_not)) {
    CHECK(Device::count(BackendKind::cuda) == 0);
    int line = __LINE__ + 1;
    auto no_gpu = [] { return Device::cuda(0); };
    try {
      (void)no_gpu();
      FAIL("Device::cuda(0) without a driver returned a device");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Contains("Device::cuda(0): ") && Contains(why_not));
      CHECK(e.where().line == static_cast<unsigned>(line));
    }
  }
  int line = __LINE__ + 2;
  try {
    (void)Device::cuda(-1);
    FAIL("Device::cuda(-1) returned a device");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("Device::cuda(-1): device indices start at 0"));
    CHECK(e.where().line == static_cast<unsigned>(line));
  }
}

TEST_CASE("Buffer::copy_from copies between buffers of the CPU backend", "[devices]") {
  Device cpu = Device::cpu();
  std::vector<float> x = random_floats(1000);
  Buffer<float> src = cpu.upload(x);
  Buffer<float> dst = cpu.upload(std::vector<float>(x.size(), std::nanf("")));
  dst.copy_from(src);
  CHECK(dst.download() == x);
  Buffer<float> empty, also_empty = cpu.alloc<float>(0);
  empty.copy_from(also_empty);  // nothing to copy: fine
  int line = __LINE__ + 2;
  try {
    dst.copy_from(cpu.alloc<float>(999));
    FAIL("a copy between buffers of different sizes went through");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("Buffer::copy_from: the source holds 999 elements but this buffer holds 1000"));
    CHECK(e.where().line == static_cast<unsigned>(line));
  }
}

TEST_CASE("Device::cuda(i) is one device per index with its own name and index", "[gpu][devices]") {
  std::vector<Device> all = gpus();
  if (all.empty()) return;
  for (int i = 0; i < static_cast<int>(all.size()); ++i) {
    CHECK(all[i].index() == i);
    CHECK(all[i] == Device::cuda(i));
    CHECK(all[i].kind() == BackendKind::cuda);
    CHECK_THAT(all[i].name(), Contains("cuda:" + std::to_string(i)));
  }
  const int count = static_cast<int>(all.size());
  int line = __LINE__ + 2;
  try {
    (void)Device::cuda(count);
    FAIL("Device::cuda(count) returned a device");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("Device::cuda(" + std::to_string(count) + "): CUDA device " + std::to_string(count) +
                                  " does not exist"));
    CHECK(e.where().line == static_cast<unsigned>(line));
  }
}

TEST_CASE("Buffer::copy_from between the CPU, one GPU and every other GPU", "[gpu][devices]") {
  std::vector<Device> all = gpus();
  if (all.empty()) return;
  std::vector<float> x = random_floats(3 * 1024 * 1024 + 5);  // 12 MB and a tail
  Buffer<float> host_src = Device::cpu().upload(x);
  // CPU -> GPU 0 -> GPU 0 (another buffer) -> each other GPU in turn -> CPU.
  Buffer<float> on0 = all[0].alloc<float>(x.size());
  on0.copy_from(host_src);
  Buffer<float> again0 = all[0].upload(std::vector<float>(x.size(), std::nanf("")));
  again0.copy_from(on0);
  Buffer<float> last = again0;
  for (size_t i = 1; i < all.size(); ++i) {
    Buffer<float> next = all[i].upload(std::vector<float>(x.size(), std::nanf("")));
    next.copy_from(last);
    last = next;
  }
  if (all.size() < 2) WARN("one GPU: the copy between two GPUs (cuMemcpyPeer) is not tested");
  Buffer<float> back = Device::cpu().upload(std::vector<float>(x.size(), std::nanf("")));
  back.copy_from(last);
  CHECK(back.download() == x);
  CHECK(again0.download() == x);
}

TEST_CASE("one Kernel launched from two host threads at once, each on its own device", "[gpu][devices]") {
  std::vector<Device> all = gpus();
  if (all.empty()) return;
  if (all.size() < 2) WARN("one GPU: both threads drive GPU 0 (each on its own stream); two GPUs are not tested");
  Kernel saxpy = make_saxpy();
  const int n = 1 << 20, rounds = 20;
  std::vector<float> x = random_floats(n), y0 = random_floats(n);
  std::vector<std::vector<float>> results(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      try {
        Device dev = all[t % all.size()];
        Stream stream = dev.stream();
        Buffer<float> dx = dev.upload(x), dy = dev.upload(y0);
        for (int r = 0; r < rounds; ++r) saxpy.launch(stream, Grid((n + 255) / 256), dx, dy, 0.5f + t, n);
        stream.synchronize();
        results[t] = dy.download();
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 2; ++t) {
    INFO("thread " << t << ": " << errors[t]);
    REQUIRE(errors[t].empty());
    // The same sums in the same order as the device: y = a x + y, `rounds` times, in float.
    const float a = 0.5f + t;
    int wrong = 0;
    for (int i = 0; i < n; ++i) {
      float want = y0[i];
      for (int r = 0; r < rounds; ++r) want = std::fma(x[i], a, want);
      float got = results[t][i];
      if (!(std::abs(got - want) <= 1e-5f * (std::abs(want) + 8.0f * rounds))) ++wrong;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("buffers of two GPUs in one launch are an Error naming both devices", "[gpu][devices]") {
  std::vector<Device> all = gpus();
  if (all.empty()) return;
  if (all.size() < 2) {
    WARN("SKIPPED: one GPU; this needs two");
    return;
  }
  Kernel saxpy = make_saxpy();
  Buffer<float> x = all[0].upload(random_floats(256)), y = all[1].upload(random_floats(256));
  int line = __LINE__ + 2;
  try {
    saxpy.launch(all[1].stream(), Grid(1), x, y, 2.0f, 256);
    FAIL("a launch on GPU 1 with a buffer of GPU 0 went through");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("argument 0 of kernel 'devices_saxpy' is a buffer on cuda:0") &&
                             Contains("launched on cuda:1"));
    CHECK(e.where().line == static_cast<unsigned>(line));
  }
}
