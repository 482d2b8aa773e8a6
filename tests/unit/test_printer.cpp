// The printed IR of a traced kernel: values numbered in print order, no source locations.
#include <catch2/catch.hpp>

#include <weft/weft.h>

#include <string>

using namespace weft;

namespace {

// A small kernel that uses a Var, a masked load, a for_range and an if_ with an else. Each statement makes
// at most one operand that emits IR: C++ leaves the order of operands (and of function arguments)
// unspecified, and the expected text must not depend on the compiler.
Kernel printed_kernel() {
  return Kernel("printed", [](Ptr<float> x, Ptr<float> out, Int n, Const<int> block, Const<float> scale) {
    Int pid = program_id(0);
    Int base = pid * block;
    Int offs = base + arange(0, block);
    Bool mask = offs < n;
    Var<float> acc = zeros<float>({block});
    for_range(0, n, 2, [&](Int i) {
      Tile<float> v = load(x + offs + i, mask, 1.5f);
      acc += v * scale;
    });
    if_(pid == 0, [&] { store(out + offs, acc, mask); }, [&] {
      Tile<float> negated = -acc;
      store(out + offs, negated);
    });
  });
}

}  // namespace

TEST_CASE("printed IR of a kernel with for_range, if_/else, a Var and a masked load", "[printer]") {
  Kernel k = printed_kernel();
  const std::string expected = R"(kernel @printed(%0: ptr<f32>, %1: ptr<f32>, %2: i32) {
  %3 = program_id 0 : i32
  %4 = constant 4 : i32
  %5 = mul %3, %4 : i32
  %6 = arange 0, 4 : i32[4]
  %7 = broadcast %5 [4] : i32[4]
  %8 = add %7, %6 : i32[4]
  %9 = broadcast %2 [4] : i32[4]
  %10 = lt %8, %9 : i1[4]
  %11 = constant 0 : f32[4]
  %12 = var %11 : var f32[4]
  %13 = constant 0 : i32
  %14 = constant 2 : i32
  for %15 = %13 to %2 step %14 {
    %16 = broadcast %0 [4] : ptr<f32>[4]
    %17 = ptr_add %16, %8 : ptr<f32>[4]
    %18 = broadcast %15 [4] : i32[4]
    %19 = ptr_add %17, %18 : ptr<f32>[4]
    %20 = constant 1.5 : f32
    %21 = broadcast %20 [4] : f32[4]
    %22 = load %19, %10, %21 : f32[4]
    %23 = constant 0.5 : f32
    %24 = broadcast %23 [4] : f32[4]
    %25 = mul %22, %24 : f32[4]
    %26 = var_get %12 : f32[4]
    %27 = add %26, %25 : f32[4]
    var_set %12, %27
  }
  %28 = constant 0 : i32
  %29 = eq %3, %28 : i1
  if %29 {
    %30 = broadcast %1 [4] : ptr<f32>[4]
    %31 = ptr_add %30, %8 : ptr<f32>[4]
    %32 = var_get %12 : f32[4]
    store %31, %32, %10
  } else {
    %33 = var_get %12 : f32[4]
    %34 = neg %33 : f32[4]
    %35 = broadcast %1 [4] : ptr<f32>[4]
    %36 = ptr_add %35, %8 : ptr<f32>[4]
    store %36, %34
  }
}
)";
  CHECK(k.ir(4, 0.5f) == expected);
}

TEST_CASE("Kernel::ir depends on the Const values and only on them", "[printer]") {
  Kernel k = printed_kernel();
  const std::string a = k.ir(4, 0.5f), b = k.ir(8, 0.5f), c = k.ir(4, 2.f);
  CHECK(a != b);
  CHECK(a != c);
  CHECK(b != c);
  CHECK(k.ir(4, 0.5f) == a);  // memoized
  CHECK(printed_kernel().ir(4, 0.5f) == a);  // a fresh trace prints the same text
  CHECK(k.ir(8, 0.5) == b);   // a double for the Const<float>: the same value, the same specialization
  CHECK(b.find("arange 0, 8 : i32[8]") != std::string::npos);
  CHECK(c.find("constant 2 : f32") != std::string::npos);
}

TEST_CASE("printed IR of shape ops, casts, reductions and an if_ without else", "[printer]") {
  Kernel k("attrs", [](Ptr<f16> out) {
    Tile<float> a = full<float>({2, 4}, -0.25);
    Tile<float> t = a.trans();
    Tile<float> s = sum(t, -1);  // the printed axis is normalized
    Tile<float> flat = t.reshape({8});
    Tile<f16> h = cast<f16>(s + max(flat, 0));
    Int pid = program_id(1);
    if_(pid > 2, [&] { store(out + arange(0, 4), h); });
  });
  CHECK(k.ir() == R"(kernel @attrs(%0: ptr<f16>) {
  %1 = constant -0.25 : f32[2x4]
  %2 = permute %1 1, 0 : f32[4x2]
  %3 = sum %2 1 : f32[4]
  %4 = reshape %2 [8] : f32[8]
  %5 = max_reduce %4 0 : f32
  %6 = broadcast %5 [4] : f32[4]
  %7 = add %3, %6 : f32[4]
  %8 = cast %7 to f16 : f16[4]
  %9 = program_id 1 : i32
  %10 = constant 2 : i32
  %11 = gt %9, %10 : i1
  if %11 {
    %12 = arange 0, 4 : i32[4]
    %13 = broadcast %0 [4] : ptr<f16>[4]
    %14 = ptr_add %13, %12 : ptr<f16>[4]
    store %14, %8
  }
}
)");
}
