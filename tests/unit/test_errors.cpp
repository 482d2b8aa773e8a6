// Errors of the front end and the verifier (raised while a kernel is traced) and of kernel launches.
// Every error must be a weft::Error that names the test's own line — the DSL call or the `.launch(`
// that is wrong — and says what is wrong.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include "error_checks.h"
#include "support/env.h"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>

using namespace weft;

namespace {


// A kernel with one pointer parameter whose body is `body` (which records the line of its faulty call).
template <class Body> Kernel body_kernel(Body body) {
  return Kernel("faulty", [body](Ptr<float> p) { body(p); });
}

}  // namespace


// ---- elementwise typing ---------------------------------------------------------------------------------

TEST_CASE("binary op on shapes that do not broadcast", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> a = zeros<float>({4}), b = zeros<float>({8});
    line = __LINE__; Tile<float> c = a + b;
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "do not broadcast");
}

TEST_CASE("2-D shapes that do not broadcast name the dimension", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> a = zeros<float>({4, 8}), b = zeros<float>({2, 8});
    line = __LINE__; Tile<float> c = a * b;
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "dimension 0 is 4 in one and 2 in the other");
}

TEST_CASE("store of f16 values through Ptr<float>", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float> p) {
    Tile<f16> h = full<f16>({}, 1.5);
    line = __LINE__; store(p, h);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "store of f16 values through ptr<f32> pointers");
  REQUIRE_WEFT_ERROR(k.ir(), line, "cast<f32>(value)");
}

TEST_CASE("load and store operands that do not fit the pointers' shape", "[errors]") {
  int line = 0;
  SECTION("a tile stored through a scalar pointer") {
    Kernel k = body_kernel([&](Ptr<float> p) { line = __LINE__; store(p, zeros<float>({8})); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "store: the value has shape [8] but the pointers have shape []");
    REQUIRE_WEFT_ERROR(k.ir(), line, "offset the pointers by a tile of offsets");
  }
  SECTION("a store mask of another length") {
    Kernel k = body_kernel([&](Ptr<float> p) {
      Int offs = arange(0, 8);
      line = __LINE__; store(p + offs, 1.f, arange(0, 4) < 2);
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "store: the mask has shape [4] but the pointers have shape [8]");
  }
  SECTION("a load mask of higher rank") {
    Kernel k = body_kernel([&](Ptr<float> p) {
      Bool mask = (arange(0, 8) < 3).reshape({1, 8});
      line = __LINE__; Tile<float> v = load(p + arange(0, 8), mask);
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "load: the mask has shape [1x8] but the pointers have shape [8]");
  }
}

TEST_CASE("where() with choices of different element types", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Bool c = arange(0, 8) < 4;
    Tile<float> a = zeros<float>({8});
    Tile<double> b = zeros<double>({8});
    line = __LINE__; Tile<float> w = where(c, a, b);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "different element types, f32 and f64");
}

TEST_CASE("float math on an integer tile", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Int i = arange(0, 16);
    line = __LINE__; Int e = exp(i);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "exp needs a floating-point tile, got i32[16]");
}

// ---- dot -----------------------------------------------------------------------------------------------

TEST_CASE("dot with mismatched inner dimensions", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> a = zeros<float>({16, 32}), b = zeros<float>({16, 16});
    line = __LINE__; Float c = dot(a, b);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "inner dimensions differ");
}

TEST_CASE("dot with operands of different element types", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<f16> a = zeros<f16>({16, 16});
    Tile<float> b = zeros<float>({16, 16});
    line = __LINE__; Float c = dot(a, b);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "a is f16 but b is f32");
}

TEST_CASE("dot with an accumulator of the wrong shape", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> a = zeros<float>({16, 8}), b = zeros<float>({8, 32}), acc = zeros<float>({16, 16});
    line = __LINE__; Float c = dot(a, b, acc);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "the accumulator is f32[16x16]");
  REQUIRE_WEFT_ERROR(k.ir(), line, "gives f32[16x32]");
}

TEST_CASE("dot of integer tiles", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Int a = zeros<int32_t>({16, 16});
    line = __LINE__; Float c = dot(a, a);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "dot takes f16, bf16 or f32 operands, got i32; convert them");
}

