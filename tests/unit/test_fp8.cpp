// The OCP 8-bit floats f8e4m3 and f8e5m2: host conversions over every code, the rounding of f32 (and of
// wider and narrower types) to them against an independent brute-force reference, casts and arithmetic in
// kernels (on the CPU backend here; the gpu-ops: run repeats every case on the GPU, where `cvt.rn.satfinite`
// must give the same bits), and wgmma with fp8 operands (m64nNk32) against a double reference.
#include "error_checks.h"
#include "test_util.h"

using namespace weft_test;

namespace {

// ---- an independent reference: the codes' values from their fields, nearest code by search ----------

struct Format {
  const char* name;
  int exponent_bits, mantissa_bits, bias;
  bool has_infinity;  // e5m2: S.11111.00 is infinity; e4m3 has none and only S.1111.111 is NaN
};
constexpr Format kE4M3{"f8e4m3", 4, 3, 7, false}, kE5M2{"f8e5m2", 5, 2, 15, true};

// The value of `code` (NaN for NaN codes), read from its fields.
long double reference_value(uint8_t code, const Format& f) {
  int mbits = f.mantissa_bits;
  unsigned exponent = (code >> mbits) & ((1u << f.exponent_bits) - 1), mantissa = code & ((1u << mbits) - 1);
  long double sign = (code & 0x80) ? -1.0L : 1.0L;
  unsigned top = (1u << f.exponent_bits) - 1;
  if (f.has_infinity && exponent == top) return mantissa ? NAN : sign * INFINITY;
  if (!f.has_infinity && exponent == top && mantissa == (1u << mbits) - 1) return NAN;
  long double fraction = static_cast<long double>(mantissa) / (1u << mbits);
  if (exponent == 0) return sign * fraction * std::pow(2.0L, 1 - f.bias);
  return sign * (1 + fraction) * std::pow(2.0L, static_cast<int>(exponent) - f.bias);
}

// The code nearest to x by searching every finite code: ties go to the even code (mantissa's last bit
// 0); magnitudes above the largest finite value saturate to it (satfinite); NaN gives 0x7F.
uint8_t reference_round(long double x, const Format& f) {
  if (std::isnan(x)) return 0x7f;
  uint8_t best = 0;
  long double best_distance = INFINITY;
  long double largest = 0;
  uint8_t largest_code = 0;
  for (int c = 0; c < 0x80; ++c) {  // non-negative codes
    long double v = reference_value(static_cast<uint8_t>(c), f);
    if (std::isnan(v) || std::isinf(v)) continue;
    if (v > largest) largest = v, largest_code = static_cast<uint8_t>(c);
    long double d = std::fabs(std::fabs(x) - v);
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) best = static_cast<uint8_t>(c), best_distance = d;
  }
  if (std::fabs(x) > largest) best = largest_code;
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

template <class T> const Format& format_of() {
  if constexpr (std::is_same_v<T, f8e4m3>) return kE4M3;
  else return kE5M2;
}

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random f32s that exercise every rounding case: random bit patterns in and around the type's range
// (both signs), exact midpoints between neighbouring codes and their f32 neighbours, values at the
// saturation threshold, subnormals of both types, zeros, infinities and NaNs.
template <class T> std::vector<float> rounding_inputs(Rng& rng, size_t count) {
  const Format& f = format_of<T>();
  std::vector<float> in;
  std::uniform_int_distribution<int> code(0, 255), pick(0, 9);
  std::uniform_int_distribution<uint32_t> exponent(127 - f.bias - f.mantissa_bits - 3, 127 + f.bias + 3),
      mantissa(0, (1u << 23) - 1);
  while (in.size() < count) {
    int kind = pick(rng);
    uint32_t sign = (rng() & 1) << 31;
    if (kind <= 4) {
      in.push_back(bits_to_f32(sign | exponent(rng) << 23 | mantissa(rng)));
    } else if (kind <= 7) {  // a midpoint between two neighbouring finite codes, or one f32 step off it
      auto c = static_cast<uint8_t>(code(rng) & 0x7f);
      long double lo = reference_value(c, f), hi = reference_value(static_cast<uint8_t>(c + 1), f);
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi)) continue;
      float mid = static_cast<float>((lo + hi) / 2);  // exact: fp8 midpoints need few bits
      int step = kind == 5 ? 0 : kind == 6 ? 1 : -1;
      uint32_t u;
      std::memcpy(&u, &mid, 4);
      in.push_back(bits_to_f32((u + step) | sign));
    } else if (kind == 8) {  // around the largest finite value and past it
      float top = static_cast<float>(reference_value(format_of<T>().has_infinity ? 0x7b : 0x7e, f));
      float v = top * std::uniform_real_distribution<float>(0.9f, 1.2f)(rng);
      in.push_back(sign ? -v : v);
    } else {
      const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, bits_to_f32(0x7fa00001u),
                                bits_to_f32(1), bits_to_f32(0x80000001u), 1e-30f, -3.4e38f};
      in.push_back(specials[std::uniform_int_distribution<size_t>(0, std::size(specials) - 1)(rng)]);
    }
  }
  return in;
}

