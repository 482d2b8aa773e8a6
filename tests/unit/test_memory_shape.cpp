// Values of loads and stores (masks, fill values, odd sizes, scalars, i64 offsets, 2-D addressing) and of
// the shape ops (broadcast_to, reshape, expand_dims, permute, trans).
#include <numeric>

#include "test_util.h"

using namespace weft_test;

namespace {

const int64_t kSizes[] = {1, 7, 1000, 4097};

// ---- 1-D loads and stores ------------------------------------------------------------------------------

// Copies x under the block mask, and loads it again under a sparser mask (offsets not divisible by 3) with
// and without a fill value, storing those unmasked over the whole grid. Every output has room past the
// grid, so stray writes land in poison that is checked.
template <class T> void check_masked_copy(Rng& rng) {
  static constexpr double fill = std::is_same_v<T, bool> ? 1 : -7;
  Kernel k("masked_copy", [](Ptr<T> x, Ptr<T> copy, Ptr<T> filled, Ptr<T> zeroed, Int n, Const<int> block) {
    Block1D b = block_1d(n, block);
    Bool sparse = b.in & (b.offs % 3 != 0);
    store(copy + b.offs, load(x + b.offs, b.in), b.in);
    store(filled + b.offs, load(x + b.offs, sparse, fill));
    store(zeroed + b.offs, load(x + b.offs, sparse));
  });
  for (int block : {1, 8, 256, 1024}) {
    for (int64_t n : kSizes) {
      if (n / block > 512) continue;  // enough programs
      INFO(type_name<T>() << " n = " << n << ", block = " << block);
      std::vector<host_t<T>> x = generate<T>(rng, n, typical_values<T>());
      const int64_t grid = (n + block - 1) / block, covered = grid * block, size = covered + 16;
      Output<T> copy(size), filled(size), zeroed(size);
      launch(k, Grid(grid), Input<T>(x), copy, filled, zeroed, n, block);

      std::vector<host_t<T>> want_copy(x), want_filled(covered), want_zeroed(covered);
      for (int64_t i = 0; i < covered; ++i) {
        bool taken = i < n && i % 3 != 0;
        want_filled[i] = taken ? x[i] : from_ref<T>(ref_t<T>(fill));
        want_zeroed[i] = taken ? x[i] : from_ref<T>(0);
      }
      auto got_copy = copy.read(), got_filled = filled.read(), got_zeroed = zeroed.read();
      check_untouched<T>(got_copy, n, size, "masked store");
      check_untouched<T>(got_filled, covered, size, "store past the grid");
      got_copy.resize(n), got_filled.resize(covered), got_zeroed.resize(covered);
      check_near<T>(got_copy, want_copy, {}, "masked copy");
      check_near<T>(got_filled, want_filled, {}, "load with fill");
      check_near<T>(got_zeroed, want_zeroed, {}, "load with mask only (fill 0)");
    }
  }
}

TEST_CASE("masked loads and stores at odd sizes with fill values", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<AllTypes>([&](auto t) { check_masked_copy<typename decltype(t)::type>(rng); });
}

TEST_CASE("unmasked loads and stores of whole blocks", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  Kernel k("copy_scaled", [](Ptr<float> x, Ptr<float> out) {
    Int offs = program_id(0) * 128 + arange(0, 128);
    store(out + offs, load(x + offs) * 3);
  });
  std::vector<float> x = generate<float>(rng, 1024, uniform_real<float>(-1e3, 1e3)), want(x);
  for (float& v : want) v *= 3;
  Output<float> out(1024 + 16);
  launch(k, Grid(8), Input<float>(x), out);
  std::vector<float> got = out.read();
  check_untouched<float>(got, 1024, 1040, "past the grid");
  got.resize(1024);
  check_near<float>(got, want);
}

// One program per element: rank-0 loads and stores through Ptr, masked rank-0 stores, and a load through a
// kernel's pointer argument itself (no offset).
template <class T> void check_scalar_access(Rng& rng) {
  Kernel k("scalar_access", [](Ptr<T> x, Ptr<T> out, Ptr<T> odd, Ptr<T> first, Int n) {
    Int i = program_id(0);
    Scalar<T> v = load(x + i);
    store(out + i, where(i % 2 == 0, v, load(x + (n - 1 - i))));
    store(odd + i, v, i % 2 == 1);
    store(first, load(x), i == n - 1);
  });
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(100)}) {
    INFO(type_name<T>() << " n = " << n);
    std::vector<host_t<T>> x = generate<T>(rng, n, typical_values<T>());
    Output<T> out(n), odd(n), first(2);
    launch(k, Grid(n), Input<T>(x), out, odd, first, n);
    std::vector<host_t<T>> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = i % 2 == 0 ? x[i] : x[n - 1 - i];
    check_near<T>(out, want, {}, "scalar load and store");
    std::vector<host_t<T>> got_odd = odd.read();
    for (int64_t i = 0; i < n; ++i) {
      if (i % 2 == 0)
        check_untouched<T>(got_odd, i, i + 1, "masked-off scalar store");
      else
        check_near<T>(std::vector{got_odd[i]}, {x[i]}, {}, "masked scalar store");
    }
    std::vector<host_t<T>> got_first = first.read();
    check_near<T>(std::vector{got_first[0]}, {x[0]}, {}, "load through the pointer argument");
    check_untouched<T>(got_first, 1, 2, "past a scalar store");
  }
}