// ---- shapes --------------------------------------------------------------------------------------------

TEST_CASE("tile dimensions must be powers of two", "[errors]") {
  int line = 0;
  SECTION("zeros") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Tile<float> z = zeros<float>({3, 8}); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "dimension 0 of shape [3x8] is 3, not a power of two");
  }
  SECTION("arange") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Int r = arange(0, 100); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "arange(0, 100)");
    REQUIRE_WEFT_ERROR(k.ir(), line, "not a power of two");
  }
  SECTION("reshape target") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Tile<float> z = zeros<float>({4, 4});
      line = __LINE__; Tile<float> r = z.reshape({16, 1}).reshape({1, 16}).reshape({6});
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "reshape target: dimension 0 of shape [6] is 6");
  }
  SECTION("empty arange") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Int r = arange(8, 8); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the end must be greater than the start");
  }
}

TEST_CASE("reshape to a different element count", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> z = zeros<float>({4, 8});
    line = __LINE__; Tile<float> r = reshape(z, {16});
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "cannot reshape [4x8] (32 elements) to [16] (16 elements)");
}

TEST_CASE("broadcast to a shape that does not fit", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> z = zeros<float>({4, 8});
    line = __LINE__; Tile<float> r = z.broadcast_to({8, 8});
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "do not broadcast");
}

TEST_CASE("reduction axis out of range", "[errors]") {
  int line = 0;
  SECTION("positive") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Tile<float> z = zeros<float>({4, 8});
      line = __LINE__; Tile<float> s = sum(z, 2);
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "axis 2 is out of range for a tile of rank 2; use an axis in [-2, 1]");
  }
  SECTION("negative") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Tile<float> z = zeros<float>({4, 8});
      line = __LINE__; Int s = argmax(z, -3);
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "axis -3 is out of range");
  }
  SECTION("scalar") {
    Kernel k = body_kernel([&](Ptr<float> p) {
      Tile<float> x = load(p);
      line = __LINE__; Tile<float> s = max(x, 0);
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "cannot reduce a scalar");
  }
}

TEST_CASE("expand_dims axis out of range", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> z = zeros<float>({8});
    Tile<float> ok = z.expand_dims(-1);  // [8x1]
    line = __LINE__; Tile<float> bad = expand_dims(ok, 3);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "expand_dims: axis 3 is out of range for a tile of rank 2; use an axis in [-3, 2]");
}

TEST_CASE("permute with a bad permutation", "[errors]") {
  int line = 0;
  SECTION("repeated axis") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Tile<float> z = zeros<float>({4, 8});
      line = __LINE__; Tile<float> t = permute(z, {0, 0});
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the permutation [0, 0] must list each axis 0..1");
  }
  SECTION("wrong length") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Tile<float> z = zeros<float>({4, 8, 2});
      line = __LINE__; Tile<float> t = z.trans();
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the permutation [1, 0] must list each axis 0..2");
  }
}

// ---- grid and constants --------------------------------------------------------------------------------

TEST_CASE("program_id and num_programs of a missing axis", "[errors]") {
  int line = 0;
  SECTION("program_id(3)") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Int i = program_id(3); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "program_id: axis 3 does not exist; the grid has axes 0, 1 and 2");
  }
  SECTION("num_programs(-1)") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Int n = num_programs(-1); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "num_programs: axis -1 does not exist");
  }
}

TEST_CASE("constants that do not fit their type", "[errors]") {
  int line = 0;
  SECTION("int8 out of range") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Tile<int8_t> c = full<int8_t>({4}, 300); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the constant 300 does not fit in i8 (range -128 to 127)");
  }
  SECTION("a literal operand of an int16 tile") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Tile<int16_t> t = zeros<int16_t>({4});
      line = __LINE__; Tile<int16_t> u = t + 40000;
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "does not fit in i16");
  }
  SECTION("a fraction as an integer") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Int c = scalar<int32_t>(2.5); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the constant 2.5 is not a whole number but its type is i32");
  }
  SECTION("int64 past 2^63") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Long c = full<int64_t>({2}, 1e19); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the constant 1e+19 does not fit in i64");
  }
  SECTION("bool") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Bool c = full<bool>({2}, 2); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "does not fit in i1");
  }
  SECTION("an unsigned literal past INT64_MAX") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Long c = full<int64_t>({2}, uint64_t(1) << 63); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "does not fit in i64");
  }
  SECTION("int32 one past its top, given exactly") {
    Kernel k = body_kernel([&](Ptr<float>) { line = __LINE__; Int c = scalar<int32_t>(int64_t(INT32_MAX) + 1); });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the constant 2147483648 does not fit in i32 (range -2147483648 to 2147483647)");
  }
}

