// The CUDA driver layer and backend. The untagged cases run on any machine (where there is no driver they
// check that asking for CUDA is a clear Error); the [gpu] cases need an NVIDIA GPU and report SKIPPED
// without one. They run hand-written PTX, so they do not depend on the NVPTX code generator.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "driver/backend.h"
#include "driver/cuda/cuda_driver.h"
#include "support/env.h"

using namespace weft;
using namespace weft::driver::cuda;
using Catch::Matchers::Contains;

namespace {

// y[i] = x[i] * 2 + 1 for i < n. Every parameter is a .u64, as weft passes them.
constexpr const char* kScaleAddPtx = R"(.version 8.5
.target sm_90
.address_size 64

.visible .entry scale_add(.param .u64 x_param, .param .u64 y_param, .param .u64 n_param)
{
  .reg .pred %p<2>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<9>;
  .reg .f32 %f<3>;

  ld.param.u64 %rd1, [x_param];
  ld.param.u64 %rd2, [y_param];
  ld.param.u64 %rd3, [n_param];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.wide.u32 %rd4, %r1, %r2, 0;
  cvt.u64.u32 %rd5, %r3;
  add.s64 %rd4, %rd4, %rd5;
  setp.ge.u64 %p1, %rd4, %rd3;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd6, %rd1;
  cvta.to.global.u64 %rd7, %rd2;
  shl.b64 %rd8, %rd4, 2;
  add.s64 %rd6, %rd6, %rd8;
  add.s64 %rd7, %rd7, %rd8;
  ld.global.f32 %f1, [%rd6];
  fma.rn.f32 %f2, %f1, 0f40000000, 0f3F800000;
  st.global.f32 [%rd7], %f2;
DONE:
  ret;
}
)";

// Line 6 names no instruction: the driver's compiler must say so in its error log.
constexpr const char* kBrokenPtx = R"(.version 8.5
.target sm_90
.address_size 64
.visible .entry broken()
{
  weft_not_an_instruction.u32 %r1;
  ret;
}
)";

constexpr int kThreads = 128;

// False (after a SKIPPED warning) when this machine cannot run CUDA.
bool have_gpu() {
  std::string why_not;
  if (cuda_available(&why_not)) return true;
  WARN("SKIPPED: " << why_not);
  return false;
}

detail::Backend& cuda_backend() {
  std::string why_not;
  detail::Backend* backend = detail::cuda_backend_or_null(&why_not);
  INFO(why_not);
  REQUIRE(backend != nullptr);
  return *backend;
}

std::shared_ptr<CudaKernel> load_scale_add(const CudaDevice& device, int64_t shared_bytes = 0) {
  codegen::nvptx::PtxKernel ptx{kScaleAddPtx, "scale_add", kThreads, shared_bytes};
  return load_cuda_kernel("scale_add", ptx, device);
}

std::vector<float> random_floats(size_t n) {
  std::mt19937 rng{std::random_device{}()};
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Two device arrays of n floats: x filled with fresh random data, y poisoned with NaN bytes.
struct ScaleAddData {
  ScaleAddData(detail::Backend& backend, size_t count) : b(backend), n(count), x_host(random_floats(count)) {
    x = b.allocate(n * sizeof(float));
    y = b.allocate(n * sizeof(float));
    refresh();
  }
  ~ScaleAddData() {
    b.release(x);
    b.release(y);
  }
  void refresh() {
    x_host = random_floats(n);
    b.copy_to_device(x, x_host.data(), n * sizeof(float));
    std::vector<unsigned char> poison(n * sizeof(float), 0xFF);
    b.copy_to_device(y, poison.data(), poison.size());
  }
  std::vector<uint64_t> args() const { return {reinterpret_cast<uint64_t>(x), reinterpret_cast<uint64_t>(y), n}; }
  detail::LaunchDims grid() const { return {static_cast<int64_t>((n + kThreads - 1) / kThreads), 1, 1}; }
  // Compares y with a CPU loop, bit for bit (x * 2 is exact, so fma and multiply-add agree).
  void check_result() const {
    std::vector<float> y_host(n);
    b.copy_to_host(y_host.data(), y, n * sizeof(float));
    size_t wrong = 0, first_wrong = n;
    for (size_t i = 0; i < n; ++i) {
      const float expected = std::fma(x_host[i], 2.0f, 1.0f);
      if (std::memcmp(&y_host[i], &expected, sizeof(float)) != 0) {
        if (first_wrong == n) first_wrong = i;
        ++wrong;
      }
    }
    INFO("first wrong element: " << first_wrong << " of " << n);
    CHECK(wrong == 0);
  }

  detail::Backend& b;
  size_t n;
  std::vector<float> x_host;
  void* x = nullptr;
  void* y = nullptr;
};

}  // namespace

