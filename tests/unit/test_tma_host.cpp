// weft::tma on the host (no GPU): every hardware rule of a TMA descriptor fails with a weft::Error at the
// caller's line that names the rule, the offending value and the fix, and lists every field; the default
// swizzle; what the CPU slot and the CUDA driver get; TensorDesc parameters in the printed IR, in the
// specialization and in launch-argument checking. Kernels run on the CPU backend, whatever WEFT_BACKEND says.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include <functional>
#include <string>
#include <vector>

#include "driver/backend.h"
#include "driver/cuda/cuda_tensor_map.h"
#include "driver/tma_descriptor.h"

using namespace weft;

namespace {

// Runs `fn`, which must throw a weft::Error located at `file:line` whose message contains each of
// `phrases` and lists the descriptor's fields when `fields` is set.
void require_error(const std::function<void()>& fn, const char* file, int line, const std::vector<std::string>& phrases,
                   bool fields = true) {
  try {
    fn();
  } catch (const weft::Error& e) {
    const std::string message = e.what();
    INFO("message: " << message);
    CHECK(message.find(std::string(file) + ":" + std::to_string(line)) != std::string::npos);
    CHECK(e.where().line == static_cast<unsigned>(line));
    for (const std::string& p : phrases) CHECK(message.find(p) != std::string::npos);
    if (fields)
      for (const char* field : {"element type", "rank", "shape", "strides", "box", "swizzle", "address", "buffer"})
        CHECK(message.find(std::string("\n  ") + field) != std::string::npos);
    return;
  }
  FAIL("expected a weft::Error at line " << line << ", but nothing was thrown");
}

// `expr` must throw at this line; keep each use on one line (a macro's line is where its invocation ends).
#define REQUIRE_TMA_ERROR(expr, ...) require_error([&] { (void)(expr); }, __FILE__, __LINE__, {__VA_ARGS__})
#define REQUIRE_LAUNCH_ERROR(expr, ...) require_error([&] { (void)(expr); }, __FILE__, __LINE__, {__VA_ARGS__}, false)

Device cpu() { return Device::cpu(); }

}  // namespace

// ---- the rules ----------------------------------------------------------------------------------------

TEST_CASE("tma: each rule of the element type, rank and shape fails clearly", "[tma][cpu-only]") {
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  Buffer<bool> flags = cpu().alloc<bool>(64);
  REQUIRE_TMA_ERROR(tma(flags, {64}, {16}), "rule \"element type\"", "the element type is i1", "bool as int8_t");
  REQUIRE_TMA_ERROR(tma(a, {2, 2, 2, 2, 2, 2}, {2, 2, 2, 2, 2, 2}), "rule \"rank 1 to 5\"", "has 6 dimensions", "merge neighbouring dimensions");
  REQUIRE_TMA_ERROR(tma(a, {}, {}), "rule \"rank 1 to 5\"", "has 0 dimensions", "at least one dimension");
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {64}), "rule \"one box dimension per tensor dimension\"", "the box [64] has 1 dimensions", "give the box 2 dimensions");
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {8, 64}, {.strides = {64}}), "rule \"one stride per dimension\"", "has 1 entries", "give 2 strides");
  REQUIRE_TMA_ERROR(tma(a, {0, 64}, {8, 64}), "rule \"dimensions 1 to 2^32\"", "dimension 0 of the shape is 0", "skip the launch");
  REQUIRE_TMA_ERROR(tma(a, {1, (int64_t(1) << 32) + 1}, {1, 64}), "rule \"dimensions 1 to 2^32\"", "dimension 1 of the shape is 4294967297", "split the dimension");
}

