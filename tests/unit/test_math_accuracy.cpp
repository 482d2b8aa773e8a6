// Math accuracy: every f32 math function, accurate and fast, against a double-precision reference over
// fresh random inputs across each function's range plus edge inputs (zeros, infinities, NaN, subnormals,
// overflow and underflow thresholds), each held to the bound README's "Math accuracy" table states.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cfloat>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ptxas_check.h"
#include "test_util.h"

using namespace weft;
using namespace weft_test;

namespace {

constexpr double kMinNormal = 0x1p-126;

// The f32 ulp at v: the spacing of floats of v's binade (subnormals: 2^-149).
double ulp_f32(double v) {
  if (v == 0 || !std::isfinite(v)) return 0x1p-149;
  return std::ldexp(1.0, std::max(std::ilogb(v), -126) - 23);
}

float ftz(float v) { return std::fabs(v) < kMinNormal ? std::copysign(0.f, v) : v; }

struct MathCase {
  std::string name;
  std::function<Tile<float>(Tile<float>, Tile<float>)> fn;  // the weft function (y used by pow only)
  std::function<double(double, double)> reference;
  bool fast = false;  // inputs and results flushed (.ftz) before judging, except tanh
  // Whether `got` is close enough to the exact `want` for input x.
  std::function<bool(double got, double want, double x)> within;
  std::function<float(std::mt19937_64&)> draw_x;
  std::function<float(std::mt19937_64&)> draw_y = [](std::mt19937_64&) { return 0.f; };
  double worst_ulp = 0;
};

float uniform(std::mt19937_64& rng, double lo, double hi) { return float(std::uniform_real_distribution<double>(lo, hi)(rng)); }
// Any finite float of either sign, subnormals included, evenly over the bit patterns (so over the binades).
float any_finite(std::mt19937_64& rng) {
  for (;;) {
    float v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isfinite(v)) return v;
  }
}
float any_positive(std::mt19937_64& rng) { return std::fabs(any_finite(rng)); }

std::function<bool(double, double, double)> ulps(double n) {
  return [n](double got, double want, double) { return std::fabs(got - want) <= n * ulp_f32(want); };
}
std::function<bool(double, double, double)> relative(double r) {
  return [r](double got, double want, double) { return std::fabs(got - want) <= r * std::fabs(want); };
}