TEST_CASE("a missing CUDA driver library is a clear Error") {
  std::string why_not;
  CHECK(open_cuda_driver("libweft_no_such_driver.so.1", &why_not) == nullptr);
  CHECK_THAT(why_not, Contains("no CUDA driver: dlopen(libweft_no_such_driver.so.1) failed: "));
  CHECK_THAT(why_not, Contains("use WEFT_BACKEND=cpu or install the NVIDIA driver"));
}

TEST_CASE("a library that is not a CUDA driver is a clear Error") {
  std::string why_not;
  CHECK(open_cuda_driver("libm.so.6", &why_not) == nullptr);  // loads, but has none of the symbols
  CHECK_THAT(why_not, Contains("libm.so.6 is too old or not a CUDA driver: it lacks cuGetErrorName, "));
  CHECK_THAT(why_not, Contains(" more; update the NVIDIA driver or use WEFT_BACKEND=cpu"));
}

TEST_CASE("asking for the CUDA backend without a usable driver is a clear Error") {
  if (cuda_available()) {
    SUCCEED("this machine has a usable CUDA device; nothing to check");
    return;
  }
  std::string why_not;
  CHECK(detail::cuda_backend_or_null(&why_not) == nullptr);
  CHECK_FALSE(why_not.empty());
  const bool driver_installed = open_cuda_driver("libcuda.so.1", nullptr) != nullptr;
  if (!driver_installed) {
    CHECK_THAT(why_not, Contains("libcuda.so.1") && Contains("WEFT_BACKEND=cpu"));
    CHECK_THROWS_WITH(cuda_driver(), Contains("libcuda.so.1"));
  }
  // What Device::best() does depends on WEFT_BACKEND, read once at start-up.
  const std::string& requested = support::knobs().backend;
  if (requested.empty()) CHECK(Device::best().kind() == BackendKind::cpu);
  if (requested == "cuda") CHECK_THROWS_WITH(Device::best(), Contains(why_not));
}