TEST_CASE("tma: each rule of strides, address and buffer fails clearly", "[tma][cpu-only]") {
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {8, 64}, {.strides = {1, 64}}), "rule \"contiguous innermost dimension\"", "the innermost stride is 64 elements", "make the innermost stride 1");
  // Row-major rows of 60 bf16 are 120 bytes apart.
  REQUIRE_TMA_ERROR(tma(a, {64, 60}, {8, 32}), "rule \"strides multiples of 16 bytes\"", "stride 0 is 60 elements (120 bytes), not a multiple of 16", "(stride 0 = 64 instead of 60)");
  REQUIRE_TMA_ERROR(tma(a, {2, 64}, {2, 64}, {.strides = {0, 1}}), "rule \"strides multiples of 16 bytes\"", "stride 0 is 0 elements", "give positive strides");
  REQUIRE_TMA_ERROR(tma(a, {2, 64}, {2, 64}, {.strides = {int64_t(1) << 40, 1}}), "rule \"strides below 2^40 bytes\"", "stride 0 is 1099511627776 elements (2199023255552 bytes)", "one descriptor per part");
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {8, 64}, {.offset = 3}), "rule \"global address 16-byte aligned\"", "(the buffer + 3 elements = 6 bytes)", "a multiple of 8 elements of bf16");
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {8, 64}, {.offset = -8}), "rule \"tensor inside the buffer\"", "the offset is -8 elements", "at least 0");
  // 1024 x 128 elements do not fit in 65536.
  REQUIRE_TMA_ERROR(tma(a, {1024, 128}, {8, 64}), "rule \"tensor inside the buffer\"", "reaches element 131071 of the buffer but the buffer holds 65536 elements", "use a larger buffer");
  REQUIRE_TMA_ERROR(tma(a, {512, 128}, {8, 64}, {.offset = 8}), "rule \"tensor inside the buffer\"", "reaches element 65543", "131072 bytes on cpu");
  REQUIRE_TMA_ERROR(tma(Buffer<bf16>(), {8, 8}, {8, 8}), "rule \"tensor inside the buffer\"", "holds 0 elements", "no device (an empty Buffer)");
}

TEST_CASE("tma: each rule of the box and the swizzle fails clearly", "[tma][cpu-only]") {
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  REQUIRE_TMA_ERROR(tma(a, {512, 64}, {512, 64}), "rule \"box dimensions 1 to 256\"", "dimension 0 of the box is 512", "several copies");
  REQUIRE_TMA_ERROR(tma(a, {512, 64}, {0, 64}), "rule \"box dimensions 1 to 256\"", "dimension 0 of the box is 0");
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {8, 4}), "rule \"box inner dimension a multiple of 16 bytes\"", "4 elements of bf16 = 8 bytes", "a multiple of 8 elements (e.g. 8)");
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {8, 64}, {.swizzle = 48}), "rule \"swizzle 0, 32, 64 or 128 bytes\"", "the swizzle is 48", "use 0, 32, 64 or 128");
  REQUIRE_TMA_ERROR(tma(a, {64, 64}, {8, 64}, {.swizzle = 64}), "rule \"box inner dimension at most the swizzle span\"", "128 bytes (64 elements of bf16) but swizzle 64 spans 64 bytes", "use swizzle 128, or a box of at most 32 elements");
  REQUIRE_TMA_ERROR(tma(a, {64, 256}, {8, 128}, {.swizzle = 128}), "rule \"box inner dimension at most the swizzle span\"", "256 bytes", "use swizzle 0, or a box of at most 64 elements in the inner dimension with swizzle 128");
}

TEST_CASE("tma: the error lists every field with its value", "[tma][cpu-only]") {
  Buffer<float> x = cpu().alloc<float>(4096);
  try {
    tma(x, {16, 200}, {4, 36}, {.strides = {256, 1}, .offset = 64});  // reaches element 64 + 15 * 256 + 199
    FAIL("expected the rule \"tensor inside the buffer\" to fail");
  } catch (const Error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("rule \"tensor inside the buffer\" is broken: the tensor reaches element 4103 of the buffer but "
                 "the buffer holds 4096 elements") != std::string::npos);
    CHECK(m.find("\n  element type  f32 (4 bytes)\n") != std::string::npos);
    CHECK(m.find("\n  rank          2\n") != std::string::npos);
    CHECK(m.find("\n  shape         [16, 200]\n") != std::string::npos);
    CHECK(m.find("\n  strides       [256, 1] elements = [1024, 4] bytes\n") != std::string::npos);
    CHECK(m.find("\n  box           [4, 36] (inner dimension 144 bytes)\n") != std::string::npos);
    CHECK(m.find("\n  swizzle       0 bytes\n") != std::string::npos);
    CHECK(m.find(" + offset 64 elements\n") != std::string::npos);
    CHECK(m.find("\n  buffer        16384 bytes on cpu") != std::string::npos);
  }
}

// ---- what a valid descriptor holds ----------------------------------------------------------------------