template <class T> uint8_t bits_of(T v) { return v.bits; }

// Compares fp8 codes; NaN results must be 0x7F exactly (what cvt.rn.satfinite gives for any NaN).
void check_codes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, const std::vector<float>& in,
                 const std::string& what) {
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i] && ++bad <= 8)
      FAIL_CHECK(what << ": input " << std::hexfloat << in[i] << std::defaultfloat << " (" << in[i] << ") gave 0x"
                      << std::hex << int(got[i]) << ", want 0x" << int(want[i]) << std::dec);
  CHECK(bad == 0);
}

// A device buffer of fp8 codes, outputs poisoned with 0x5A bytes (a finite value, so every element is
// compared by its code).
template <class T> Buffer<T> fp8_buffer(const std::vector<uint8_t>& codes) {
  std::vector<T> v(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) v[i] = T::from_bits(codes[i]);
  return Device::current().upload(v);
}
template <class T> std::vector<uint8_t> codes_of(const Buffer<T>& b) {
  std::vector<uint8_t> out;
  for (T v : b.download()) out.push_back(v.bits);
  return out;
}

}  // namespace

// ---- host conversions ----------------------------------------------------------------------------------

TEST_CASE("fp8 host types: every code decodes to the value of its fields and encodes back", "[fp8][cpu-only]") {
  auto run = []<class T>(std::type_identity<T>) {
    const Format& f = format_of<T>();
    INFO(f.name);
    for (int c = 0; c < 256; ++c) {
      auto code = static_cast<uint8_t>(c);
      long double want = reference_value(code, f);
      float got = T::from_bits(code);
      INFO("code 0x" << std::hex << c << std::dec);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
        CHECK(T(got).bits == 0x7f);  // any NaN encodes as 0x7F
        continue;
      }
      CHECK(static_cast<long double>(got) == want);
      CHECK(std::signbit(got) == bool(code & 0x80));
      // Finite codes and infinities round-trip; an infinity saturates (satfinite) instead.
      uint8_t back = T(got).bits;
      if (std::isinf(want))
        CHECK(back == ((code & 0x80) | 0x7b));
      else
        CHECK(back == code);
    }
  };
  run(std::type_identity<f8e4m3>{});
  run(std::type_identity<f8e5m2>{});
  // Landmarks of the OCP spec.
  CHECK(float(f8e4m3::from_bits(0x7e)) == 448.0f);
  CHECK(float(f8e4m3::from_bits(0x01)) == 0x1p-9f);
  CHECK(float(f8e4m3::from_bits(0x38)) == 1.0f);
  CHECK(float(f8e5m2::from_bits(0x7b)) == 57344.0f);
  CHECK(float(f8e5m2::from_bits(0x01)) == 0x1p-16f);
  CHECK(float(f8e5m2::from_bits(0x3c)) == 1.0f);
  CHECK(std::isinf(float(f8e5m2::from_bits(0xfc))));
  CHECK(f8e4m3(1e9f).bits == 0x7e);
  CHECK(f8e4m3(-INFINITY).bits == 0xfe);
  CHECK(f8e5m2(INFINITY).bits == 0x7b);
  CHECK(f8e4m3(464.0f).bits == 0x7e);   // the midpoint above 448 saturates
  CHECK(f8e4m3(0x1p-10f).bits == 0x00); // half the smallest subnormal: ties to even (zero)
  CHECK(f8e4m3(0x1.8p-10f).bits == 0x01);
}

TEST_CASE("fp8 host types round random f32s to the nearest code", "[fp8][cpu-only]") {
  WEFT_SEEDED_RNG(rng);
  auto run = [&]<class T>(std::type_identity<T>) {
    std::vector<float> in = rounding_inputs<T>(rng, 20000);
    std::vector<uint8_t> got, want;
    for (float x : in) {
      got.push_back(T(x).bits);
      want.push_back(reference_round(x, format_of<T>()));
    }
    check_codes(got, want, in, std::string("host ") + format_of<T>().name);
  };
  run(std::type_identity<f8e4m3>{});
  run(std::type_identity<f8e5m2>{});
}

