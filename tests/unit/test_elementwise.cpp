// Values of the elementwise ops: every op on every element type it applies to, against a C++ reference
// computed in double (floats) or wrapping int64 (integers) and rounded to the result type.
#include "test_util.h"

using namespace weft_test;

namespace {

constexpr int kBlock = 256;
const int64_t kSizes[] = {1, 7, 1000, 4097};  // odd sizes: the last block is masked

// The value of T nearest to the double v, back in double: the reference's rounding after every op.
template <class T> double rnd(double v) { return to_ref<T>(from_ref<T>(v)); }

// Runs `body` (Tile<Ts>... -> Tile<R>) over n fresh inputs per size of kSizes, one generator per input, and
// compares with `ref` (ref_t<Ts>... -> a value rounded to R by from_ref) on the same inputs.
template <class R, class... Ts, class Body, class Ref, class... Gens>
void check_elementwise(Rng& rng, const std::string& what, Body body, Ref ref, Tol tol, Gens... gens) {
  static_assert(sizeof...(Ts) == sizeof...(Gens), "one generator per input");
  Kernel k("elementwise", [body](Ptr<R> out, Int n, Ptr<Ts>... in) {
    Block1D b = block_1d(n, kBlock);
    store(out + b.offs, body(load(in + b.offs, b.in, 1)...), b.in);
  });
  for (int64_t n : kSizes) {
    std::tuple<std::vector<host_t<Ts>>...> inputs{generate<Ts>(rng, n, gens)...};
    std::apply(
        [&](const auto&... x) {
          std::vector<host_t<R>> want(n);
          for (int64_t i = 0; i < n; ++i) want[i] = from_ref<R>(ref(to_ref<Ts>(x[i])...));
          Output<R> out(n);
          launch(k, grid_for(n, kBlock), out, n, Input<Ts>(x)...);
          Context context = [&](size_t i) { return ((show<Ts>(x[i]) + " ") + ...); };
          check_near<R>(out, want, tol, what + " on " + ((type_name<Ts>() + " ") + ...) + "n=" + std::to_string(n),
                        context);
        },
        inputs);
  }
}

template <class T> using Unary = std::function<Tile<T>(Tile<T>)>;
template <class T> using Binary = std::function<Tile<T>(Tile<T>, Tile<T>)>;
using UnaryRef = double (*)(double);
using BinaryRef = double (*)(double, double);

// ---- unary math ------------------------------------------------------------------------------------------

template <class T> void check_unary_math(Rng& rng) {
  struct Case {
    const char* name;
    Unary<T> op;
    UnaryRef ref;
    double lo, hi, ulp_tol;  // inputs uniform in [lo, hi]
  };
  const Case cases[] = {
      {"exp", [](Tile<T> x) { return exp(x); }, [](double x) { return std::exp(x); }, -10, 10, 2.5},
      {"exp2", [](Tile<T> x) { return exp2(x); }, [](double x) { return std::exp2(x); }, -14, 14, 2.5},
      {"log", [](Tile<T> x) { return log(x); }, [](double x) { return std::log(x); }, 0.01, 1000, 2.5},
      {"log2", [](Tile<T> x) { return log2(x); }, [](double x) { return std::log2(x); }, 0.01, 1000, 2.5},
      {"sqrt", [](Tile<T> x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 1000, 0},
      {"rsqrt", [](Tile<T> x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.01, 1000, 2.5},
      {"abs", [](Tile<T> x) { return abs(x); }, [](double x) { return std::fabs(x); }, -100, 100, 0},
      {"sin", [](Tile<T> x) { return sin(x); }, [](double x) { return std::sin(x); }, -10, 10, 2.5},
      {"cos", [](Tile<T> x) { return cos(x); }, [](double x) { return std::cos(x); }, -10, 10, 2.5},
      {"floor", [](Tile<T> x) { return floor(x); }, [](double x) { return std::floor(x); }, -100, 100, 0},
      {"ceil", [](Tile<T> x) { return ceil(x); }, [](double x) { return std::ceil(x); }, -100, 100, 0},
      {"neg", [](Tile<T> x) { return -x; }, [](double x) { return -x; }, -100, 100, 0},
  };
  // ulp_tol is relative to T's epsilon: 2.5 admits 2 ulp of error plus the reference's own rounding.
  for (const Case& c : cases)
    check_elementwise<T, T>(rng, c.name, c.op, c.ref, ulps<T>(c.ulp_tol, 1e-4), uniform_real<T>(c.lo, c.hi));
}

TEST_CASE("unary math functions match libm in every float type", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<FloatTypes>([&](auto t) { check_unary_math<typename decltype(t)::type>(rng); });
}

TEST_CASE("integer negation and abs wrap at the minimum", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<IntTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_elementwise<T, T>(
        rng, "neg", [](Tile<T> x) { return -x; }, [](int64_t x) { return wrap_sub(0, x); }, {}, ints_with_edges<T>());
    check_elementwise<T, T>(
        rng, "abs", [](Tile<T> x) { return abs(x); }, [](int64_t x) { return x < 0 ? wrap_sub(0, x) : x; }, {},
        ints_with_edges<T>());
  });
}

// ---- binary arithmetic -----------------------------------------------------------------------------------

// maximum and minimum of floats as weft defines them (llvm.maximum/minimum, PTX max.NaN/min.NaN): a NaN
// operand gives NaN, and -0 counts as less than +0.
double nan_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double nan_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::nan("");
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

template <class T> void check_float_arithmetic(Rng& rng) {
  struct Case {
    const char* name;
    Binary<T> op;
    BinaryRef ref;
  };
  const Case cases[] = {
      {"+", [](Tile<T> a, Tile<T> b) { return a + b; }, [](double a, double b) { return a + b; }},
      {"-", [](Tile<T> a, Tile<T> b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"*", [](Tile<T> a, Tile<T> b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"/", [](Tile<T> a, Tile<T> b) { return a / b; }, [](double a, double b) { return a / b; }},
      {"%", [](Tile<T> a, Tile<T> b) { return a % b; }, [](double a, double b) { return std::fmod(a, b); }},
      {"maximum", [](Tile<T> a, Tile<T> b) { return maximum(a, b); }, nan_max},
      {"minimum", [](Tile<T> a, Tile<T> b) { return minimum(a, b); }, nan_min},
  };
  // Correctly rounded in the compute type, then rounded to T: the double rounding is innocuous, so the
  // results are exact. A NaN operand propagates, through maximum and minimum too.
  const T nan(std::nanf(""));
  auto a = with_specials<T>(uniform_real<T>(-100, 100), {nan, T(0.f), T(-0.5f)}, 16);
  auto b = nonzero<T>(with_specials<T>(uniform_real<T>(-100, 100), {nan, T(0.001f), T(-0.5f), T(3.f)}, 16));
  for (const Case& c : cases) check_elementwise<T, T, T>(rng, c.name, c.op, c.ref, {}, a, b);
}

template <class T> void check_int_arithmetic(Rng& rng) {
  struct Case {
    const char* name;
    Binary<T> op;
    int64_t (*ref)(int64_t, int64_t);
  };
  // Integer division never traps: x / 0 = 0, x % 0 = 0, MIN / -1 wraps to MIN (and MIN % -1 = 0).
  const Case cases[] = {
      {"+", [](Tile<T> a, Tile<T> b) { return a + b; }, wrap_add},
      {"-", [](Tile<T> a, Tile<T> b) { return a - b; }, wrap_sub},
      {"*", [](Tile<T> a, Tile<T> b) { return a * b; }, wrap_mul},
      {"/", [](Tile<T> a, Tile<T> b) { return a / b; },
       [](int64_t a, int64_t b) { return b == 0 ? 0 : b == -1 ? wrap_sub(0, a) : a / b; }},
      {"%", [](Tile<T> a, Tile<T> b) { return a % b; },
       [](int64_t a, int64_t b) -> int64_t { return b == 0 || b == -1 ? 0 : a % b; }},
      {"maximum", [](Tile<T> a, Tile<T> b) { return maximum(a, b); }, [](int64_t a, int64_t b) { return std::max(a, b); }},
      {"minimum", [](Tile<T> a, Tile<T> b) { return minimum(a, b); }, [](int64_t a, int64_t b) { return std::min(a, b); }},
  };
  // Random pairs, then every pair of edge values (0, ±1, MIN, MIN + 1, MAX, small divisors).
  using L = std::numeric_limits<T>;
  const std::vector<host_t<T>> edges{T(0), T(1), T(-1), T(2), T(-7), L::min(), T(L::min() + 1), L::max()};
  std::vector<host_t<T>> pair_a, pair_b;
  for (host_t<T> x : edges)
    for (host_t<T> y : edges) pair_a.push_back(x), pair_b.push_back(y);
  auto cycle = [](std::vector<host_t<T>> list) { return [list, i = size_t(0)](Rng&) mutable { return list[i++ % list.size()]; }; };
  for (const Case& c : cases) {
    check_elementwise<T, T, T>(rng, c.name, c.op, c.ref, {}, ints_with_edges<T>(), ints_with_edges<T>());
    check_elementwise<T, T, T>(rng, std::string(c.name) + " (edge pairs)", c.op, c.ref, {}, cycle(pair_a), cycle(pair_b));
  }
}

TEST_CASE("float arithmetic remainder maximum and minimum", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<FloatTypes>([&](auto t) { check_float_arithmetic<typename decltype(t)::type>(rng); });
}

TEST_CASE("integer arithmetic wraps and division by zero gives zero", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<IntTypes>([&](auto t) { check_int_arithmetic<typename decltype(t)::type>(rng); });
}

// A constant divisor is lowered differently from a variable one (a multiply by a magic number and shifts on
// NVPTX): quotients round toward zero and remainders take the dividend's sign for each sign of divisor, odd,
// even and near the type's limits.
TEST_CASE("integer division and remainder by constants round toward zero", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<IntTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    const int64_t top = std::numeric_limits<T>::max();
    for (int64_t wanted : {int64_t(3), int64_t(7), int64_t(192), int64_t(1000003), int64_t(-5), int64_t(-192), top,
                           top - 1, -top}) {
      const T c = T(wanted);  // wraps in narrow types; the reference divides by the same value
      const int64_t divisor = c;
      if (divisor == 0 || divisor == 1 || divisor == -1) continue;
      check_elementwise<T, T>(
          rng, "/ " + std::to_string(divisor), [c](Tile<T> a) { return a / c; },
          [divisor](int64_t a) { return a / divisor; }, {}, ints_with_edges<T>());
      check_elementwise<T, T>(
          rng, "% " + std::to_string(divisor), [c](Tile<T> a) { return a % c; },
          [divisor](int64_t a) { return a % divisor; }, {}, ints_with_edges<T>());
    }
  });
}

// Integer literals are exact in every width: an i64 constant past 2^53 (where doubles have gaps) keeps its low
// bits, and two literals one apart are two different constants (and two kernels).
TEST_CASE("integer literals past 2^53 are exact", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  const int64_t big = (int64_t(1) << 60) + 1, odd = std::numeric_limits<int64_t>::max() - 2;
  check_elementwise<int64_t, int64_t>(
      rng, "+ 2^60 + 1", [=](Tile<int64_t> a) { return a + big; },
      [=](int64_t a) { return int64_t(uint64_t(a) + uint64_t(big)); }, {}, ints_with_edges<int64_t>());
  check_elementwise<int64_t, int64_t>(
      rng, "^ (2^63 - 3)", [=](Tile<int64_t> a) { return a ^ odd; }, [=](int64_t a) { return a ^ odd; }, {},
      ints_with_edges<int64_t>());
  check_elementwise<int64_t, int64_t>(
      rng, "where(a < 0, 2^60 + 1, full(2^63 - 3))",
      [=](Tile<int64_t> a) { return where(a < 0, Tile<int64_t>(full<int64_t>({}, big)), scalar<int64_t>(odd)); },
      [=](int64_t a) { return a < 0 ? big : odd; }, {}, ints_with_edges<int64_t>());
}

// ---- bitwise ops and shifts ------------------------------------------------------------------------------

TEST_CASE("bitwise and or xor not on integers and bools", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  auto check = [&]<class T>(std::type_identity<T>) {
    auto g = typical_values<T>();
    check_elementwise<T, T, T>(
        rng, "&", [](Tile<T> a, Tile<T> b) { return a & b; }, [](int64_t a, int64_t b) { return a & b; }, {}, g, g);
    check_elementwise<T, T, T>(
        rng, "|", [](Tile<T> a, Tile<T> b) { return a | b; }, [](int64_t a, int64_t b) { return a | b; }, {}, g, g);
    check_elementwise<T, T, T>(
        rng, "^", [](Tile<T> a, Tile<T> b) { return a ^ b; }, [](int64_t a, int64_t b) { return a ^ b; }, {}, g, g);
    check_elementwise<T, T>(
        rng, "~", [](Tile<T> a) { return ~a; },
        [](int64_t a) -> int64_t { return std::is_same_v<T, bool> ? !a : ~a; }, {}, g);
  };
  for_each_type<IntTypes>(check);
  check(std::type_identity<bool>{});
}

TEST_CASE("shifts by the bit width or more give 0 or the sign fill", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<IntTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    constexpr int bits = 8 * sizeof(T);
    auto amount = with_specials<T>(uniform_int<T>(0, bits + 3), {T(bits), T(bits - 1), T(2 * bits < 127 ? 2 * bits : 127),
                                                                 std::numeric_limits<T>::max()}, 4);
    check_elementwise<T, T, T>(
        rng, "<<", [](Tile<T> a, Tile<T> b) { return a << b; },
        [](int64_t a, int64_t b) -> int64_t { return b >= bits ? 0 : int64_t(uint64_t(a) << b); }, {},
        ints_with_edges<T>(), amount);
    check_elementwise<T, T, T>(
        rng, ">>", [](Tile<T> a, Tile<T> b) { return a >> b; },
        [](int64_t a, int64_t b) -> int64_t { return b >= bits ? (a < 0 ? -1 : 0) : a >> b; }, {},
        ints_with_edges<T>(), amount);
  });
}