TEST_CASE("tma: the default swizzle is the span the box's rows fill exactly, else none", "[tma][cpu-only]") {
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  Buffer<float> x = cpu().alloc<float>(1 << 14);
  CHECK(tma(a, {128, 256}, {64, 64}).swizzle() == 128);   // 128-byte rows
  CHECK(tma(a, {128, 256}, {64, 32}).swizzle() == 64);
  CHECK(tma(a, {128, 256}, {64, 16}).swizzle() == 32);
  CHECK(tma(a, {128, 256}, {64, 8}).swizzle() == 0);      // 16-byte rows
  CHECK(tma(a, {128, 256}, {64, 48}).swizzle() == 0);     // 96-byte rows fill no span
  CHECK(tma(a, {128, 256}, {16, 128}).swizzle() == 0);    // 256-byte rows: wider than any span
  CHECK(tma(x, {128, 128}, {64, 32}).swizzle() == 128);   // 32 f32
  CHECK(tma(a, {128, 256}, {64, 16}, {.swizzle = 128}).swizzle() == 128);  // asked: rows may be narrower
  CHECK(tma(a, {128, 256}, {64, 64}, {.swizzle = 0}).swizzle() == 0);
}

TEST_CASE("tma: fields, row-major strides and the CPU backend's TensorDescData", "[tma][cpu-only]") {
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  Tma<bf16> t = tma(a, {4, 8, 64}, {2, 4, 32}, {.offset = 16});
  CHECK(t.rank() == 3);
  CHECK(t.shape() == Shape{4, 8, 64});
  CHECK(t.strides() == std::vector<int64_t>{512, 64, 1});
  CHECK(t.box() == Shape{2, 4, 32});
  CHECK(t.swizzle() == 64);
  const detail::TensorDescData& c = t.descriptor().cpu;
  CHECK(c.base == static_cast<char*>(a.data()) + 32);
  CHECK(c.rank == 3);
  CHECK(c.element_bytes == 2);
  CHECK(c.dtype == ScalarType::bf16);
  CHECK(c.swizzle == 64);
  CHECK((c.dims[0] == 4 && c.dims[1] == 8 && c.dims[2] == 64 && c.dims[3] == 0));
  CHECK((c.strides[0] == 512 && c.strides[1] == 64 && c.strides[2] == 1));
  CHECK((c.box[0] == 2 && c.box[1] == 4 && c.box[2] == 32 && c.box[3] == 0));
  // A CPU kernel's slot for the descriptor is the address of that struct.
  CHECK(detail::cpu_backend().tensor_desc_slot(t.descriptor()) == reinterpret_cast<uint64_t>(&c));
  // Copies share the descriptor.
  Tma<bf16> copy = t;
  CHECK(&copy.descriptor() == &t.descriptor());
}

TEST_CASE("tma: the same arguments at the same line give the same descriptor back; anything else a new one",
          "[tma][cpu-only]") {
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 17), b = cpu().alloc<bf16>(1 << 17);
  auto make = [](const Buffer<bf16>& x, Shape shape, Shape box, TmaOptions options = {}) {
    return tma(x, shape, box, options);  // one line for every call: only the arguments differ
  };
  // A caller that makes its descriptors at every launch (gemm(), attention_fwd()) gets the checked and encoded
  // one of its previous call.
  const detail::TmaDescriptor* first = &make(a, {64, 1024}, {64, 64}).descriptor();
  for (int i = 0; i < 3; ++i) CHECK(&make(a, {64, 1024}, {64, 64}).descriptor() == first);
  CHECK(&make(b, {64, 1024}, {64, 64}).descriptor() != first);                       // another buffer
  CHECK(&make(a, {128, 512}, {64, 64}).descriptor() != first);                       // another shape
  CHECK(&make(a, {64, 1024}, {32, 64}).descriptor() != first);                       // another box
  CHECK(&make(a, {64, 1024}, {64, 64}, {.swizzle = 0}).descriptor() != first);       // another swizzle
  CHECK(&make(a, {64, 1024}, {64, 64}, {.offset = 64}).descriptor() != first);       // another offset
  CHECK(make(a, {64, 1024}, {64, 64}, {.offset = 64}).descriptor().cpu.base == static_cast<char*>(a.data()) + 128);
  CHECK(&tma(a, {64, 1024}, {64, 64}).descriptor() != first);  // another line: its errors name that line
  // Kept descriptors are a bounded few: after many others, the first is made anew (and equal in every field).
  for (int rows = 1; rows <= 300; ++rows) make(a, {rows, 64}, {1, 64});
  const Tma<bf16> again = make(a, {64, 1024}, {64, 64});
  CHECK(&again.descriptor() != first);
  CHECK(again.descriptor().cpu.base == a.data());
  CHECK(again.shape() == Shape{64, 1024});
  // Invalid arguments fail at every call, never from a kept descriptor.
  for (int i = 0; i < 2; ++i) CHECK_THROWS_AS(make(a, {64, 1024}, {64, 300}), Error);
}

