// The access-pattern analysis (src/passes/access_patterns.h) that lets the GPU code generator use 16-byte
// accesses without run-time checks: what it proves must hold, and what does not hold must not be proven.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include "dsl/trace.h"
#include "passes/access_patterns.h"

using namespace weft;

namespace {

// Traces body(ptr, stride) as a kernel (Ptr<float>, Int) whose parameters are marked multiples of 16 as
// `divisible` says, and returns the pattern of the pointer tile the body returns.
template <class Body> passes::AccessPattern pattern_of(uint64_t divisible, Body body) {
  std::vector<detail::ParamInfo> params = {{false, dtype_of<Pointer<float>>}, {false, dtype_of<int32_t>}};
  detail::NodeRef result;
  auto f = dsl::trace_kernel(
      "patterns", params,
      [&](const detail::TraceInputs& in) {
        Ptr<float> ptrs = body(Ptr<float>(in.values[0]), Int(in.values[1]));
        result = ptrs.node();
        store(ptrs, 1.0f);
      },
      std::vector<detail::KernelArg>(2), divisible, SourceLoc::current());
  return passes::AccessPatterns(*f).of(result.get());
}

// The same for the mask the body returns (the kernel stores through x + arange(0, 64) under it).
template <class Body> passes::AccessPattern mask_pattern_of(uint64_t divisible, Body body) {
  std::vector<detail::ParamInfo> params = {{false, dtype_of<Pointer<float>>}, {false, dtype_of<int32_t>}};
  detail::NodeRef result;
  auto f = dsl::trace_kernel(
      "masks", params,
      [&](const detail::TraceInputs& in) {
        Bool mask = body(Int(in.values[1]));
        result = mask.node();
        store(Ptr<float>(in.values[0]) + arange(0, 64), 1.0f, mask);
      },
      std::vector<detail::KernelArg>(2), divisible, SourceLoc::current());
  return passes::AccessPatterns(*f).of(result.get());
}

}  // namespace

TEST_CASE("a block of consecutive elements from an aligned pointer is proven contiguous and aligned", "[passes]") {
  auto p = pattern_of(0b11, [](Ptr<float> x, Int) { return x + program_id(0) * 128 + arange(0, 128); });
  CHECK(p.contiguity == 128);
  CHECK(p.divisor % 16 == 0);  // bytes: a multiple of 128 floats past a 16-byte-aligned address
  auto unaligned = pattern_of(0b10, [](Ptr<float> x, Int) { return x + program_id(0) * 128 + arange(0, 128); });
  CHECK(unaligned.contiguity == 128);
  CHECK(unaligned.divisor % 16 != 0);  // the pointer itself may be misaligned
}

TEST_CASE("rows of a 2-D tile are aligned only when the row stride is a multiple of 16", "[passes]") {
  auto rows = [](Ptr<float> x, Int stride) {
    return x + expand_dims(arange(0, 8), 1) * stride + expand_dims(arange(0, 16), 0);
  };
  auto any_stride = pattern_of(0b01, rows);  // stride not known to be a multiple of 16
  CHECK(any_stride.contiguity == 16);
  CHECK(any_stride.divisor % 16 != 0);
  auto stride16 = pattern_of(0b11, rows);
  CHECK(stride16.contiguity == 16);
  CHECK(stride16.divisor % 16 == 0);
}

TEST_CASE("scaled or permuted indices are not consecutive, and only run starts carry the divisor", "[passes]") {
  auto scaled = pattern_of(0b11, [](Ptr<float> x, Int) { return x + arange(0, 64) * 2; });
  CHECK(scaled.contiguity == 1);
  CHECK(scaled.divisor <= 8);  // element i is at 8 i bytes: nothing more than 8 divides them all
  auto transposed = pattern_of(0b11, [](Ptr<float> x, Int) {
    return x + trans(expand_dims(arange(0, 8), 1) * 16 + expand_dims(arange(0, 16), 0));
  });
  CHECK(transposed.contiguity == 1);
  auto shifted = pattern_of(0b11, [](Ptr<float> x, Int) { return x + arange(0, 64) + 3; });
  CHECK(shifted.contiguity == 64);
  CHECK(shifted.divisor == 4);  // 3 floats past an aligned address
}

TEST_CASE("a mask cols < n holds one value per chunk only when n is a multiple of the chunk", "[passes]") {
  auto lt = [](Int n) { return arange(0, 64) < n; };
  CHECK(mask_pattern_of(0b11, lt).constancy == 16);  // n a multiple of 16: switches only at multiples of 16
  CHECK(mask_pattern_of(0b01, lt).constancy == 1);   // any n: any element may be the last one in
  CHECK(mask_pattern_of(0b11, [](Int n) { return n > arange(0, 64); }).constancy == 16);  // the mirrored form
  CHECK(mask_pattern_of(0b11, [](Int n) { return arange(0, 64) >= n; }).constancy == 16);
  // <= and > switch one element past the multiple: 15 < 16 is true, 16 < 16 false, but 16 <= 16 true.
  CHECK(mask_pattern_of(0b11, [](Int n) { return arange(0, 64) <= n; }).constancy == 1);
  CHECK(mask_pattern_of(0b11, [](Int n) { return arange(0, 64) > n; }).constancy == 1);
  CHECK(mask_pattern_of(0b11, [](Int n) { return arange(0, 64) + 8 < n; }).constancy == 8);  // runs start at 8
  CHECK(mask_pattern_of(0b11, [](Int n) { return arange(0, 64) == n; }).constancy == 1);
  // Combined with a value that is the same everywhere, the mask keeps its chunks.
  CHECK(mask_pattern_of(0b11, [](Int n) { return (arange(0, 64) < n) & (program_id(0) < n); }).constancy == 16);
  CHECK(mask_pattern_of(0b11, [](Int n) { return (arange(0, 64) < n) & (arange(0, 64) < 33); }).constancy == 1);
}

TEST_CASE("a loop index is a multiple of what divides its start and step", "[passes]") {
  // The pattern of x + i + arange(0, 16) stored inside for_range(lo, 64, step).
  auto in_loop = [](int lo, int step) {
    std::vector<detail::ParamInfo> params = {{false, dtype_of<Pointer<float>>}, {false, dtype_of<int32_t>}};
    detail::NodeRef inside;
    auto f = dsl::trace_kernel(
        "loop", params,
        [&](const detail::TraceInputs& in) {
          Ptr<float> x(in.values[0]);
          for_range(lo, 64, step, [&](Int i) {
            Ptr<float> p = x + i + arange(0, 16);
            inside = p.node();
            store(p, 1.0f);
          });
        },
        std::vector<detail::KernelArg>(2), 0b11, SourceLoc::current());
    return passes::AccessPatterns(*f).of(inside.get());
  };
  auto p16 = in_loop(32, 16);
  CHECK(p16.contiguity == 16);
  CHECK(p16.divisor == 16);  // multiples of 16 floats past a 16-byte-aligned pointer
  CHECK(in_loop(0, 4).divisor == 16);  // multiples of 4 floats: 16 bytes
  CHECK(in_loop(6, 2).divisor == 8);
  CHECK(in_loop(8, 1).divisor == 4);  // any index: only the float's own size
}