// Rows of 16-bit elements at every 2-byte offset from a 16-byte boundary (row strides of odd length,
// starting columns 0 to 7): a thread's 8 consecutive elements are one 16-byte chunk the compiler knows is
// consecutive but not aligned. On NVIDIA such a chunk is read as the two aligned 16-byte blocks around it,
// shifted; a chunk that a mask cuts is read element by element. The last row ends at the end of the input.
template <class T> void check_misaligned_rows(Rng& rng) {
  constexpr int R = 16, C = 64;
  Kernel k("misaligned_rows", [](Ptr<T> x, Ptr<T> whole, Ptr<T> masked, Int K, Int k0, Int limit) {
    Int r = expand_dims(arange(0, R), 1), c = expand_dims(arange(0, C), 0);
    Ptr<T> at = x + (r * K + k0 + c);
    store(whole + (r * C + c), load(at));
    store(masked + (r * C + c), load(at, broadcast_to(c < limit, {R, C}), -3));
  });
  for (int K : {64, 65, 67, 72, 129}) {
    for (int k0 = 0; k0 < 8; ++k0) {
      const int limit = 13 + 5 * k0;  // cuts one chunk of each row, leaves the others whole
      INFO(type_name<T>() << " row stride " << K << ", first column " << k0 << ", mask c < " << limit);
      const int64_t n = int64_t(R - 1) * K + k0 + C;  // the last element read is the input's last
      std::vector<host_t<T>> x = generate<T>(rng, n, typical_values<T>());
      Output<T> whole(R * C), masked(R * C);
      launch(k, Grid(1), Input<T>(x), whole, masked, K, k0, limit);
      std::vector<host_t<T>> want(R * C), want_masked(R * C);
      for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
          want[i * C + j] = x[size_t(i) * K + k0 + j];
          want_masked[i * C + j] = j < limit ? want[i * C + j] : from_ref<T>(-3);
        }
      check_near<T>(whole, want, {}, "unmasked load");
      check_near<T>(masked, want_masked, {}, "masked load");
    }
  }
}

// `rows` rows written at stride K from column k0, row i's first `stored` elements equal to want(i), and every
// other element of `got` untouched (between rows, past a row's stored elements, past the last row).
template <class T, class Want>
void check_stored_rows(const std::vector<host_t<T>>& got, int rows, int K, int k0, int stored, Want&& want,
                       const std::string& what) {
  size_t at = 0;  // elements before `at` checked
  for (int i = 0; i < rows; ++i) {
    const size_t row = size_t(i) * K + k0;
    check_untouched<T>(got, at, row, what + ": between rows");
    check_near<T>(std::vector<host_t<T>>(got.begin() + row, got.begin() + row + stored), want(i), {}, what);
    at = row + stored;
  }
  check_untouched<T>(got, at, got.size(), what + ": past the last row");
}