// ---- in kernels ----------------------------------------------------------------------------------------

TEST_CASE("cast of random f32s to fp8 in a kernel rounds to the nearest code", "[ops][fp8][cast]") {
  WEFT_SEEDED_RNG(rng);
  auto run = [&]<class T>(std::type_identity<T>) {
    constexpr int n = 4096;
    std::vector<float> in = rounding_inputs<T>(rng, n);
    Kernel k("cast_to_fp8", [](Ptr<T> out, Ptr<float> x, Int n) {
      Int offs = program_id(0) * 256 + arange(0, 256);
      store(out + offs, cast<T>(load(x + offs, offs < n, 0.0f)), offs < n);
    });
    Buffer<T> out = fp8_buffer<T>(std::vector<uint8_t>(n, 0x5a));
    k.launch(Grid(n / 256), out, Device::current().upload(in), n);
    std::vector<uint8_t> want;
    for (float x : in) want.push_back(reference_round(x, format_of<T>()));
    check_codes(codes_of(out), want, in, std::string("cast<") + format_of<T>().name + ">(f32)");
  };
  run(std::type_identity<f8e4m3>{});
  run(std::type_identity<f8e5m2>{});
}

TEST_CASE("cast of every fp8 code to f32 bf16 and f16 in a kernel is exact", "[ops][fp8][cast]") {
  auto run = []<class T>(std::type_identity<T>) {
    INFO(format_of<T>().name);
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    Kernel k("cast_from_fp8", [](Ptr<float> f, Ptr<bf16> b, Ptr<f16> h, Ptr<T> x) {
      Int offs = arange(0, 256);
      Tile<T> v = load(x + offs);
      store(f + offs, cast<float>(v));
      store(b + offs, cast<bf16>(v));
      store(h + offs, cast<f16>(v));
    });
    Output<float> f(256);
    Output<bf16> b(256);
    Output<f16> h(256);
    f.poison(), b.poison(), h.poison();
    k.launch(Grid(1), f.arg(), b.arg(), h.arg(), fp8_buffer<T>(codes));
    std::vector<float> fs = f.read();
    std::vector<bf16> bs = b.read();
    std::vector<f16> hs = h.read();
    for (int c = 0; c < 256; ++c) {
      long double want = reference_value(static_cast<uint8_t>(c), format_of<T>());
      INFO("code 0x" << std::hex << c);
      if (std::isnan(want)) {  // a NaN, and not the poison
        CHECK((std::isnan(fs[c]) && !is_poison<float>(fs[c])));
        CHECK((std::isnan(float(bs[c])) && !is_poison<bf16>(bs[c])));
        CHECK((std::isnan(float(hs[c])) && !is_poison<f16>(hs[c])));
        continue;
      }
      CHECK(static_cast<long double>(fs[c]) == want);
      CHECK(static_cast<long double>(float(bs[c])) == want);
      CHECK(static_cast<long double>(float(hs[c])) == want);
      CHECK(std::signbit(fs[c]) == bool(c & 0x80));
    }
  };
  run(std::type_identity<f8e4m3>{});
  run(std::type_identity<f8e5m2>{});
}