// ---- comparisons and logic -------------------------------------------------------------------------------

template <class T> void check_comparisons(Rng& rng) {
  // Small whole numbers make equal pairs common; floats also meet NaN (every comparison false except !=)
  // and infinities.
  auto gen = [] {
    if constexpr (is_float_elem<T>) {
      float inf = std::numeric_limits<float>::infinity();
      return with_specials<T>(small_whole<T>(-3, 3), {T(std::nanf("")), T(inf), T(-inf), T(0.5f), T(-0.f)});
    } else {
      using L = std::numeric_limits<T>;
      return with_specials<T>(small_whole<T>(-3, 3), {L::min(), L::max(), T(L::max() - 1)});
    }
  }();
  using Cmp = std::function<Tile<bool>(Tile<T>, Tile<T>)>;
  struct Case {
    const char* name;
    Cmp op;
    bool (*ref)(ref_t<T>, ref_t<T>);
  };
  const Case cases[] = {
      {"<", [](Tile<T> a, Tile<T> b) { return a < b; }, [](ref_t<T> a, ref_t<T> b) { return a < b; }},
      {"<=", [](Tile<T> a, Tile<T> b) { return a <= b; }, [](ref_t<T> a, ref_t<T> b) { return a <= b; }},
      {">", [](Tile<T> a, Tile<T> b) { return a > b; }, [](ref_t<T> a, ref_t<T> b) { return a > b; }},
      {">=", [](Tile<T> a, Tile<T> b) { return a >= b; }, [](ref_t<T> a, ref_t<T> b) { return a >= b; }},
      {"==", [](Tile<T> a, Tile<T> b) { return a == b; }, [](ref_t<T> a, ref_t<T> b) { return a == b; }},
      {"!=", [](Tile<T> a, Tile<T> b) { return a != b; }, [](ref_t<T> a, ref_t<T> b) { return a != b; }},
  };
  for (const Case& c : cases) check_elementwise<bool, T, T>(rng, c.name, c.op, c.ref, {}, gen, gen);
}