// The same rows written: a tile read from aligned rows is stored at every 2-byte offset (row strides of odd
// length, first columns 0 to 7), whole and under a mask that cuts one chunk of each row. On NVIDIA a warp's
// lanes then store aligned 16-byte blocks joined across lanes where consecutive chunks follow in memory (a
// row's), element by element where they do not (a row's first chunk, the mask's edge); every element outside
// the stored ones must keep its poison.
template <class T> void check_misaligned_row_stores(Rng& rng) {
  constexpr int R = 16, C = 64;
  Kernel k("misaligned_row_stores", [](Ptr<T> x, Ptr<T> whole, Ptr<T> masked, Int K, Int k0, Int limit) {
    Int r = expand_dims(arange(0, R), 1), c = expand_dims(arange(0, C), 0);
    Tile<T> v = load(x + (r * C + c));
    store(whole + (r * K + k0 + c), v);
    store(masked + (r * K + k0 + c), v, broadcast_to(c < limit, {R, C}));
  });
  for (int K : {64, 65, 67, 72, 129}) {
    for (int k0 = 0; k0 < 8; ++k0) {
      const int limit = 13 + 5 * k0;  // cuts one chunk of each row, leaves the others whole
      INFO(type_name<T>() << " row stride " << K << ", first column " << k0 << ", mask c < " << limit);
      const size_t n = size_t(R - 1) * K + k0 + C + 8;  // 8 elements past the last row's end
      std::vector<host_t<T>> x = generate<T>(rng, R * C, typical_values<T>());
      Output<T> whole(n), masked(n);
      launch(k, Grid(1), Input<T>(x), whole, masked, K, k0, limit);
      auto row_of = [&](int stored) {
        return [&, stored](int i) { return std::vector<host_t<T>>(x.begin() + i * C, x.begin() + i * C + stored); };
      };
      check_stored_rows<T>(whole.read(), R, K, k0, C, row_of(C), "unmasked store");
      check_stored_rows<T>(masked.read(), R, K, k0, limit, row_of(limit), "masked store");
    }
  }
}

TEST_CASE("stores of 16-bit rows at every 2-byte alignment, unmasked and masked", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  check_misaligned_row_stores<bf16>(rng);
  check_misaligned_row_stores<f16>(rng);
  check_misaligned_row_stores<int16_t>(rng);
}

// On NVIDIA the lane-joined 16-bit stores shuffle across a whole warp: here they run in warp-specialized task
// replicas (each storing its own 16 rows) and inside a uniform if_ whose branches both store.
TEST_CASE("16-bit stores of unproven alignment in task replicas and under a uniform if_", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int R = 16, C = 64;
  Kernel k("misaligned_task_stores", [](Ptr<bf16> x, Ptr<bf16> out, Int K, Int k0, Int limit, Int flag) {
    async_tasks(task("writer", {.warps = 2, .replicas = 2}, [&] {
      Int r = expand_dims(arange(0, R), 1) + task_replica_id() * R, c = expand_dims(arange(0, C), 0);
      Tile<bf16> v = load(x + (r * C + c));
      Ptr<bf16> at = out + (r * K + k0 + c);
      if_(flag == 1, [&] { store(at, v, broadcast_to(c < limit, {R, C})); }, [&] { store(at, -v); });
    }));
  });
  for (int flag : {1, 0})
    for (int K : {64, 67, 129})
      for (int k0 : {0, 1, 3, 6}) {
        const int limit = 21 + 5 * k0;
        INFO("flag " << flag << ", row stride " << K << ", first column " << k0);
        std::vector<bf16> x = generate<bf16>(rng, 2 * R * C, typical_values<bf16>());
        const size_t n = size_t(2 * R - 1) * K + k0 + C + 8;
        Output<bf16> out(n);
        launch(k, Grid(1), Input<bf16>(x), out, K, k0, limit, flag);
        const int stored = flag == 1 ? limit : C;
        check_stored_rows<bf16>(out.read(), 2 * R, K, k0, stored, [&](int i) {
          std::vector<bf16> want(stored);
          for (int j = 0; j < stored; ++j) want[j] = flag == 1 ? x[i * C + j] : bf16(-float(x[i * C + j]));
          return want;
        }, "stored row");
      }
}