// ---- control flow and variables ------------------------------------------------------------------------

TEST_CASE("a Var assigned a value of another shape in a loop", "[errors]") {
  int line = 0, decl = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    decl = __LINE__; Var<float> acc = zeros<float>({8});
    for_range(0, 4, [&](Int) {
      line = __LINE__; acc = zeros<float>({16});
    });
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "changes the type of a Var declared as f32[8]");
  REQUIRE_WEFT_ERROR(k.ir(), line, "the new value is f32[16]");
  // The message also names where the Var was declared.
  REQUIRE_WEFT_ERROR(k.ir(), line, std::string(__FILE__) + ":" + std::to_string(decl));
}

TEST_CASE("a value made in a for_range body used after the loop", "[errors]") {
  int line = 0, made = 0;
  Kernel k = body_kernel([&](Ptr<float> p) {
    Tile<float> inner;
    for_range(0, 4, [&](Int i) {
      made = __LINE__; inner = cast<float>(i);
    });
    line = __LINE__; store(p, inner);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "inside a for_range or if_ body that has already ended");
  REQUIRE_WEFT_ERROR(k.ir(), line, "declare a Var before it");
  REQUIRE_WEFT_ERROR(k.ir(), line, "made at " + std::string(__FILE__) + ":" + std::to_string(made));
}

TEST_CASE("a loop index used after its loop", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float> p) {
    Int index;
    for_range(0, 4, [&](Int i) { index = i; });
    line = __LINE__; store(p + index, 1.f);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "has already ended");
}

TEST_CASE("a value made in an if_ body used in the else body", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float> p) {
    Tile<float> then_value;
    if_(program_id() == 0, [&] { then_value = load(p); }, [&] {
      line = __LINE__; store(p, then_value + 1.f);
    });
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "has already ended");
}

TEST_CASE("control flow with malformed conditions and bounds", "[errors]") {
  int line = 0;
  SECTION("if_ on a tile") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Bool c = arange(0, 4) < 2;
      line = __LINE__; if_(c, [] {});
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "if: the condition must be a scalar (rank 0), got i1[4]");
  }
  SECTION("for_range over a tile") {
    Kernel k = body_kernel([&](Ptr<float>) {
      line = __LINE__; for_range(0, arange(0, 4), [](Int) {});
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "the end must be a scalar (rank 0), got i32[4]");
  }
  SECTION("for_range with an i64 bound") {
    Kernel k = body_kernel([&](Ptr<float>) {
      Long n = scalar<int64_t>(8);
      line = __LINE__; for_range(0, n, [](Int) {});
    });
    REQUIRE_WEFT_ERROR(k.ir(), line, "bounds and step must be i32, got i64; convert it with cast<int32_t>");
  }
}

TEST_CASE("using an empty Tile handle", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Tile<float> nothing;
    line = __LINE__; Tile<float> y = nothing * 2.f;
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "this Tile is empty");
}

TEST_CASE("DSL calls outside any kernel", "[errors]") {
  int line = 0;
  SECTION("program_id") {
    line = __LINE__; REQUIRE_WEFT_ERROR(program_id(), line, "outside a kernel body");
  }
  SECTION("zeros") {
    line = __LINE__; REQUIRE_WEFT_ERROR(zeros<float>({4}), line, "outside a kernel body");
  }
  SECTION("for_range") {
    line = __LINE__; REQUIRE_WEFT_ERROR(for_range(0, 4, [](Int) {}), line, "outside a kernel body");
  }
}

TEST_CASE("a kernel traced inside another kernel's body", "[errors]") {
  int line = 0;
  Kernel outer = body_kernel([&](Ptr<float>) {
    line = __LINE__; Kernel inner("inner", [](Ptr<float> q) { store(q, 1.f); });
    (void)inner.ir();
  });
  REQUIRE_WEFT_ERROR(outer.ir(), line, "Kernel::ir of kernel 'inner' is called inside a kernel body");
}