TEST_CASE("comparisons produce bool tiles stored through Ptr<bool>", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<NumericTypes>([&](auto t) { check_comparisons<typename decltype(t)::type>(rng); });
  auto g = uniform_int<bool>();
  check_elementwise<bool, bool, bool>(
      rng, "== on bool", [](Bool a, Bool b) { return a == b; }, [](int64_t a, int64_t b) { return a == b; }, {}, g, g);
  check_elementwise<bool, bool, bool>(
      rng, "!= on bool", [](Bool a, Bool b) { return a != b; }, [](int64_t a, int64_t b) { return a != b; }, {}, g, g);
}

TEST_CASE("logical and or not on bool tiles", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  auto g = uniform_int<bool>();
  check_elementwise<bool, bool, bool>(
      rng, "&&", [](Bool a, Bool b) { return a && b; }, [](int64_t a, int64_t b) { return a && b; }, {}, g, g);
  check_elementwise<bool, bool, bool>(
      rng, "||", [](Bool a, Bool b) { return a || b; }, [](int64_t a, int64_t b) { return a || b; }, {}, g, g);
  check_elementwise<bool, bool>(rng, "!", [](Bool a) { return !a; }, [](int64_t a) { return !a; }, {}, g);
  check_elementwise<bool, bool, bool, bool>(
      rng, "!(a && b) || c", [](Bool a, Bool b, Bool c) { return !(a && b) || c; },
      [](int64_t a, int64_t b, int64_t c) { return !(a && b) || c; }, {}, g, g, g);
}