TEST_CASE("CUDA errors name the call, the driver's error and what it concerned") {
  try {
    throw_cuda_error(CUDA_ERROR_ILLEGAL_ADDRESS, "cuLaunchKernel", "kernel 'softmax'");
  } catch (const Error& e) {
    std::string message = e.what();
    CHECK_THAT(message, Contains("cuLaunchKernel failed for kernel 'softmax': "));
    // The name comes from the driver when there is one.
    CHECK_THAT(message, Contains(cuda_available() ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUresult 700"));
    CHECK_THAT(message, Contains("CUDA_LAUNCH_BLOCKING=1"));
    return;
  }
  FAIL("throw_cuda_error did not throw");
}

TEST_CASE("cuda_version_string reads cuDriverGetVersion's numbers") {
  CHECK(cuda_version_string(12080) == "CUDA 12.8");
  CHECK(cuda_version_string(13000) == "CUDA 13.0");
}

TEST_CASE("hand-written PTX runs through the CUDA backend", "[gpu]") {
  if (!have_gpu()) return;
  detail::Backend& backend = cuda_backend();
  CHECK(backend.kind() == BackendKind::cuda);
  CHECK_THAT(backend.name(), Contains("cuda:"));
  CudaDevice device(support::knobs().cuda_device);
  auto kernel = load_scale_add(device);
  CHECK_FALSE(kernel->ptx.empty());
  INFO("ptxas: " << kernel->module->jit_log());

  ScaleAddData data(backend, 100003);  // not a multiple of the block size
  backend.launch(*kernel, data.grid(), data.args(), nullptr);
  backend.synchronize(nullptr);
  data.check_result();

  SECTION("on a user's stream") {
    CUstream stream = nullptr;
    check(cuda_driver().cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", "the test");
    data.refresh();
    backend.launch(*kernel, data.grid(), data.args(), stream);
    backend.synchronize(stream);
    data.check_result();
    check(cuda_driver().cuStreamDestroy(stream), "cuStreamDestroy", "the test");
  }
}

TEST_CASE("a kernel can ask for more than 48 KiB of shared memory, up to the device's limit", "[gpu]") {
  if (!have_gpu()) return;
  detail::Backend& backend = cuda_backend();
  CudaDevice device(support::knobs().cuda_device);
  const int optin = device.shared_bytes_per_block_optin();
  REQUIRE(optin > 48 * 1024);

  auto kernel = load_scale_add(device, optin);  // launches fail unless the limit was raised
  CHECK(kernel->shared_bytes == static_cast<unsigned>(optin));
  ScaleAddData data(backend, 5000);
  backend.launch(*kernel, data.grid(), data.args(), nullptr);
  backend.synchronize(nullptr);
  data.check_result();

  const std::string needed = std::to_string(optin + 16);
  CHECK_THROWS_WITH(load_scale_add(device, optin + 16),
                    Contains("kernel 'scale_add'") && Contains(needed) && Contains(std::to_string(optin)));
}

TEST_CASE("a kernel launch can be captured into a CUDA graph", "[gpu]") {
  if (!have_gpu()) return;
  const CudaDriver& driver = cuda_driver();
  if (!driver.cuStreamBeginCapture || !driver.cuGraphInstantiateWithFlags) {
    WARN("SKIPPED: this CUDA driver has no stream capture");
    return;
  }
  detail::Backend& backend = cuda_backend();
  CudaDevice device(support::knobs().cuda_device);
  auto kernel = load_scale_add(device);
  ScaleAddData data(backend, 70001);

  CUstream stream = nullptr;
  check(driver.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate", "the test");
  check(driver.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture", "the test");
  backend.launch(*kernel, data.grid(), data.args(), stream);
  CUgraph graph = nullptr;
  check(driver.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture", "the test");
  CUgraphExec exec = nullptr;
  check(driver.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags", "the test");

  // Capturing ran nothing; the graph must do the work, on new data.
  data.refresh();
  backend.synchronize(nullptr);
  check(driver.cuGraphLaunch(exec, stream), "cuGraphLaunch", "the test");
  backend.synchronize(stream);
  data.check_result();

  check(driver.cuGraphExecDestroy(exec), "cuGraphExecDestroy", "the test");
  check(driver.cuGraphDestroy(graph), "cuGraphDestroy", "the test");
  check(driver.cuStreamDestroy(stream), "cuStreamDestroy", "the test");
}

TEST_CASE("bad PTX is an Error carrying the driver's error log", "[gpu]") {
  if (!have_gpu()) return;
  CudaDevice device(support::knobs().cuda_device);
  device.make_current();
  try {
    CudaModule module(kBrokenPtx, device, "kernel 'broken'");
  } catch (const Error& e) {
    std::string message = e.what();
    INFO(message);
    CHECK_THAT(message, Contains("kernel 'broken'"));
    CHECK_THAT(message, Contains("error log of the driver's PTX compiler"));
    CHECK_THAT(message, !Contains("(empty)"));
    CHECK_THAT(message, Contains("weft_not_an_instruction"));  // quoted by ptxas: the log made it through
    return;
  }
  FAIL("the driver accepted broken PTX");
}

// Warp groups that trade registers: setmaxnreg only does something when ptxas compiles the module as a whole
// program. (The driver's linker, cuLink*, compiles as relocatable code: it ignores setmaxnreg and serializes
// wgmma, and says so in its log.) Compiled here, never launched.
constexpr const char* kRegistersByRolePtx = R"(.version 8.0
.target sm_90a
.address_size 64
.visible .entry registers_by_role()
.maxntid 256
.minnctapersm 1
{
  .reg .b32 %r<2>;
  .reg .pred %p<2>;
  mov.u32 %r1, %tid.x;
  setp.lt.u32 %p1, %r1, 128;
  @%p1 bra LOW;
  setmaxnreg.inc.sync.aligned.u32 240;
  ret;
LOW:
  setmaxnreg.dec.sync.aligned.u32 24;
  ret;
}
)";

TEST_CASE("PTX is compiled as a whole program: setmaxnreg is kept", "[gpu]") {
  if (!have_gpu()) return;
  CudaDevice device(support::knobs().cuda_device);
  if (device.cc_major() != 9) {
    WARN("SKIPPED: setmaxnreg needs sm_90a; this is " << device.label());
    return;
  }
  // A comment of its own, so that the driver's cache of compiled PTX cannot answer (the log is then empty).
  std::string ptx = std::string(kRegistersByRolePtx) + "// " + std::to_string(std::random_device{}()) + " " +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "\n";
  CudaModule module(ptx, device, "kernel 'registers_by_role'");
  INFO("the driver's PTX compiler said:\n" << module.jit_log());
  CHECK_THAT(module.jit_log(), Contains("registers_by_role"));  // it compiled, and reported
  CHECK_THAT(module.jit_log(), !Contains("ignored"));
  CHECK_THAT(module.jit_log(), !Contains("Performance Loss"));
}

TEST_CASE("Device::best() picks the GPU when WEFT_BACKEND is unset", "[gpu]") {
  if (!have_gpu()) return;
  if (!support::knobs().backend.empty()) {
    WARN("SKIPPED: WEFT_BACKEND=" << support::knobs().backend << " overrides the choice");
    return;
  }
  Device best = Device::best();
  CHECK(best.kind() == BackendKind::cuda);
  CHECK_THAT(best.name(), Contains("cuda:"));
}
