// Shared helpers of the op value tests: freshly seeded random inputs, device outputs poisoned before every
// launch, double-precision references rounded to the element type under test, and comparisons that report
// the first mismatches.
//
// Host-side element storage is `host_t<T>`: T itself, except bool, which a device buffer stores as one byte
// per element (std::vector<bool> has no contiguous storage), so the host sees it as int8_t 0/1.
#pragma once

#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace weft_test {

using namespace weft;

// ---- element types on the host ------------------------------------------------------------------------

template <class T> using host_t = std::conditional_t<std::is_same_v<T, bool>, int8_t, T>;
template <class T> inline constexpr bool is_16bit_float = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;
template <class T> std::string type_name() { return dtype_of<T>.str(); }

// Every element type, and the numeric ones (no bool).
using AllTypes = std::tuple<bool, int8_t, int16_t, int32_t, int64_t, f16, bf16, float, double>;
using NumericTypes = std::tuple<int8_t, int16_t, int32_t, int64_t, f16, bf16, float, double>;
using IntTypes = std::tuple<int8_t, int16_t, int32_t, int64_t>;
using FloatTypes = std::tuple<f16, bf16, float, double>;

// Calls f(std::type_identity<T>{}) for each T of the tuple type List.
template <class List, class F> void for_each_type(F&& f) {
  [&]<class... T>(std::tuple<T...>*) { (f(std::type_identity<T>{}), ...); }(static_cast<List*>(nullptr));
}

// The reference domain of T: double for floats, int64_t for integers and bool.
template <class T> using ref_t = std::conditional_t<is_float_elem<T>, double, int64_t>;

template <class T> ref_t<T> to_ref(host_t<T> v) {
  if constexpr (is_16bit_float<T>)
    return static_cast<double>(static_cast<float>(v));
  else
    return static_cast<ref_t<T>>(v);
}

// ---- rounding references ------------------------------------------------------------------------------

// x rounded to nearest-even with `mant_bits` fraction bits, exponents in [min_exp, max_exp] (gradual
// underflow below min_exp, infinity past the largest finite value). Computed independently of weft's own
// conversions so that it can judge them.
template <class F> F round_to_format(F x, int mant_bits, int min_exp, int max_exp) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  F a = std::fabs(x);
  F overflow = std::ldexp(F(2) - std::ldexp(F(1), -(mant_bits + 1)), max_exp);
  if (a >= overflow) return std::copysign(std::numeric_limits<F>::infinity(), x);
  int e;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
  F ulp = std::ldexp(F(1), std::max(e - 1, min_exp) - mant_bits);
  return std::copysign(std::nearbyint(a / ulp) * ulp, x);
}
template <class F> F round_f16(F x) { return round_to_format(x, 10, -14, 15); }
template <class F> F round_bf16(F x) { return round_to_format(x, 7, -126, 127); }

// The value T holds nearest to x (long double keeps every int64 exact). Integers wrap (two's complement);
// bool is x != 0.
template <class T, class X> host_t<T> from_ref(X x) {
  if constexpr (std::is_same_v<T, bool>) {
    return x != 0 ? 1 : 0;
  } else if constexpr (std::is_same_v<T, f16>) {
    return f16(static_cast<float>(round_f16(static_cast<long double>(x))));  // exact: already rounded
  } else if constexpr (std::is_same_v<T, bf16>) {
    return bf16(static_cast<float>(round_bf16(static_cast<long double>(x))));
  } else if constexpr (is_float_elem<T>) {
    return static_cast<T>(x);
  } else {
    static_assert(std::is_integral_v<X>, "integer results come from integer references");
    return static_cast<T>(static_cast<uint64_t>(x));  // modular
  }
}

// Machine epsilon of a floating-point element type (the spacing of values just above 1).
template <class T> constexpr double eps() {
  if constexpr (std::is_same_v<T, f16>) return 0x1p-10;
  else if constexpr (std::is_same_v<T, bf16>) return 0x1p-7;
  else if constexpr (std::is_same_v<T, float>) return 0x1p-23;
  else return 0x1p-52;
}