// ---- selection and fused multiply-add --------------------------------------------------------------------

TEST_CASE("where selects elementwise between tiles and literals", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  auto check = [&]<class T>(std::type_identity<T>) {
    auto g = typical_values<T>();
    check_elementwise<T, bool, T, T>(
        rng, "where(c, a, b)", [](Bool c, Tile<T> a, Tile<T> b) { return where(c, a, b); },
        [](int64_t c, ref_t<T> a, ref_t<T> b) { return c ? a : b; }, {}, uniform_int<bool>(), g, g);
    check_elementwise<T, bool, T>(
        rng, "where(c, a, 1)", [](Bool c, Tile<T> a) { return where(c, a, 1); },
        [](int64_t c, ref_t<T> a) { return c ? a : ref_t<T>(1); }, {}, uniform_int<bool>(), g);
    check_elementwise<T, bool, T>(
        rng, "where(c, 0, b)", [](Bool c, Tile<T> b) { return where(c, 0, b); },
        [](int64_t c, ref_t<T> b) { return c ? ref_t<T>(0) : b; }, {}, uniform_int<bool>(), g);
  };
  for_each_type<AllTypes>(check);
}

TEST_CASE("where with two literals gives int32 for integers and float for floating-point numbers", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  using IntChoice = decltype(where(std::declval<Bool>(), 3, 12));
  using LongChoice = decltype(where(std::declval<Bool>(), 3L, int8_t(12)));
  using FloatChoice = decltype(where(std::declval<Bool>(), 0.5, 2.25f));
  using MixedChoice = decltype(where(std::declval<Bool>(), 1, 2.5));
  using BoolChoice = decltype(where(std::declval<Bool>(), true, false));
  using ConstChoice = decltype(where(std::declval<Bool>(), Const<int64_t>{3}, 4));
  STATIC_REQUIRE(std::is_same_v<IntChoice, Tile<int32_t>>);
  STATIC_REQUIRE(std::is_same_v<LongChoice, Tile<int32_t>>);
  STATIC_REQUIRE(std::is_same_v<FloatChoice, Tile<float>>);
  STATIC_REQUIRE(std::is_same_v<MixedChoice, Tile<float>>);
  STATIC_REQUIRE(std::is_same_v<BoolChoice, Tile<bool>>);
  STATIC_REQUIRE(std::is_same_v<ConstChoice, Tile<int32_t>>);
  // The result has cond's shape: stored through the block's pointers, element by element.
  check_elementwise<int32_t, bool>(
      rng, "where(c, 3, 12)", [](Bool c) { return where(c, 3, 12); }, [](int64_t c) { return int64_t(c ? 3 : 12); },
      {}, uniform_int<bool>());
  check_elementwise<float, bool>(
      rng, "where(c, 0.5, -2.25)", [](Bool c) { return where(c, 0.5, -2.25); },
      [](int64_t c) { return c ? 0.5 : -2.25; }, {}, uniform_int<bool>());
}