std::vector<MathCase> math_cases() {
  using T = Tile<float>;
  std::vector<MathCase> c;
  auto wide = [](std::mt19937_64& r) { return uniform(r, -160, 130); };
  c.push_back({"exp", [](T x, T) { return exp(x); }, [](double x, double) { return std::exp(x); }, false, ulps(2),
               [](std::mt19937_64& r) { return uniform(r, -110, 90); }});
  c.push_back({"exp2", [](T x, T) { return exp2(x); }, [](double x, double) { return std::exp2(x); }, false, ulps(2), wide});
  c.push_back({"log2", [](T x, T) { return log2(x); }, [](double x, double) { return std::log2(x); }, false, ulps(2), any_positive});
  c.push_back({"rsqrt", [](T x, T) { return rsqrt(x); }, [](double x, double) { return 1 / std::sqrt(x); }, false, ulps(2),
               any_positive});
  c.push_back({"rcp", [](T x, T) { return rcp(x); }, [](double x, double) { return 1 / x; }, false, ulps(1), any_finite});
  c.push_back({"tanh", [](T x, T) { return tanh(x); }, [](double x, double) { return std::tanh(x); }, false, ulps(1),
               [](std::mt19937_64& r) { return r() % 4 ? uniform(r, -12, 12) : any_finite(r); }});
  c.push_back({"sigmoid", [](T x, T) { return sigmoid(x); }, [](double x, double) { return 1 / (1 + std::exp(-x)); }, false,
               ulps(1), [](std::mt19937_64& r) { return uniform(r, -120, 40); }});
  c.push_back({"erf", [](T x, T) { return erf(x); }, [](double x, double) { return std::erf(x); }, false, ulps(1),
               [](std::mt19937_64& r) { return r() % 4 ? uniform(r, -6, 6) : any_finite(r); }});
  c.push_back({"pow", [](T x, T y) { return pow(x, y); }, [](double x, double y) { return std::pow(x, y); }, false, ulps(1),
               [](std::mt19937_64& r) {
                 float m = std::ldexp(uniform(r, 0.5, 1), int(r() % 60) - 30);
                 return r() % 4 ? m : -m;  // negative x: the draw of y makes a quarter of them integers
               },
               [](std::mt19937_64& r) { return r() % 4 ? uniform(r, -6, 6) : float(int(r() % 17) - 8); }});
  c.push_back({"fast::exp2", [](T x, T) { return fast::exp2(x); }, [](double x, double) { return std::exp2(x); }, true,
               relative(0x1p-21), wide});
  c.push_back({"fast::exp", [](T x, T) { return fast::exp(x); }, [](double x, double) { return std::exp(x); }, true,
               [](double got, double want, double x) { return std::fabs(got - want) <= (0x1p-21 + std::fabs(x) * 0x1p-23) * want; },
               [](std::mt19937_64& r) { return uniform(r, -110, 90); }});
  c.push_back({"fast::log2", [](T x, T) { return fast::log2(x); }, [](double x, double) { return std::log2(x); }, true,
               [](double got, double want, double) { return std::fabs(got - want) <= 0x1p-21 + 0x1p-22 * std::fabs(want); },
               any_positive});
  c.push_back({"fast::rcp", [](T x, T) { return fast::rcp(x); }, [](double x, double) { return 1 / x; }, true, ulps(1), any_finite});
  c.push_back({"fast::rsqrt", [](T x, T) { return fast::rsqrt(x); }, [](double x, double) { return 1 / std::sqrt(x); }, true,
               relative(0x1p-22), any_positive});
  c.push_back({"fast::tanh", [](T x, T) { return fast::tanh(x); }, [](double x, double) { return std::tanh(x); }, false,
               relative(std::exp2(-10.5)), [](std::mt19937_64& r) { return r() % 4 ? uniform(r, -12, 12) : any_finite(r); }});
  return c;
}

const std::vector<float> kEdges = {0.f, -0.f, 1.f, -1.f, 0.5f, -0.5f, 2.f, 3.f, -3.f, 1e-30f, -1e-30f, 0x1p-126f,
                                   0x1p-149f, -0x1p-149f, 0x1.8p-130f, 88.7f, 89.f, -87.3f, -103.f, -104.f, 127.99f,
                                   128.f, -126.f, -149.f, -150.f, 0x1.fffffep127f, -0x1.fffffep127f, INFINITY, -INFINITY,
                                   std::nanf("")};

// Runs case `mc` on `dev` over its random draws plus every edge x with every edge-ish y; returns results.
std::vector<float> run_case(const MathCase& mc, Device dev, const std::vector<float>& x, const std::vector<float>& y) {
  auto fn = mc.fn;
  Kernel k("math_" + mc.name.substr(mc.name.find(':') == std::string::npos ? 0 : mc.name.rfind(':') + 1) +
               (mc.fast ? "_fast" : ""),
           [fn](Ptr<float> px, Ptr<float> py, Ptr<float> out, Int n) {
             Int i = program_id(0) * 1024 + arange(0, 1024);
             Bool ok = i < n;
             store(out + i, fn(load(px + i, ok), load(py + i, ok)), ok);
           });
  int n = static_cast<int>(x.size());
  Buffer<float> dx = dev.upload(x), dy = dev.upload(y), dout = dev.upload(std::vector<float>(n, 7.f));
  k.launch(Grid((n + 1023) / 1024), dx, dy, dout, n);
  return dout.download();
}