TEST_CASE("tma: the arguments cuTensorMapEncodeTiled gets, innermost dimension first", "[tma][cpu-only]") {
  using namespace driver::cuda;
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  // Rows of 64 bf16 padded to 72 (144 bytes), 100 rows.
  Tma<bf16> t = tma(a, {100, 64}, {32, 64}, {.strides = {72, 1}});
  TensorMapArguments m = tensor_map_arguments(t.descriptor());
  CHECK(m.data_type == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
  CHECK(m.rank == 2);
  CHECK(m.global_address == a.data());
  CHECK((m.global_dims[0] == 64 && m.global_dims[1] == 100));
  CHECK(m.global_strides[0] == 144);
  CHECK((m.box_dims[0] == 64 && m.box_dims[1] == 32));
  CHECK((m.element_strides[0] == 1 && m.element_strides[1] == 1));
  CHECK(m.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE);
  CHECK(m.swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
  CHECK(m.oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);

  Buffer<int8_t> q = cpu().alloc<int8_t>(1 << 16);
  TensorMapArguments m3 = tensor_map_arguments(tma(q, {4, 16, 512}, {1, 8, 32}, {.offset = 32}).descriptor());
  CHECK(m3.data_type == CU_TENSOR_MAP_DATA_TYPE_UINT8);
  CHECK(m3.rank == 3);
  CHECK(m3.global_address == static_cast<char*>(q.data()) + 32);
  CHECK((m3.global_dims[0] == 512 && m3.global_dims[1] == 16 && m3.global_dims[2] == 4));
  CHECK((m3.global_strides[0] == 512 && m3.global_strides[1] == 8192));
  CHECK((m3.box_dims[0] == 32 && m3.box_dims[1] == 8 && m3.box_dims[2] == 1));
  CHECK(m3.swizzle == CU_TENSOR_MAP_SWIZZLE_32B);
  CHECK(m3.str().find("dims {512, 16, 4}, strides {512, 8192} bytes, box {32, 8, 1}") != std::string::npos);
}

// ---- TensorDesc parameters ------------------------------------------------------------------------------

TEST_CASE("a kernel with TensorDesc parameters prints each descriptor with its box and swizzle", "[tma][cpu-only]") {
  Kernel k("tma_params", [](TensorDesc<bf16> a, Ptr<int32_t> out, TensorDesc<float, 2> b) {
    store(out, full<int32_t>({}, static_cast<double>(a.box()[0] * 1000 + b.box()[1])));
  });
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  Buffer<float> x = cpu().alloc<float>(1 << 12);
  CHECK(k.ir(tma(a, {256, 256}, {128, 64}), tma(x, {64, 64}, {16, 32}, {.swizzle = 0})) ==
        R"(kernel @tma_params(%0: tensordesc bf16[128x64] swizzle 128, %1: ptr<i32>, %2: tensordesc f32[16x32] swizzle 0) {
  %3 = constant 128032 : i32
  store %1, %3
}
)");
}

TEST_CASE("a kernel specializes on each descriptor's box and swizzle, not on its tensor", "[tma][cpu-only]") {
  int traces = 0;
  Kernel k("tma_spec", [&traces](TensorDesc<bf16> a, Ptr<int32_t> out) {
    ++traces;
    store(out, full<int32_t>({}, static_cast<double>(a.box()[0])));
  });
  Stream s = cpu().stream();
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16), b = cpu().alloc<bf16>(1 << 14);
  Buffer<int32_t> out = cpu().alloc<int32_t>(1);
  auto box_seen = [&] { return out.download()[0]; };

  k.launch(s, Grid(1), tma(a, {256, 256}, {16, 64}), out);
  CHECK(traces == 1);
  CHECK(box_seen() == 16);
  k.launch(s, Grid(1), tma(b, {63, 256}, {16, 64}, {.offset = 64}), out);  // another tensor, the same box
  CHECK(traces == 1);
  k.launch(s, Grid(1), tma(a, {256, 256}, {32, 64}), out);  // another box
  CHECK(traces == 2);
  CHECK(box_seen() == 32);
  k.launch(s, Grid(1), tma(a, {256, 256}, {16, 64}), out);  // the first again: memoized
  CHECK(traces == 2);
  CHECK(box_seen() == 16);
  k.launch(s, Grid(1), tma(a, {256, 256}, {16, 64}, {.swizzle = 0}), out);  // another swizzle
  CHECK(traces == 3);
  CHECK(box_seen() == 16);
  CHECK(k.ir(tma(a, {256, 256}, {32, 64})).find("(%0: tensordesc bf16[32x64] swizzle 128, %1: ptr<i32>)") !=
        std::string::npos);
}