TEST_CASE("fma is a * b + c rounded once", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<FloatTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    auto g = uniform_real<T>(-30, 30);
    // f64 is exact; narrower types compute in f32 and may round twice: within one unit in the last place.
    Tol tol = std::is_same_v<T, double> ? Tol{} : ulps<T>(1, 1e-3);
    check_elementwise<T, T, T, T>(
        rng, "fma", [](Tile<T> a, Tile<T> b, Tile<T> c) { return fma(a, b, c); },
        [](double a, double b, double c) { return std::fma(a, b, c); }, tol, g, g, g);
    check_elementwise<T, T, T>(
        rng, "fma(a, 3, c)", [](Tile<T> a, Tile<T> c) { return fma(a, 3, c); },
        [](double a, double c) { return std::fma(a, 3.0, c); }, tol, g, g);
  });
}

// ---- casts -----------------------------------------------------------------------------------------------

// The documented conversion: to bool is != 0; floats to integers truncate toward zero and saturate, NaN
// gives 0; integers to integers wrap; anything to a float rounds to nearest even.
template <class From, class To> host_t<To> reference_cast(host_t<From> x) {
  if constexpr (std::is_same_v<To, bool> || !is_float_elem<From> || is_float_elem<To>) {
    return from_ref<To>(to_ref<From>(x));  // rounded (in long double: every int64 is exact) or wrapped once
  } else {
    double v = std::trunc(to_ref<From>(x));
    double limit = std::ldexp(1.0, 8 * sizeof(To) - 1);
    if (std::isnan(v)) return 0;
    if (v >= limit) return std::numeric_limits<To>::max();
    if (v < -limit) return std::numeric_limits<To>::min();
    return static_cast<To>(v);
  }
}