void inputs_of(const MathCase& mc, std::mt19937_64& rng, std::vector<float>& x, std::vector<float>& y) {
  for (int i = 0; i < 20000; ++i) {
    x.push_back(mc.draw_x(rng));
    y.push_back(mc.draw_y(rng));
  }
  const std::vector<float> ys = {0.f, -0.f, 1.f, -1.f, 2.f, 3.f, -3.f, 0.5f, -0.5f, 2.5f, 100.f, -100.f, INFINITY, -INFINITY,
                                 std::nanf("")};
  for (float e : kEdges)
    for (float f : mc.name == "pow" ? ys : std::vector<float>{0.f}) {
      x.push_back(e);
      y.push_back(f);
    }
}

// Whether `got` is right for input (x, y); updates the case's worst ulp error over normal results.
bool judge(MathCase& mc, float x, float y, float got) {
  double xin = mc.fast ? ftz(x) : x;
  double want = mc.reference(xin, y);
  if (std::isnan(want)) return std::isnan(got);
  if (std::isnan(got)) return false;
  double largest = 0x1.fffffep127;
  if (std::fabs(want) >= 0x1p128) return got == std::copysign(INFINITY, want);  // overflows
  if (std::fabs(want) > largest) return std::fabs(got) >= largest && std::signbit(got) == std::signbit(want);
  if (mc.fast) {
    // .ftz: results below the smallest normal are zero; the rounded argument of fast::exp may also cross
    // the overflow and underflow thresholds a little early or late.
    if (std::fabs(want) < 0x1p-125 && (got == 0 || std::fabs(got) == kMinNormal)) return true;
    if (std::isinf(got) && std::fabs(want) >= 0x1p127) return true;
  }
  if (std::fabs(want) >= kMinNormal) mc.worst_ulp = std::max(mc.worst_ulp, std::fabs(got - want) / ulp_f32(want));
  return mc.within(got, want, xin);
}

void check_accuracy(Device dev) {
  WEFT_SEEDED_RNG(rng);
  std::string table;
  for (MathCase& mc : math_cases()) {
    INFO(mc.name << " on " << dev.name());
    std::vector<float> x, y;
    inputs_of(mc, rng, x, y);
    std::vector<float> got = run_case(mc, dev, x, y);
    int wrong = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (!judge(mc, x[i], y[i], got[i]) && ++wrong <= 6)
        UNSCOPED_INFO(mc.name << "(" << std::hexfloat << x[i] << (mc.name == "pow" ? ", " : "") << (mc.name == "pow" ? y[i] : 0.f)
                              << ") = " << got[i] << ", want " << mc.reference(mc.fast ? ftz(x[i]) : x[i], y[i])
                              << std::defaultfloat);
    CHECK(wrong == 0);
    table += mc.name + ": " + std::to_string(mc.worst_ulp) + " ulp; ";
  }
  WARN("largest errors on " << dev.name() << " (normal results): " << table);
}

}  // namespace

TEST_CASE("fast and accurate math: every f32 function within its stated bound of a double-precision reference",
          "[ops][math]") {
  check_accuracy(Device::current());
}

TEST_CASE("fast and accurate math on the GPU: every f32 function within its stated bound", "[math][gpu]") {
  Device dev = Device::current();
  if (dev.kind() == BackendKind::cpu) {
    WARN("SKIPPED: no GPU (WEFT_BACKEND / Device::current() is the CPU backend)");
    return;
  }
  check_accuracy(dev);  // the CPU backend meets the same bounds (the test above), so the two compare
}