TEST_CASE("loads of 16-bit rows at every 2-byte alignment, unmasked and masked", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  check_misaligned_rows<bf16>(rng);
  check_misaligned_rows<f16>(rng);
  check_misaligned_rows<int16_t>(rng);
}

// The same rows of 32- and 64-bit elements: a thread's 16-byte chunk (4 or 2 elements) at every 4- or 8-byte
// offset from a 16-byte boundary (first columns 0 to 7 cover each offset twice or four times).
TEST_CASE("loads and stores of 32- and 64-bit rows at every element alignment, unmasked and masked", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  check_misaligned_rows<float>(rng);
  check_misaligned_rows<int32_t>(rng);
  check_misaligned_rows<double>(rng);
  check_misaligned_row_stores<float>(rng);
  check_misaligned_row_stores<int32_t>(rng);
  check_misaligned_row_stores<double>(rng);
}

TEST_CASE("an unaligned chunk of consecutive 16-bit elements is read as two aligned 16-byte blocks", "[memory][ptx]") {
  Kernel k("misaligned_rows_ptx", [](Ptr<bf16> x, Ptr<bf16> out, Int K) {
    Int r = expand_dims(arange(0, 16), 1), c = expand_dims(arange(0, 64), 0);
    store(out + (r * 64 + c), load(x + (r * K + c)));
  });
  const std::string ptx = k.ptx();
  auto count = [&](const std::string& what) { return count_occurrences(ptx, what); };
  // 8 elements a thread: one chunk, read as the two aligned blocks around it (the first again where it is
  // aligned) without a branch, so that a thread's chunks are all in flight at once; no 2-byte loads.
  CHECK(count("ld.global.v4.b32") == 2);
  CHECK(ptx.substr(0, ptx.rfind("ld.global.v4.b32")).find("bra") == std::string::npos);  // (the store may branch)
  CHECK(count("ld.global.b16") == 0);
  CHECK(count("ld.global.u16") == 0);
  // The half-word shift: a funnel shift (either code generator).
  CHECK(count("shf.l.wrap.b32") + count("shf.r.wrap.b32") >= 4);
}

TEST_CASE("rank-0 loads and stores through Ptr", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<AllTypes>([&](auto t) { check_scalar_access<typename decltype(t)::type>(rng); });
}

TEST_CASE("i64 offsets keep all 64 bits", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  // x + (offs + 2^31) - 2^31 is x + offs only if neither offset is cut to 32 bits on the way.
  Kernel k("long_offsets", [](Ptr<double> x, Ptr<double> out, Long n, Long big) {
    Long offs = cast<int64_t>(program_id(0)) * 256 + cast<int64_t>(arange(0, 256));
    Bool in = offs < n;
    Ptr<double> far = x + (offs + big);
    store(out + offs, load(far + (-big), in, -1.0) * 2, in);
    // i32 offsets may be negative too.
    Int offs32 = cast<int32_t>(offs);
    store(out + n + offs32 + 5 + (-5), load(x + offs32 + 7 + (-7), in), in);
  });
  for (int64_t n : kSizes) {
    INFO("n = " << n);
    std::vector<double> x = generate<double>(rng, n, uniform_real<double>(-1, 1)), want(2 * n);
    for (int64_t i = 0; i < n; ++i) want[i] = 2 * x[i], want[n + i] = x[i];
    Output<double> out(2 * n);
    launch(k, grid_for(n, 256), Input<double>(x), out, n, int64_t(1) << 31);
    check_near<double>(out, want);
  }
}