TEST_CASE("a kernel's own ir() or launch inside its body is an Error, not a deadlock", "[errors]") {
  Kernel* self = nullptr;
  int line = __LINE__; Kernel k("self_ir", [&](Ptr<float> p) { store(p, 1.f); (void)self->ir(); });
  self = &k;
  REQUIRE_WEFT_ERROR(k.ir(), line, "Kernel::ir of kernel 'self_ir' is called inside a kernel body");
  Kernel* other = nullptr;
  Kernel launcher("self_launch", [&](Ptr<float> p) {
    store(p, 1.f);
    line = __LINE__; other->launch(Grid(1), static_cast<float*>(nullptr));
  });
  other = &launcher;
  REQUIRE_WEFT_ERROR(launcher.ir(), line, "Kernel::launch of kernel 'self_launch' is called inside a kernel body");
}

TEST_CASE("kernel names must be identifiers", "[errors]") {
  auto body = [](Ptr<float> p) { store(p, 0.f); };
  int line = 0;
  line = __LINE__; REQUIRE_WEFT_ERROR(Kernel("my kernel", body), line, "may contain only letters, digits and '_'");
  line = __LINE__; REQUIRE_WEFT_ERROR(Kernel("", body), line, "a kernel needs a name");
}

TEST_CASE("a failed trace is not cached: the next trace fails the same way", "[errors]") {
  int line = 0, traces = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    ++traces;
    line = __LINE__; Int i = program_id(5);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "axis 5");
  Buffer<float> b = Device::current().alloc<float>(1);
  REQUIRE_WEFT_ERROR(k.launch(Grid(1), b), line, "axis 5");
  CHECK(traces == 2);
}

TEST_CASE("Kernel::ir with bad Const values names the kernel's declaration", "[errors]") {
  // Kernel::ir takes a pack and cannot record its caller's line, so it names where the kernel was declared.
  int line = __LINE__; Kernel k("two_consts", [](Ptr<float> p, Const<int8_t> a, Const<float> b) { store(p, scalar<float>(a * b)); });
  REQUIRE_WEFT_ERROR(k.ir(1), line, "has 2 Const parameters but Kernel::ir was given 1 values");
  REQUIRE_WEFT_ERROR(k.ir(1, 2.f, 3), line, "was given 3 values");
  REQUIRE_WEFT_ERROR(k.ir(2.5, 2.f), line, "is a floating-point number (f64), but the parameter is Const<i8>");
  REQUIRE_WEFT_ERROR(k.ir(1000, 2.f), line, "is 1000, which does not fit in the parameter's type i8");
  CHECK_FALSE(k.ir(3, 2).empty());  // an integer for a Const<float> is fine
}

// ---- launches ------------------------------------------------------------------------------------------

namespace {

Kernel launch_target() {
  return Kernel("launch_target", [](Ptr<float> out, Int n, Scalar<int8_t> small, Const<int> block) {
    Int offs = program_id() * block + arange(0, block);
    store(out + offs, cast<float>(offs + cast<int32_t>(small)), offs < n);
  });
}

}  // namespace

