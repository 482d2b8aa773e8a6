// The unit tests' main. The same binary also runs the op suite on the GPU (ctest label gpu, with
// WEFT_BACKEND=cuda): there, without a usable CUDA device, it prints why and exits with 77, which ctest
// reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "driver/cuda/cuda_driver.h"

// test_exit_order.cpp's child (weak: builds with a subset of the test files, WEFT_UNIT_TESTS_ONLY, lack it).
__attribute__((weak)) int exit_order_child();

int main(int argc, char** argv) {
  // A child of the exit-order test: it runs before anything else touches a backend.
  if (std::getenv("WEFT_TEST_EXIT_ORDER_CHILD") && exit_order_child) return exit_order_child();
  // Every CPU load and store of the tests is checked against its allocation (README, "Bounds checks"): an
  // out-of-bounds access fails its test with the kernel's line instead of damaging the heap. The
  // environment may still say WEFT_CHECK_BOUNDS=0.
  setenv("WEFT_CHECK_BOUNDS", "1", /*overwrite=*/0);
  // Every lowered LLVM module goes through LLVM's verifier (off by default in release builds): a lowering that
  // makes invalid IR fails its test with an InternalError.
  setenv("WEFT_VERIFY_LLVM", "1", /*overwrite=*/0);
  const char* backend = std::getenv("WEFT_BACKEND");
  if (backend && std::string(backend) == "cuda") {
    std::string why;
    if (!weft::driver::cuda::cuda_available(&why)) {
      std::printf("SKIPPED: WEFT_BACKEND=cuda but there is no usable CUDA GPU: %s\n", why.c_str());
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