// ---- 2-D addressing ------------------------------------------------------------------------------------

TEST_CASE("2-D tiles addressed with expand_dims and broadcasting", "[ops][memory][shape]") {
  WEFT_SEEDED_RNG(rng);
  constexpr int BM = 16, BN = 32;
  // out = 2 * x + bias[col] - scale[row]; xt = x transposed, once by addressing and once with trans().
  Kernel k("matrix", [](Ptr<int32_t> x, Ptr<int32_t> bias, Ptr<int32_t> scale, Ptr<int32_t> out, Ptr<int32_t> xt,
                        Ptr<int32_t> xt2, Int R, Int C) {
    Int rows = program_id(0) * BM + arange(0, BM), cols = program_id(1) * BN + arange(0, BN);
    Int r = expand_dims(rows, 1), c = expand_dims(cols, 0);  // [BM, 1] and [1, BN]
    Bool m = (r < R) & (c < C);
    Tile<int32_t> a = load(x + r * C + c, m);
    Tile<int32_t> row_term = expand_dims(load(scale + rows, rows < R), -1);
    store(out + r * C + c, a * 2 + expand_dims(load(bias + cols, cols < C), 0) - row_term, m);
    store(xt + c * R + r, a, m);
    store(xt2 + expand_dims(cols, 1) * R + expand_dims(rows, 0), trans(a), trans(m));
  });
  for (auto [R, C] : std::vector<std::pair<int, int>>{{37, 45}, {1, 7}, {64, 64}, {100, 3}, {16, 33}}) {
    INFO(R << " x " << C);
    auto g = uniform_int<int32_t>(-1000, 1000);
    std::vector<int32_t> x = generate<int32_t>(rng, R * C, g), bias = generate<int32_t>(rng, C, g),
                         scale = generate<int32_t>(rng, R, g);
    std::vector<int32_t> want(R * C), want_t(R * C);
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < C; ++j) {
        want[i * C + j] = 2 * x[i * C + j] + bias[j] - scale[i];
        want_t[j * R + i] = x[i * C + j];
      }
    Output<int32_t> out(R * C), xt(R * C), xt2(R * C);
    launch(k, Grid((R + BM - 1) / BM, (C + BN - 1) / BN), Input<int32_t>(x), Input<int32_t>(bias),
           Input<int32_t>(scale), out, xt, xt2, R, C);
    check_near<int32_t>(out, want, {}, "2 * x + bias - scale");
    check_near<int32_t>(xt, want_t, {}, "transpose by addressing");
    check_near<int32_t>(xt2, want_t, {}, "transpose with trans()");
  }
}

// ---- shape ops -------------------------------------------------------------------------------------------

// The host model of a tile for the shape ops: which input element (flat index) each element is. It has the
// methods and free functions the DSL has, so one generic lambda describes an op for both.
struct HostTile {
  Shape shape;
  std::vector<int64_t> src;

