// Row-wise layernorm and rmsnorm forward, bf16 in and out with f32 math, shared by the examples and
// benchmarks. One program instance normalizes one row in a single pass over memory: the row is loaded
// once (into a tile of the next power of two `block` >= n, the tail masked) and kept in registers.
#pragma once

#include <weft/weft.h>

// y = (x - mean) / sqrt(var + eps) * w + b
inline weft::Kernel make_layernorm(weft::KernelOptions options = {}) {
  using namespace weft;
  return Kernel("layernorm", [](Ptr<bf16> x, Ptr<bf16> w, Ptr<bf16> b, Ptr<bf16> y, Int n, Float eps,
                                Const<int> block) {
    Long row = cast<int64_t>(program_id(0)) * cast<int64_t>(n);
    Int cols = arange(0, block);
    Bool valid = cols < n;
    Float v = cast<float>(load(x + row + cols, valid, 0));
    Float inv_n = 1.0f / cast<float>(n);  // one division per row, not two
    Float mean = sum(v, 0) * inv_n;
    Float centered = where(valid, v - mean, 0.0f);
    Float rstd = rsqrt(sum(centered * centered, 0) * inv_n + eps);
    Float out = centered * rstd * cast<float>(load(w + cols, valid, 0)) + cast<float>(load(b + cols, valid, 0));
    store(y + row + cols, cast<bf16>(out), valid);
  }, options);
}

// y = x / sqrt(mean(x^2) + eps) * w
inline weft::Kernel make_rmsnorm(weft::KernelOptions options = {}) {
  using namespace weft;
  return Kernel("rmsnorm", [](Ptr<bf16> x, Ptr<bf16> w, Ptr<bf16> y, Int n, Float eps, Const<int> block) {
    Long row = cast<int64_t>(program_id(0)) * cast<int64_t>(n);
    Int cols = arange(0, block);
    Bool valid = cols < n;
    Float v = cast<float>(load(x + row + cols, valid, 0));
    Float rms = rsqrt(sum(v * v, 0) * (1.0f / cast<float>(n)) + eps);
    store(y + row + cols, cast<bf16>(v * rms * cast<float>(load(w + cols, valid, 0))), valid);
  }, options);
}

// The same two kernels written for bandwidth: each program normalizes `per_program` consecutive rows,
// loads w (and b) once, and loads the next row before it reduces the current one, so that a block keeps
// a row in flight while it computes (what an asynchronous-copy pipeline will do without the registers).

// Calls body(row, v) for each row of this program, v the row as f32 (zero past n), the next row already
// on its way.
template <class Body>
void for_each_row_prefetched(weft::Ptr<weft::bf16> x, weft::Int n, weft::Int n_rows, weft::Int cols, weft::Bool valid,
                             weft::Const<int> per_program, Body body) {
  using namespace weft;
  Int first = program_id(0) * per_program;
  auto row_start = [&](Int row) { return x + cast<int64_t>(row) * cast<int64_t>(n); };
  Var next = cast<float>(load(row_start(first) + cols, valid & (first < n_rows), 0));
  for_range(0, per_program, [&](Int i) {
    Int row = first + i;
    Float v = next;
    next = cast<float>(load(row_start(row + 1) + cols, valid & (i + 1 < per_program) & (row + 1 < n_rows), 0));
    body(row, v);
  });
}

inline weft::Kernel make_layernorm_rows(weft::KernelOptions options = {}) {
  using namespace weft;
  return Kernel("layernorm_rows", [](Ptr<bf16> x, Ptr<bf16> w, Ptr<bf16> b, Ptr<bf16> y, Int n, Int n_rows, Float eps,
                                     Const<int> block, Const<int> per_program) {
    Int cols = arange(0, block);
    Bool valid = cols < n;
    Float wv = cast<float>(load(w + cols, valid, 0)), bv = cast<float>(load(b + cols, valid, 0));
    Float inv_n = 1.0f / cast<float>(n);
    for_each_row_prefetched(x, n, n_rows, cols, valid, per_program, [&](Int row, Float v) {
      Float mean = sum(v, 0) * inv_n;
      Float centered = where(valid, v - mean, 0.0f);
      Float rstd = rsqrt(sum(centered * centered, 0) * inv_n + eps);
      Ptr<bf16> out = y + cast<int64_t>(row) * cast<int64_t>(n);
      store(out + cols, cast<bf16>(centered * rstd * wv + bv), valid & (row < n_rows));
    });
  }, options);
}

inline weft::Kernel make_rmsnorm_rows(weft::KernelOptions options = {}) {
  using namespace weft;
  return Kernel("rmsnorm_rows", [](Ptr<bf16> x, Ptr<bf16> w, Ptr<bf16> y, Int n, Int n_rows, Float eps,
                                   Const<int> block, Const<int> per_program) {
    Int cols = arange(0, block);
    Bool valid = cols < n;
    Float wv = cast<float>(load(w + cols, valid, 0));
    Float inv_n = 1.0f / cast<float>(n);
    for_each_row_prefetched(x, n, n_rows, cols, valid, per_program, [&](Int row, Float v) {
      Float rms = rsqrt(sum(v * v, 0) * inv_n + eps);
      Ptr<bf16> out = y + cast<int64_t>(row) * cast<int64_t>(n);
      store(out + cols, cast<bf16>(v * rms * wv), valid & (row < n_rows));
    });
  }, options);
}