TEST_CASE("launch-time argument errors name the launch line", "[errors]") {
  Kernel k = launch_target();
  Device dev = Device::current();
  Buffer<float> out = dev.alloc<float>(64);
  Buffer<f16> halves = dev.alloc<f16>(64);
  int line = 0;
  SECTION("argument count") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, 64, 1), line, "takes 4 arguments but the launch passes 3");
  }
  const std::string argument = "of kernel launch_target(Ptr<f32>, Scalar<i32>, Scalar<i8>, Const<i32>) is ";
  SECTION("buffer of the wrong element type") {
    std::string phrase = "argument 0 " + argument + "a pointer to f16, but the parameter is Ptr<f32>";
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), halves, 64, 1, 64), line, phrase);
  }
  SECTION("a double for an Int") {
    std::string phrase = "argument 1 " + argument + "a floating-point number (f64), but the parameter is Scalar<i32>; "
                         "convert it to an integer explicitly";
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, 64.0, 1, 64), line, phrase);
  }
  SECTION("an integer out of range for Scalar<int8_t>") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, 64, 200, 64), line, "is 200, which does not fit in the parameter's type i8");
  }
  SECTION("a number for a pointer") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), 0, 64, 1, 64), line, "but the parameter is Ptr<f32>");
  }
  SECTION("a pointer for a Const") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, 64, 1, out), line, "but the parameter is Const<i32>; pass a number");
  }
  SECTION("a double for a Const<int>") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, 64, 1, 64.0), line, "but the parameter is Const<i32>; convert it");
  }
  SECTION("an integer out of range for a Const<int>") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), out, 64, 1, int64_t(1) << 40), line, "does not fit in the parameter's type i32");
  }
  SECTION("grid dimension 0") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(4, 0), out, 64, 1, 64), line, "grid (4, 0, 1)");
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(0), out, 64, 1, 64), line, "each dimension must be at least 1");
  }
  SECTION("grid y too large") {
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1, 70000), out, 64, 1, 64), line, "y, z at most 65535");
  }
}

TEST_CASE("launch-time errors do not need a valid trace", "[errors]") {
  // The arguments are checked before tracing: a broken body does not mask a bad launch.
  int body_line = 0;
  Kernel k = body_kernel([&](Ptr<float>) { body_line = __LINE__; Int bad = arange(0, 3); });
  Buffer<f16> halves = Device::current().alloc<f16>(4);
  int line = 0;
  line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), halves), line, "is a pointer to f16");
  CHECK(body_line == 0);
}

TEST_CASE("Buffer::upload with the wrong size", "[errors]") {
  Buffer<float> b = Device::current().alloc<float>(16);
  std::vector<float> host(15, 1.f);
  int line = 0;
  line = __LINE__; REQUIRE_WEFT_ERROR(b.upload(host), line, "the host vector has 15 elements but the buffer holds 16");
}

// ---- empty buffers, null pointers and allocation sizes ----------------------------------------------------

TEST_CASE("an empty Buffer or a null pointer given to a launch is an Error naming the argument", "[errors]") {
  Kernel k = launch_target();
  Device dev = Device::current();
  int line = 0;
  SECTION("a default-constructed Buffer") {
    Buffer<float> none;
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), none, 64, 1, 64), line, "argument 0 of kernel 'launch_target' is an empty Buffer<f32> (default-constructed, or of 0 elements): it has no memory for the kernel's Ptr<f32>");
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), none, 64, 1, 64), line, "Device::alloc<f32>(n) with n > 0");
  }
  SECTION("a Buffer of 0 elements") {
    Buffer<float> empty = dev.alloc<float>(0);
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), empty, 64, 1, 64), line, "argument 0 of kernel 'launch_target' is an empty Buffer<f32>");
  }
  SECTION("a raw null pointer") {
    float* null = nullptr;
    line = __LINE__; REQUIRE_WEFT_ERROR(k.launch(Grid(1), null, 64, 1, 64), line, "argument 0 of kernel 'launch_target' is a null pointer for its Ptr<f32>; pass the address of memory on " + dev.name());
  }
  SECTION("a null pointer among other arguments, on the launch's stream") {
    Kernel copy("copy", [](Ptr<int32_t> dst, Ptr<int32_t> src) { store(dst, load(src)); });
    Buffer<int32_t> dst = dev.alloc<int32_t>(1);
    line = __LINE__; REQUIRE_WEFT_ERROR(copy.launch(dev.stream(), Grid(1), dst, static_cast<const int32_t*>(nullptr)), line, "argument 1 of kernel 'copy' is a null pointer for its Ptr<i32>");
  }
}