  std::vector<int64_t> index_of(int64_t flat) const {
    std::vector<int64_t> idx(shape.size());
    for (int d = int(shape.size()) - 1; d >= 0; --d) idx[d] = flat % shape[d], flat /= shape[d];
    return idx;
  }
  int64_t flat_of(const std::vector<int64_t>& idx) const {
    int64_t f = 0;
    for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
    return f;
  }
  HostTile reshape(Shape s) const { return {std::move(s), src}; }
  HostTile expand_dims(int axis) const {
    Shape s = shape;
    s.insert(s.begin() + (axis < 0 ? axis + int(s.size()) + 1 : axis), 1);
    return reshape(s);
  }
  HostTile broadcast_to(Shape s) const {
    HostTile out{s, std::vector<int64_t>(numel_of(s))};
    size_t lead = s.size() - shape.size();
    for (int64_t i = 0; i < numel_of(s); ++i) {
      std::vector<int64_t> o = out.index_of(i), idx(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) idx[d] = shape[d] == 1 ? 0 : o[d + lead];
      out.src[i] = src[flat_of(idx)];
    }
    return out;
  }
  HostTile permute(std::vector<int64_t> perm) const {
    Shape s(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) s[k] = shape[perm[k]];
    HostTile out{s, std::vector<int64_t>(numel_of(s))};
    for (int64_t i = 0; i < numel_of(s); ++i) {
      std::vector<int64_t> o = out.index_of(i), idx(shape.size());
      for (size_t k = 0; k < perm.size(); ++k) idx[perm[k]] = o[k];
      out.src[i] = src[flat_of(idx)];
    }
    return out;
  }
  HostTile trans() const { return permute({1, 0}); }
};
HostTile reshape(const HostTile& x, Shape s) { return x.reshape(std::move(s)); }
HostTile expand_dims(const HostTile& x, int axis) { return x.expand_dims(axis); }
HostTile broadcast_to(const HostTile& x, Shape s) { return x.broadcast_to(std::move(s)); }
HostTile permute(const HostTile& x, std::vector<int64_t> perm) { return x.permute(std::move(perm)); }
HostTile trans(const HostTile& x) { return x.trans(); }

// Loads a tile of shape `in`, applies `op` (a generic lambda: Tile<T> -> Tile<T>, HostTile -> HostTile),
// stores the result flattened and compares with the host model. Scale by 1 on the way (or `!` for bool) so
// that the shape ops also meet values computed in the kernel, not only loaded ones.
template <class T, class Op> void check_shape_op(Rng& rng, const std::string& what, Shape in, Op op) {
  HostTile model{in, std::vector<int64_t>(numel_of(in))};
  std::iota(model.src.begin(), model.src.end(), 0);
  HostTile result = op(model);
  const int64_t n_in = numel_of(in), n_out = numel_of(result.shape);
  Kernel k("shape_op", [op, in, n_in, n_out](Ptr<T> x, Ptr<T> out) {
    Tile<T> loaded = load(x + arange(0, n_in)).reshape(in);
    Tile<T> y;
    if constexpr (std::is_same_v<T, bool>)
      y = op(!loaded);
    else
      y = op(loaded * 1);
    if (y.rank() == 0)
      store(out, y);
    else
      store(out + arange(0, n_out), y.reshape({n_out}));
  });
  std::vector<host_t<T>> x = generate<T>(rng, n_in, typical_values<T>()), want(n_out);
  for (int64_t i = 0; i < n_out; ++i) {
    host_t<T> v = x[result.src[i]];
    want[i] = std::is_same_v<T, bool> ? host_t<T>(!v) : v;
  }
  Output<T> out(n_out);
  launch(k, Grid(1), Input<T>(x), out);
  check_near<T>(out, want, {}, what + " on " + type_name<T>());
}

using ShapeTypes = std::tuple<float, bf16, int64_t, bool>;

TEST_CASE("broadcast_to grows size-1 and missing leading dimensions", "[ops][shape]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<ShapeTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_shape_op<T>(rng, "[8] -> [4, 8]", {8}, [](auto x) { return x.broadcast_to({4, 8}); });
    check_shape_op<T>(rng, "[4, 1] -> [4, 8]", {4, 1}, [](auto x) { return broadcast_to(x, {4, 8}); });
    check_shape_op<T>(rng, "[] -> [4, 8]", {}, [](auto x) { return x.broadcast_to({4, 8}); });
    check_shape_op<T>(rng, "[1, 8, 1] -> [2, 8, 4]", {1, 8, 1}, [](auto x) { return x.broadcast_to({2, 8, 4}); });
    check_shape_op<T>(rng, "[8] -> [2, 4, 8]", {8}, [](auto x) { return x.broadcast_to({2, 4, 8}); });
    check_shape_op<T>(rng, "[1, 1] -> [16, 16]", {1, 1}, [](auto x) { return x.broadcast_to({16, 16}); });
    check_shape_op<T>(rng, "[4, 8] -> [4, 8] (no-op)", {4, 8}, [](auto x) { return x.broadcast_to({4, 8}); });
  });
}