// fp8 tensor-core accumulation: one wgmma m64nNk32 step adds 32 products to the accumulator after
// aligning all 33 terms to the largest one's exponent and keeping about 13 bits below it (truncated), so a
// step may lose up to 33 * 2^-13 of its largest term. Adds `products` (in K order, 32 per step) to `acc`
// exactly and returns twice that bound summed over the steps: what the GPU's sum may differ by. (The CPU
// backend sums exactly and rounds to f32 once per async_dot, well within it.)
inline double add_fp8_wgmma_steps(const std::vector<double>& products, double& acc) {
  double bound = 0;
  for (size_t g = 0; g < products.size(); g += 32) {
    double largest = std::fabs(acc);
    for (size_t k = g; k < std::min(products.size(), g + 32); ++k) {
      acc += products[k];
      largest = std::max(largest, std::fabs(products[k]));
    }
    bound += 33 * 0x1p-12 * std::max(largest, std::fabs(acc));
  }
  return bound;
}

// Wrapping integer arithmetic on int64 (the low bits are right for every narrower type).
inline int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) + uint64_t(b)); }
inline int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) - uint64_t(b)); }
inline int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(uint64_t(a) * uint64_t(b)); }

// ---- random inputs ------------------------------------------------------------------------------------

// A fresh seed per test (WEFT_TEST_SEED=<n> replays one).
inline uint64_t test_seed() {
  if (const char* s = std::getenv("WEFT_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  std::random_device rd;
  return (uint64_t(rd()) << 32) | rd();
}

// Declares `rng`, freshly seeded; the seed is reported with every failure in the enclosing scope.
#define WEFT_SEEDED_RNG(rng)                                                                      \
  const uint64_t rng##_seed = ::weft_test::test_seed();                                           \
  INFO("random seed " << rng##_seed << " (replay with WEFT_TEST_SEED=" << rng##_seed << ")");     \
  std::mt19937_64 rng(rng##_seed)

using Rng = std::mt19937_64;

// Generators: callables Rng& -> host_t<T>, one value per call.
template <class T> auto uniform_real(double lo, double hi) {
  return [=](Rng& rng) { return host_t<T>(static_cast<T>(std::uniform_real_distribution<double>(lo, hi)(rng))); };
}
template <class T>
auto uniform_int(int64_t lo = std::numeric_limits<host_t<T>>::min(), int64_t hi = std::numeric_limits<host_t<T>>::max()) {
  if constexpr (std::is_same_v<T, bool>) lo = 0, hi = 1;
  return [=](Rng& rng) { return static_cast<host_t<T>>(std::uniform_int_distribution<int64_t>(lo, hi)(rng)); };
}
// Whole numbers in [lo, hi] as T: many ties and equal pairs.
template <class T> auto small_whole(int lo, int hi) {
  return [=](Rng& rng) { return host_t<T>(static_cast<T>(std::uniform_int_distribution<int>(lo, hi)(rng))); };
}
// `base`, with about one value in `one_in` replaced by a random pick of `specials`.
template <class T, class G> auto with_specials(G base, std::vector<host_t<T>> specials, int one_in = 8) {
  return [=](Rng& rng) mutable {
    if (std::uniform_int_distribution<int>(0, one_in - 1)(rng) == 0)
      return specials[std::uniform_int_distribution<size_t>(0, specials.size() - 1)(rng)];
    return host_t<T>(base(rng));
  };
}
// The integer edge cases 0, ±1, MIN, MIN + 1, MAX mixed into uniform values of the whole range.
template <class T> auto ints_with_edges() {
  using L = std::numeric_limits<T>;
  return with_specials<T>(uniform_int<T>(), {T(0), T(1), T(-1), L::min(), T(L::min() + 1), L::max()}, 6);
}
// A value of `g` that is not zero.
template <class T, class G> auto nonzero(G g) {
  return [=](Rng& rng) mutable {
    host_t<T> v = g(rng);
    while (to_ref<T>(v) == 0) v = g(rng);
    return v;
  };
}

// Values of any size for ops that take any value: floats in [-100, 100], integers over their whole range
// with the edge cases mixed in, bools 0/1.
template <class T> auto typical_values() {
  if constexpr (is_float_elem<T>)
    return uniform_real<T>(-100, 100);
  else if constexpr (std::is_same_v<T, bool>)
    return uniform_int<T>();
  else
    return ints_with_edges<T>();
}

template <class T, class G> std::vector<host_t<T>> generate(Rng& rng, size_t n, G g) {
  std::vector<host_t<T>> v(n);
  bool all_zero = true;
  for (auto& x : v) {
    x = g(rng);
    all_zero = all_zero && to_ref<T>(x) == 0;
  }
  if (all_zero && n > 1) v[n / 2] = host_t<T>(static_cast<T>(1));  // inputs are never all zeros
  return v;
}

// ---- device arrays ------------------------------------------------------------------------------------

// The poison of an output buffer: a NaN with a payload no computation makes, or the 0x5A byte pattern.
template <class T> host_t<T> poison_value() {
  host_t<T> v;
  if constexpr (std::is_same_v<T, float>) {
    uint32_t bits = 0x7fc5a5a5u;
    std::memcpy(&v, &bits, 4);
  } else if constexpr (std::is_same_v<T, double>) {
    uint64_t bits = 0x7ff85a5a5a5a5a5aull;
    std::memcpy(&v, &bits, 8);
  } else if constexpr (std::is_same_v<T, f16>) {
    v = f16::from_bits(0x7e5a);
  } else if constexpr (std::is_same_v<T, bf16>) {
    v = bf16::from_bits(0x7fda);
  } else {
    std::memset(&v, 0x5a, sizeof v);
  }
  return v;
}
template <class T> bool is_poison(host_t<T> v) {
  host_t<T> p = poison_value<T>();
  return std::memcmp(&v, &p, sizeof v) == 0;
}

template <class T> std::string show(host_t<T> v) {
  std::ostringstream os;
  os.precision(17);
  if (is_poison<T>(v)) return "<poison>";
  if constexpr (is_float_elem<T>)
    os << to_ref<T>(v);
  else
    os << static_cast<int64_t>(v);
  return os.str();
}

template <class T> class DeviceArray {
 public:
  explicit DeviceArray(size_t n, Device d = Device::current()) : buf_(d.alloc<host_t<T>>(n)) {}
  explicit DeviceArray(const std::vector<host_t<T>>& host, Device d = Device::current()) : buf_(d.upload(host)) {}
  size_t size() const { return buf_.size(); }
  // The launch argument: the buffer, or for bool its address typed bool*.
  auto arg() const {
    if constexpr (std::is_same_v<T, bool>)
      return static_cast<bool*>(buf_.data());
    else
      return buf_;
  }
  std::vector<host_t<T>> read() const { return buf_.download(); }
  void write(const std::vector<host_t<T>>& host) const {
    Buffer<host_t<T>> b = buf_;  // a handle to the same allocation
    b.upload(host);
  }

 private:
  Buffer<host_t<T>> buf_;
};

template <class T> struct Input : DeviceArray<T> {
  explicit Input(const std::vector<host_t<T>>& host, Device d = Device::current()) : DeviceArray<T>(host, d) {}
};
// An output buffer; `launch` fills it with poison before every launch. On a GPU, `launch` also runs the
// kernel on the CPU backend with the same inputs and keeps that result here (`cpu_result`), so that the
// checks below compare the GPU with the CPU backend as well as with the double reference.
template <class T> struct Output : DeviceArray<T> {
  explicit Output(size_t n, Device d = Device::current()) : DeviceArray<T>(n, d) {}
  void poison() const { this->write(std::vector<host_t<T>>(this->size(), poison_value<T>())); }
  const std::vector<host_t<T>>* cpu_result() const { return cpu_result_ ? cpu_result_.get() : nullptr; }
  void set_cpu_result(std::vector<host_t<T>> v) const { cpu_result_ = std::make_shared<std::vector<host_t<T>>>(std::move(v)); }

 private:
  mutable std::shared_ptr<std::vector<host_t<T>>> cpu_result_;
};

template <class X> struct is_device_array : std::false_type {};
template <class T> struct is_device_array<Input<T>> : std::true_type {};
template <class T> struct is_device_array<Output<T>> : std::true_type {};
template <class X> struct is_output : std::false_type {};
template <class T> struct is_output<Output<T>> : std::true_type {};
template <class X> struct is_input : std::false_type {};
template <class T> struct is_input<Input<T>> : std::true_type {};
// Launch arguments that are neither test arrays nor plain values (raw Buffers, pointers): a kernel taking
// one cannot be replayed on the CPU backend by `launch`.
template <class X> inline constexpr bool is_plain_value = std::is_arithmetic_v<X> || std::is_same_v<X, f16> || std::is_same_v<X, bf16>;

template <class X> auto device_arg(const X& x) {
  if constexpr (is_device_array<X>::value)
    return x.arg();
  else
    return x;
}

// The CPU-backend copy of one launch argument: inputs copied over, outputs poisoned, values as they are.
template <class X> X cpu_twin(const X& x) {
  if constexpr (is_input<X>::value) {
    return X(x.read(), Device::cpu());
  } else if constexpr (is_output<X>::value) {
    X twin(x.size(), Device::cpu());
    twin.poison();
    return twin;
  } else {
    return x;
  }
}

namespace detail_ {
// The GPU and the CPU backend must write the same elements, and the same integers; floats are compared by
// the checks (check_near, check_within) with the test's own tolerance.
template <class T> void check_same_writes(const Output<T>& gpu, const Output<T>& cpu) {
  std::vector<host_t<T>> g = gpu.read(), c = cpu.read();
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    bool same = is_poison<T>(g[i]) == is_poison<T>(c[i]);
    if constexpr (!is_float_elem<T>) same = same && g[i] == c[i];
    if (!same && ++bad <= 8)
      FAIL_CHECK("GPU vs CPU backend [" << i << "]: GPU " << show<T>(g[i]) << ", CPU " << show<T>(c[i]));
  }
  CHECK(bad == 0);
}
}  // namespace detail_

// Poisons every Output among `args`, then launches k with them. On a GPU the same launch also runs on the
// CPU backend (when every argument can be copied there), each output is compared with its CPU twin for
// which elements were written (and for integers their values), and the CPU result is kept for the checks.
template <class... A> void launch(const Kernel& k, const Grid& grid, const A&... args) {
  auto poison = [](const auto& a) {
    if constexpr (is_output<std::remove_cvref_t<decltype(a)>>::value) a.poison();
  };
  (poison(args), ...);
  k.launch(grid, device_arg(args)...);
  constexpr bool replayable = ((is_device_array<A>::value || is_plain_value<A>) && ...);
  if constexpr (replayable) {
    if (Device::current().kind() == BackendKind::cpu) return;
    std::tuple<A...> twins{cpu_twin(args)...};
    std::apply([&](const auto&... t) { k.launch(Device::cpu().stream(), grid, device_arg(t)...); }, twins);
    auto keep = [](const auto& gpu, const auto& cpu) {
      if constexpr (is_output<std::remove_cvref_t<decltype(gpu)>>::value) {
        detail_::check_same_writes(gpu, cpu);
        gpu.set_cpu_result(cpu.read());
      }
    };
    std::apply([&](const auto&... t) { (keep(args, t), ...); }, twins);
  }
}

// ---- kernel-side helpers ------------------------------------------------------------------------------

// This program's block of a 1-D launch: offsets program_id * block + [0, block), and which are below n.
struct Block1D {
  Int offs;
  Bool in;
};
inline Block1D block_1d(const Int& n, int block) {
  Int offs = program_id(0) * block + arange(0, block);
  return {offs, offs < n};
}
inline Grid grid_for(int64_t n, int block) { return Grid((n + block - 1) / block); }

inline int64_t numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// ---- comparisons --------------------------------------------------------------------------------------

// |got - want| <= abs + rel * |want|.
struct Tol {
  double rel = 0, abs = 0;
};
// k units of T's epsilon, relative, with the same absolute slack scaled by `scale`.
template <class T> Tol ulps(double k, double scale = 1) { return {k * eps<T>(), k * eps<T>() * scale}; }

using Context = std::function<std::string(size_t)>;  // describes the inputs of element i


namespace detail_ {
// Counts the elements for which ok(i) is false, reporting the first few, then asserts there were none.
template <class Ok, class Describe>
void check_all(size_t n, const std::string& what, Ok ok, Describe describe, const Context& context) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (ok(i)) continue;
    if (++bad <= 8) FAIL_CHECK(what << " [" << i << "]: " << describe(i) << (context ? "  inputs: " + context(i) : ""));
  }
  INFO(what << ": " << bad << " of " << n << " elements differ");
  CHECK(bad == 0);
}
}  // namespace detail_

// Element-wise comparison of a device result with a reference already in T. Integers and bools must match
// exactly; floats within `tol` (NaN matches NaN, infinities match themselves); poison matches only a
// reference equal to it (an i8 result may be 0x5A).
template <class T>
void check_near(const std::vector<host_t<T>>& got, const std::vector<host_t<T>>& want, Tol tol = {},
                const std::string& what = "result", const Context& context = {}) {
  REQUIRE(got.size() == want.size());
  auto ok = [&](size_t i) {
    if (is_poison<T>(got[i])) return is_poison<T>(want[i]);  // an i8 result may be 0x5A by right
    if constexpr (is_float_elem<T>) {
      double g = to_ref<T>(got[i]), w = to_ref<T>(want[i]);
      if (std::isnan(w) || std::isnan(g)) return std::isnan(w) && std::isnan(g);
      if (std::isinf(w) || std::isinf(g)) return g == w;
      return std::fabs(g - w) <= tol.abs + tol.rel * std::fabs(w);
    } else {
      return got[i] == want[i];
    }
  };
  detail_::check_all(
      got.size(), what, ok, [&](size_t i) { return "got " + show<T>(got[i]) + ", want " + show<T>(want[i]); }, context);
}

// Comparison with an unrounded double reference: |got - want| <= tol[i] for each element.
template <class T>
void check_within(const std::vector<host_t<T>>& got, const std::vector<double>& want, const std::vector<double>& tol,
                  const std::string& what = "result", const Context& context = {}) {
  REQUIRE(got.size() == want.size());
  REQUIRE(tol.size() == want.size());
  auto ok = [&](size_t i) {
    if (is_poison<T>(got[i])) return false;
    double g = static_cast<double>(to_ref<T>(got[i]));
    if (std::isnan(want[i]) || std::isnan(g)) return std::isnan(want[i]) && std::isnan(g);
    return std::fabs(g - want[i]) <= tol[i];
  };
  auto describe = [&](size_t i) {
    std::ostringstream os;
    os.precision(17);
    os << "got " << show<T>(got[i]) << ", want " << want[i] << " +- " << tol[i];
    return os.str();
  };
  detail_::check_all(got.size(), what, ok, describe, context);
}

// The same checks of an Output: its GPU values against the reference and, where `launch` ran the kernel on
// the CPU backend too, against that result, within twice the tolerance (each within `tol` of the reference).
template <class T>
void check_near(const Output<T>& out, const std::vector<host_t<T>>& want, Tol tol = {}, const std::string& what = "result",
                const Context& context = {}) {
  std::vector<host_t<T>> got = out.read();
  check_near<T>(got, want, tol, what, context);
  if (const auto* cpu = out.cpu_result())
    check_near<T>(got, *cpu, {2 * tol.rel, 2 * tol.abs}, what + " (GPU vs CPU backend)", context);
}
template <class T>
void check_within(const Output<T>& out, const std::vector<double>& want, const std::vector<double>& tol,
                  const std::string& what = "result", const Context& context = {}) {
  std::vector<host_t<T>> got = out.read();
  check_within<T>(got, want, tol, what, context);
  if (const auto* cpu = out.cpu_result()) {
    std::vector<double> cpu_values(cpu->size()), twice(tol.size());
    for (size_t i = 0; i < cpu->size(); ++i) cpu_values[i] = to_ref<T>((*cpu)[i]);
    for (size_t i = 0; i < tol.size(); ++i) twice[i] = 2 * tol[i];
    check_within<T>(got, cpu_values, twice, what + " (GPU vs CPU backend)", context);
  }
}

// Asserts that every element of `got` is poison (memory that must not have been written).
template <class T> void check_untouched(const std::vector<host_t<T>>& got, size_t from, size_t to, const std::string& what) {
  size_t touched = 0;
  for (size_t i = from; i < to; ++i) touched += !is_poison<T>(got[i]);
  INFO(what << ": elements [" << from << ", " << to << ") must keep their poison");
  CHECK(touched == 0);
}

// ---- text: PTX and messages ---------------------------------------------------------------------------

// How many times `what` occurs in `text`, counted without overlap (as Python's str.count).
inline size_t count_occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// How many lines of `text` contain `what`.
inline size_t count_lines_containing(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}

}  // namespace weft_test