template <class T> auto cast_source() {
  if constexpr (std::is_same_v<T, bool>) {
    return uniform_int<T>();
  } else if constexpr (is_float_elem<T>) {
    // Magnitudes from 2^-12 to 2^70 (saturating every integer type, overflowing f16), halves and specials.
    auto wide = [](Rng& rng) {
      double m = std::exp2(std::uniform_real_distribution<double>(-12, 70)(rng));
      return host_t<T>(static_cast<T>(std::bernoulli_distribution(0.5)(rng) ? m : -m));
    };
    float inf = std::numeric_limits<float>::infinity();
    return with_specials<T>(wide, {T(std::nanf("")), T(inf), T(-inf), T(0.f), T(-0.f), T(0.5f), T(-0.5f), T(1.5f),
                                   T(-2.5f), T(127.5f), T(-128.75f), T(255.f), T(-32768.f), T(65504.f), T(2147483648.f),
                                   T(-2147483648.f), T(9.2233720368547758e18f)},
                            4);
  } else {
    auto small = uniform_int<T>(-300 < std::numeric_limits<T>::min() ? std::numeric_limits<T>::min() : -300,
                                300 > std::numeric_limits<T>::max() ? std::numeric_limits<T>::max() : 300);
    auto mixed = [small, edges = ints_with_edges<T>()](Rng& rng) mutable {
      return std::bernoulli_distribution(0.5)(rng) ? small(rng) : edges(rng);
    };
    return mixed;
  }
}