TEST_CASE("reshape and expand_dims keep the row-major element order", "[ops][shape]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<ShapeTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_shape_op<T>(rng, "[4, 8] -> [2, 16]", {4, 8}, [](auto x) { return x.reshape({2, 16}); });
    check_shape_op<T>(rng, "[32] -> [2, 2, 8]", {32}, [](auto x) { return reshape(x, {2, 2, 8}); });
    check_shape_op<T>(rng, "[2, 4, 8] -> [8, 8]", {2, 4, 8}, [](auto x) { return x.reshape({8, 8}); });
    check_shape_op<T>(rng, "[1] -> []", {1}, [](auto x) { return x.reshape({}); });
    check_shape_op<T>(rng, "expand_dims([8], 0)", {8}, [](auto x) { return x.expand_dims(0); });
    check_shape_op<T>(rng, "expand_dims([8], -1)", {8}, [](auto x) { return expand_dims(x, -1); });
    check_shape_op<T>(rng, "expand_dims([4, 8], 1)", {4, 8}, [](auto x) { return x.expand_dims(1); });
    check_shape_op<T>(rng, "expand_dims([4, 8], -1)", {4, 8}, [](auto x) { return x.expand_dims(-1); });
    check_shape_op<T>(rng, "expand_dims([], 0)", {}, [](auto x) { return x.expand_dims(0); });
    // After a permute or a broadcast the reshape must see the new order.
    check_shape_op<T>(rng, "trans then reshape", {4, 8}, [](auto x) { return x.trans().reshape({32}); });
    check_shape_op<T>(rng, "expand_dims then broadcast", {8}, [](auto x) {
      return x.expand_dims(1).broadcast_to({8, 4}).reshape({4, 8});
    });
  });
}

TEST_CASE("permute and trans of 2-D and 3-D tiles", "[ops][shape]") {
  WEFT_SEEDED_RNG(rng);
  for_each_type<ShapeTypes>([&](auto t) {
    using T = typename decltype(t)::type;
    check_shape_op<T>(rng, "trans [4, 16]", {4, 16}, [](auto x) { return x.trans(); });
    check_shape_op<T>(rng, "trans [8, 8]", {8, 8}, [](auto x) { return trans(x); });
    check_shape_op<T>(rng, "trans [1, 8]", {1, 8}, [](auto x) { return x.trans(); });
    check_shape_op<T>(rng, "trans twice", {2, 32}, [](auto x) { return x.trans().trans(); });
    check_shape_op<T>(rng, "trans of a broadcast", {4, 1}, [](auto x) { return x.broadcast_to({4, 8}).trans(); });
    std::vector<int64_t> perm{0, 1, 2};
    do {
      std::string name = "permute [2, 4, 8] by {" + std::to_string(perm[0]) + std::to_string(perm[1]) +
                         std::to_string(perm[2]) + "}";
      check_shape_op<T>(rng, name, {2, 4, 8}, [perm](auto x) { return permute(x, perm); });
    } while (std::next_permutation(perm.begin(), perm.end()));
  });
}

}  // namespace

TEST_CASE("Buffer<bool> uploads and downloads one byte per element", "[ops][memory]") {
  WEFT_SEEDED_RNG(rng);
  Kernel invert("invert_bools", [](Ptr<bool> in, Ptr<bool> out, Int n) {
    Int i = arange(0, 1024);
    store(out + i, !load(in + i, i < n, false), i < n);
  });
  std::vector<bool> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = rng() & 1;
  Device dev = Device::current();
  Buffer<bool> in = dev.upload(host), out = dev.upload(host);  // poisoned: every element must flip
  invert.launch(Grid(1), in, out, int(host.size()));
  std::vector<bool> got = out.download();
  REQUIRE(got.size() == host.size());
  int bad = 0;
  for (size_t i = 0; i < host.size(); ++i) bad += got[i] == host[i];
  CHECK(bad == 0);
  CHECK(in.download() == host);
}