TEST_CASE("an empty Buffer uploads and downloads nothing and a non-empty vector into it is an Error", "[errors]") {
  Buffer<float> none;
  none.upload({});  // nothing to copy, no memory touched
  CHECK(none.download().empty());
  Buffer<bool> no_bools;
  no_bools.upload({});
  CHECK(no_bools.download().empty());
  Buffer<float> empty = Device::current().alloc<float>(0);
  empty.upload({});
  CHECK(empty.download().empty());
  int line = 0;
  line = __LINE__; REQUIRE_WEFT_ERROR(none.upload({1.f, 2.f}), line, "the host vector has 2 elements but the buffer holds 0 (a default-constructed Buffer holds no memory: make it with Device::alloc<T>(n) or Device::upload(host))");
  line = __LINE__; REQUIRE_WEFT_ERROR(empty.upload({1.f}), line, "the host vector has 1 elements but the buffer holds 0");
  Buffer<float> hollow(nullptr, 4);  // a count without memory: refused, not dereferenced
  line = __LINE__; REQUIRE_WEFT_ERROR(hollow.download(), line, "Buffer::download: the buffer claims 4 elements but has no memory");
  line = __LINE__; REQUIRE_WEFT_ERROR(hollow.upload(std::vector<float>(4)), line, "Buffer::upload: the buffer claims 4 elements but has no memory");
}

TEST_CASE("Device::alloc of a count whose size in bytes overflows is an Error", "[errors]") {
  Device dev = Device::current();
  const size_t huge = (size_t(1) << 62) + 4;  // * sizeof(float) wraps around to 16 bytes
  const std::string most = std::to_string(SIZE_MAX / 4);
  int line = 0;
  line = __LINE__; REQUIRE_WEFT_ERROR(dev.alloc<float>(huge), line, "Device::alloc: " + std::to_string(huge) + " elements of 4 bytes overflow the address space (at most " + most + " elements of this type fit in size_t); allocate fewer elements");
  line = __LINE__; REQUIRE_WEFT_ERROR(dev.alloc<double>(SIZE_MAX), line, "elements of 8 bytes overflow the address space");
  line = __LINE__; REQUIRE_WEFT_ERROR(dev.alloc<int16_t>(SIZE_MAX / 2 + 1), line, "elements of 2 bytes overflow");
  CHECK(dev.alloc<int16_t>(0).size() == 0);
}

// ---- where() with two literals -------------------------------------------------------------------------

TEST_CASE("where() with two integer literals that do not fit in int32", "[errors]") {
  int line = 0;
  Kernel k = body_kernel([&](Ptr<float>) {
    Bool c = arange(0, 8) < 4;
    line = __LINE__; Int w = where(c, int64_t(1) << 40, 0);
  });
  REQUIRE_WEFT_ERROR(k.ir(), line, "where: the literal 1099511627776 does not fit in int32_t, the element type of where() with two integer literals; make one of them a tile of a wider type");
}

// ---- knobs ---------------------------------------------------------------------------------------------

TEST_CASE("an unusable WEFT_DUMP_DIR is a weft::Error saying which directory and why", "[errors]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("weft_dump_dir_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string file = (root / "a_file").string();
  std::ofstream(file) << "not a directory";

  // A file where the directory should be, and a directory under a file.
  weft_test::require_error([&] { support::write_dump_file(file, "k.ir", "text"); },
                           {"WEFT_DUMP_DIR=" + file + " is not a directory (it is an existing file)",
                            "set WEFT_DUMP_DIR to a directory you can write, or unset it"});
  weft_test::require_error([&] { support::write_dump_file(file + "/sub", "k.ir", "text"); },
                           {"WEFT_DUMP_DIR=" + file + "/sub: cannot create the directory: Not a directory"});
  // A file name that is a directory inside the dump directory: it cannot be opened for writing.
  fs::create_directories(root / "dir" / "k.ir");
  weft_test::require_error([&] { support::write_dump_file((root / "dir").string(), "k.ir", "text"); },
                           {"WEFT_DUMP_DIR=" + (root / "dir").string() + ": cannot open", "k.ir for writing"});
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directories(root / "read_only");
    fs::permissions(root / "read_only", fs::perms::owner_read | fs::perms::owner_exec);
    weft_test::require_error([&] { support::write_dump_file((root / "read_only").string(), "k.ir", "text"); },
                             {"cannot open", "Permission denied"});
  }

  // A usable directory (created with its parents) gets the file.
  support::write_dump_file((root / "new" / "nested").string(), "k.ir", "the text");
  std::ifstream in(root / "new" / "nested" / "k.ir");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text == "the text");
  std::error_code ignored;
  fs::permissions(root / "read_only", fs::perms::owner_all, fs::perm_options::replace, ignored);
  fs::remove_all(root, ignored);
}