TEST_CASE("launching with the wrong Tma fails clearly at the launch's line", "[tma][cpu-only]") {
  Kernel k("tma_args", [](TensorDesc<bf16, 2>, Ptr<float> out) { store(out, full<float>({}, 1.0)); });
  Stream s = cpu().stream();
  Buffer<bf16> a = cpu().alloc<bf16>(1 << 16);
  Buffer<float> x = cpu().alloc<float>(1 << 14);
  REQUIRE_LAUNCH_ERROR(k.launch(s, Grid(1), tma(x, {64, 64}, {8, 32}), x), "argument 0 of kernel tma_args(TensorDesc<bf16, 2>, Ptr<f32>) is a Tma of f32 of rank 2 (box [8, 32])", "make the Tma from a Buffer<bf16>");
  REQUIRE_LAUNCH_ERROR(k.launch(s, Grid(1), tma(a, {4, 64, 64}, {1, 8, 64}), x), "is a Tma of bf16 of rank 3", "describe the tensor with 2 dimensions, or declare the parameter TensorDesc<bf16, 3>");
  REQUIRE_LAUNCH_ERROR(k.launch(s, Grid(1), a, x), "argument 0 of kernel", "is a pointer to bf16", "pass weft::tma(buffer, shape, box) of a Buffer<bf16>");
  REQUIRE_LAUNCH_ERROR(k.launch(s, Grid(1), tma(a, {64, 64}, {8, 64}), tma(x, {64, 64}, {8, 32})), "argument 1 of kernel", "a Tma goes to a TensorDesc<T> parameter");
  // A buffer of another backend: one that compiles for a GPU without one (its memory is host memory).
  Device gpu_less = Device::from_backend(detail::compile_only_backend("sm_90a", "no GPU in this test"));
  Buffer<bf16> elsewhere = gpu_less.alloc<bf16>(1 << 12);
  REQUIRE_LAUNCH_ERROR(k.launch(s, Grid(1), tma(elsewhere, {64, 64}, {8, 64}), x), "argument 0 of kernel 'tma_args' is a Tma of a buffer on sm_90a", "but the kernel is launched on cpu", "allocated on the launching device");
}

TEST_CASE("Kernel::ir wants a Tma for each TensorDesc parameter", "[tma][cpu-only]") {
  const int line = __LINE__ + 1;
  Kernel k("tma_ir", [](TensorDesc<f16> a, Const<int> n) { (void)a; (void)n; });
  Buffer<f16> h = cpu().alloc<f16>(1 << 12);
  require_error([&] { k.ir(4); }, __FILE__, line, {"has 2 Const and TensorDesc parameters but Kernel::ir was given 1 values", "one Tma per TensorDesc parameter"}, false);
  require_error([&] { k.ir(4, tma(h, {64, 64}, {8, 64})); }, __FILE__, line, {"argument 0 of kernel tma_ir(TensorDesc<f16>, Const<i32>) is an integer"}, false);
  CHECK(k.ir(tma(h, {64, 64}, {8, 64}), 4) == "kernel @tma_ir(%0: tensordesc f16[8x64] swizzle 128) {\n}\n");
}