TEST_CASE("cast between every pair of element types", "[ops][elementwise][cast]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<AllTypes>([&](auto from) {
    using From = typename decltype(from)::type;
    for_each_type<AllTypes>([&](auto to) {
      using To = typename decltype(to)::type;
      check_elementwise<To, From>(
          rng, "cast<" + type_name<To>() + ">", [](Tile<From> x) { return cast<To>(x); },
          [](ref_t<From> x) { return to_ref<To>(reference_cast<From, To>(from_ref<From>(x))); }, {},
          cast_source<From>());
    });
  });
}

// Conversions that need more than one rounding step on the way must still round once: the first value of
// each pair is the source, the second its correctly rounded result.
TEST_CASE("casts from wide integers and f64 and literals round once to f16 and bf16", "[ops][elementwise][cast]") {
  auto run = []<class From, class To>(std::vector<host_t<From>> src) {
    std::vector<host_t<To>> want;
    for (host_t<From> x : src) want.push_back(reference_cast<From, To>(x));
    Kernel k("cast_edges", [](Ptr<To> out, Int n, Ptr<From> in) {
      Block1D b = block_1d(n, 16);
      store(out + b.offs, cast<To>(load(in + b.offs, b.in)), b.in);
    });
    Output<To> out(src.size());
    launch(k, Grid(1), out, int64_t(src.size()), Input<From>(src));
    check_near<To>(out, want, {}, "cast " + type_name<From>() + " -> " + type_name<To>());
  };
  // 2^25 + 2^17 + 1 lies just above a bf16 midpoint, but f32 rounds it onto the midpoint itself.
  run.operator()<int32_t, bf16>({(1 << 25) + (1 << 17) + 1, -((1 << 25) + (1 << 17) + 1), 12345});
  run.operator()<int64_t, bf16>({(int64_t(1) << 40) + (int64_t(1) << 32) + 1, INT64_MAX, INT64_MIN, -77});
  // 1 + 2^-11 + 2^-40 is just above an f16 midpoint; 1 + 2^-8 + 2^-40 just above a bf16 one.
  run.operator()<double, f16>({1 + 0x1p-11 + 0x1p-40, -(1 + 0x1p-11 + 0x1p-40), 1 + 0x1p-11, 0.1, 70000.0});
  run.operator()<double, bf16>({1 + 0x1p-8 + 0x1p-40, -(1 + 0x1p-8 + 0x1p-40), 1 + 0x1p-8, 0.1, 1e39});
  // A literal (a double) is rounded to the tile's type once as well.
  auto literal = []<class T>(double v) {
    Kernel k("literal_edges", [v](Ptr<T> out) { store(out + arange(0, 16), full<T>({16}, v)); });
    Output<T> out(16);
    launch(k, Grid(1), out);
    check_near<T>(out, std::vector<host_t<T>>(16, from_ref<T>(v)), {}, "full<" + type_name<T>() + ">");
  };
  literal.operator()<f16>(1 + 0x1p-11 + 0x1p-40);
  literal.operator()<bf16>(-(1 + 0x1p-8 + 0x1p-40));
}

// ---- literals and scalar arguments -----------------------------------------------------------------------