TEST_CASE("fast and accurate math: the PTX holds the approximate instructions, accurate rcp is rcp.rn", "[math][ptx]") {
  Kernel k("math_ptx", [](Ptr<float> x, Ptr<float> out) {
    Tile<float> v = load(x + arange(0, 128));
    Tile<float> fast_sum = fast::exp(v) + fast::log2(v) + fast::rcp(v) + fast::rsqrt(v) + fast::tanh(v) + fast::exp2(v);
    store(out + arange(0, 128), fast_sum + rcp(v) + tanh(v) + erf(v) + sigmoid(v) + pow(v, v));
  });
  std::string ptx = k.ptx();
  for (const char* instruction : {"ex2.approx.ftz.f32", "lg2.approx.ftz.f32", "rcp.approx.ftz.f32", "rsqrt.approx.ftz.f32",
                                  "tanh.approx.f32", "rcp.rn.f32"}) {
    INFO(instruction);
    CHECK(ptx.find(instruction) != std::string::npos);
  }
}

// On the GPU the accurate functions are range reduction and polynomials (portable_math), kept as one call each
// through LLVM's passes and expanded after them (codegen/deferred_math.h): the PTX has no calls left, the
// same argument's function is computed once, and ptxas takes the result.
TEST_CASE("accurate math on the GPU: polynomials expanded after LLVM's passes, once per argument", "[math][ptx]") {
  Kernel every("math_deferred", [](Ptr<float> x, Ptr<double> y, Ptr<float> out, Ptr<double> out64) {
    Tile<float> v = load(x + arange(0, 128));
    store(out + arange(0, 128), exp(v) + exp2(v) + log(v) + log2(v) + sin(v) + cos(v) + tanh(v) + sigmoid(v) + erf(v) +
                                    pow(v, 0.5f));
    Tile<double> w = load(y + arange(0, 128));
    store(out64 + arange(0, 128), exp(w) + exp2(w) + log(w) + log2(w) + sin(w) + cos(w));
  });
  std::string ptx = every.ptx();
  {
    INFO(ptx);
    CHECK(ptx.find("weft.math") == std::string::npos);
    CHECK(ptx.find("call") == std::string::npos);
    check_ptxas_assembles(ptx);
  }
  Kernel twice("math_exp_twice", [](Ptr<float> x, Ptr<float> out) {
    Tile<float> v = load(x + arange(0, 128));
    store(out + arange(0, 128), exp(v) * 2.0f + exp(v));
  });
  ptx = twice.ptx();
  INFO(ptx);
  // exp's polynomial starts from 1/7! (f32 0x39500D01): one exp of v per thread.
  CHECK(count_occurrences(ptx, "0f39500D01") == 1);
  // Pairs of 16-bit floats stored together stay one paired cvt with the math around them.
  Kernel pairs("math_pairs", [](Ptr<float> x, Ptr<bf16> out, Ptr<f16> out16) {
    Tile<float> v = load(x + arange(0, 256));
    store(out + arange(0, 256), cast<bf16>(exp(v)));
    store(out16 + arange(0, 256), cast<f16>(v * 3.0f));
  });
  ptx = pairs.ptx();
  INFO(ptx);
  CHECK(ptx.find("weft.math") == std::string::npos);
  CHECK(ptx.find("cvt.rn.bf16x2.f32") != std::string::npos);
  CHECK(ptx.find("cvt.rn.f16x2.f32") != std::string::npos);
  check_ptxas_assembles(ptx);
}

TEST_CASE("math: f64 where only f32 is offered is an Error naming the fix", "[math][errors]") {
  Kernel t("tanh_f64", [](Ptr<double> x) { store(x + arange(0, 32), tanh(load(x + arange(0, 32)))); });
  CHECK_THROWS_WITH(t.ir(), Catch::Contains("tanh is offered for f32") && Catch::Contains("cast<float>"));
  Kernel p("pow_f64", [](Ptr<double> x) { store(x + arange(0, 32), pow(load(x + arange(0, 32)), 2.0)); });
  CHECK_THROWS_WITH(p.ir(), Catch::Contains("pow is offered for f32"));
  Kernel f("fast_log2_f64", [](Ptr<double> x) { store(x + arange(0, 32), fast::log2(load(x + arange(0, 32)))); });
  CHECK_THROWS_WITH(f.ir(), Catch::Contains("fast::log2 computes in f32"));
}