// f16 and bf16 convert exactly to f32 first; f64 and 32/64-bit integers go through f32 rounded to odd, so
// that every source rounds to fp8 once.
TEST_CASE("casts to fp8 from f16 bf16 f64 and integers round once", "[ops][fp8][cast]") {
  WEFT_SEEDED_RNG(rng);
  auto run = [&]<class From, class T>(std::vector<From> src, const std::string& what) {
    Kernel k("cast_fp8_from", [](Ptr<T> out, Ptr<From> x) {
      Int offs = arange(0, 64);
      store(out + offs, cast<T>(load(x + offs)));
    });
    src.resize(64, src.empty() ? From{} : src[0]);
    std::vector<uint8_t> want;
    std::vector<float> shown;
    for (From x : src) {
      long double v = static_cast<long double>(static_cast<double>(x));
      want.push_back(reference_round(v, format_of<T>()));
      shown.push_back(static_cast<float>(v));
    }
    Buffer<T> out = fp8_buffer<T>(std::vector<uint8_t>(64, 0x5a));
    k.launch(Grid(1), out, Device::current().upload(src));
    check_codes(codes_of(out), want, shown, what);
  };
  // Just above an e4m3 midpoint (1 + 2^-4 lies between 1 and 1.125) by less than f32 can hold: a cast
  // through the nearest f32 would land on the midpoint and round to even (1.0).
  run.operator()<double, f8e4m3>({1 + 0x1p-4 + 0x1p-40, -(1 + 0x1p-4 + 0x1p-40), 1 + 0x1p-4, 300.0, 1e300, -1e-300,
                                  440.0, 0x1p-10 + 0x1p-60},
                                 "f64 -> f8e4m3");
  run.operator()<double, f8e5m2>({1 + 0x1p-3 + 0x1p-40, 1 + 0x1p-3, 57344.0 + 4096.0, 61440.0, 0x1p-17 + 0x1p-70},
                                 "f64 -> f8e5m2");
  run.operator()<int32_t, f8e4m3>({17, -17, 19, 21, 100000, -448, 449, 0}, "i32 -> f8e4m3");
  run.operator()<int64_t, f8e5m2>({(int64_t(1) << 40) + 1, 57343, 61439, 61441, -5, 7}, "i64 -> f8e5m2");
  std::vector<f16> h;
  std::vector<bf16> b;
  for (int i = 0; i < 64; ++i) {
    h.push_back(f16(std::uniform_real_distribution<float>(-500, 500)(rng)));
    b.push_back(bf16(std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), std::uniform_int_distribution<int>(-20, 17)(rng))));
  }
  run.operator()<f16, f8e4m3>(h, "f16 -> f8e4m3");
  run.operator()<f16, f8e5m2>(h, "f16 -> f8e5m2");
  run.operator()<bf16, f8e4m3>(b, "bf16 -> f8e4m3");
  run.operator()<bf16, f8e5m2>(b, "bf16 -> f8e5m2");
}

TEST_CASE("fp8 tiles compute in f32 and round after every op and literals and arguments round once", "[ops][fp8]") {
  WEFT_SEEDED_RNG(rng);
  std::vector<uint8_t> xa(128), xb(128);
  for (auto& c : xa) c = static_cast<uint8_t>(rng() % 0x7e);  // finite e4m3 codes (b: both signs)
  for (auto& c : xb) c = static_cast<uint8_t>((rng() % 0x7e) | (rng() & 0x80));
  Kernel k("fp8_arith", [](Ptr<f8e4m3> sum, Ptr<f8e4m3> prod, Ptr<f8e4m3> lit, Ptr<f8e4m3> a, Ptr<f8e4m3> b,
                           Scalar<f8e4m3> s) {
    Int offs = arange(0, 128);
    Tile<f8e4m3> x = load(a + offs), y = load(b + offs);
    store(sum + offs, x + y);
    store(prod + offs, x * y * s);  // rounded after each multiplication
    store(lit + offs, full<f8e4m3>({128}, 1 + 0x1p-4 + 0x1p-40));
  });
  Buffer<f8e4m3> sum = fp8_buffer<f8e4m3>(std::vector<uint8_t>(128, 0x5a)), prod = fp8_buffer<f8e4m3>(std::vector<uint8_t>(128, 0x5a)),
                 lit = fp8_buffer<f8e4m3>(std::vector<uint8_t>(128, 0x5a));
  double s = 1.5 + 0x1p-30;  // a double argument for an f8e4m3 parameter: rounds once, to 1.5
  k.launch(Grid(1), sum, prod, lit, fp8_buffer<f8e4m3>(xa), fp8_buffer<f8e4m3>(xb), s);
  std::vector<uint8_t> want_sum, want_prod;
  std::vector<float> shown;
  for (int i = 0; i < 128; ++i) {
    long double x = reference_value(xa[i], kE4M3), y = reference_value(xb[i], kE4M3);
    want_sum.push_back(reference_round(x + y, kE4M3));
    long double xy = reference_value(reference_round(x * y, kE4M3), kE4M3);
    want_prod.push_back(reference_round(xy * 1.5L, kE4M3));
    shown.push_back(static_cast<float>(x));
  }
  check_codes(codes_of(sum), want_sum, shown, "x + y");
  check_codes(codes_of(prod), want_prod, shown, "x * y * s");
  check_codes(codes_of(lit), std::vector<uint8_t>(128, 0x39), shown, "full(1 + 2^-4 + 2^-40)");  // 1.125
}