TEST_CASE("literals take the element type of the tile they meet", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<FloatTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    // 0.1 and 1/3 are not representable: each literal is rounded to T, and so is every intermediate.
    check_elementwise<T, T>(
        rng, "(x * 0.1 + 3) / (1.0 / 3)", [](Tile<T> x) { return (x * 0.1 + 3) / (1.0 / 3); },
        [](double x) { return rnd<T>(rnd<T>(rnd<T>(x * rnd<T>(0.1)) + 3) / rnd<T>(1.0 / 3)); }, {},
        uniform_real<T>(-100, 100));
    check_elementwise<T, T>(
        rng, "maximum(0.5 - x, -2.25)", [](Tile<T> x) { return maximum(0.5 - x, -2.25); },
        [](double x) { return std::fmax(rnd<T>(0.5 - x), -2.25); }, {}, uniform_real<T>(-100, 100));
  });
  for_each_type<IntTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_elementwise<T, T>(
        rng, "(x * 3 + 7) % 5 - (x >> 1)", [](Tile<T> x) { return (x * 3 + 7) % 5 - (x >> 1); },
        [](int64_t x) {
          int64_t y = from_ref<T>(wrap_add(from_ref<T>(wrap_mul(x, 3)), 7));
          return wrap_sub(y % 5, x >> 1);
        },
        {}, ints_with_edges<T>());
    check_elementwise<T, T>(
        rng, "x / 0 + x % 0", [](Tile<T> x) { return x / 0 + x % 0; }, [](int64_t) { return int64_t(0); }, {},
        ints_with_edges<T>());
  });
}

TEST_CASE("rank-0 and splat values are rounded to their type after every op", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<FloatTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    // One program per element: the chain runs on rank-0 values, then on splats (tiles of equal elements).
    Kernel k("scalar_chain", [](Ptr<T> out, Ptr<T> splat_out, Ptr<T> x, Ptr<T> y) {
      Int i = program_id(0);
      Scalar<T> a = load(x + i), b = load(y + i);
      store(out + i, (a * b + 3) / (b - 0.1));
      Tile<T> splat = (broadcast_to(a, {4}) * b + 3) / (b - 0.1);
      store(splat_out + i * 4 + arange(0, 4), splat);
    });
    const int64_t n = 300;
    auto g = uniform_real<T>(-10, 10);
    std::vector<host_t<T>> x = generate<T>(rng, n, g), y = generate<T>(rng, n, g), want(n), want_splat(4 * n);
    for (int64_t i = 0; i < n; ++i) {
      double a = to_ref<T>(x[i]), b = to_ref<T>(y[i]);
      want[i] = from_ref<T>(rnd<T>(rnd<T>(a * b) + 3) / rnd<T>(b - rnd<T>(0.1)));
      for (int j = 0; j < 4; ++j) want_splat[4 * i + j] = want[i];
    }
    Output<T> out(n), splat_out(4 * n);
    launch(k, Grid(n), out, splat_out, Input<T>(x), Input<T>(y));
    check_near<T>(out, want, {}, "(a * b + 3) / (b - 0.1) on rank-0 " + type_name<T>());
    check_near<T>(splat_out, want_splat, {}, "(a * b + 3) / (b - 0.1) on splats of " + type_name<T>());
  });
}

TEST_CASE("a scalar kernel argument broadcasts against a tile", "[ops][elementwise]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<NumericTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    Kernel k("scalar_arg", [](Ptr<T> out, Int n, Ptr<T> x, Scalar<T> s) {
      Block1D b = block_1d(n, kBlock);
      Tile<T> v = load(x + b.offs, b.in);
      store(out + b.offs, (s - v) * s + maximum(v, s), b.in);
    });
    auto gen = typical_values<T>();
    for (int64_t n : kSizes) {
      std::vector<host_t<T>> x = generate<T>(rng, n, gen);
      ref_t<T> s = to_ref<T>(generate<T>(rng, 2, gen)[1]);
      std::vector<host_t<T>> want(n);
      for (int64_t i = 0; i < n; ++i) {
        ref_t<T> v = to_ref<T>(x[i]);
        if constexpr (is_float_elem<T>)
          want[i] = from_ref<T>(rnd<T>(rnd<T>(s - v) * s) + std::fmax(v, s));
        else
          want[i] = from_ref<T>(wrap_add(wrap_mul(wrap_sub(s, v), s), std::max(v, s)));
      }
      Output<T> out(n);
      launch(k, grid_for(n, kBlock), out, n, Input<T>(x), s);
      INFO("s = " << s);
      check_near<T>(out, want, {}, "(s - x) * s + maximum(x, s) on " + type_name<T>());
    }
  });
}

}  // namespace
