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
    Float n_f = cast<float>(n);
    Float mean = sum(v, 0) / n_f;
    Float centered = where(valid, v - mean, 0.0f);
    Float rstd = rsqrt(sum(centered * centered, 0) / n_f + eps);
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
    Float rms = rsqrt(sum(v * v, 0) / cast<float>(n) + eps);
    store(y + row + cols, cast<bf16>(v * rms * cast<float>(load(w + cols, valid, 0))), valid);
  }, options);
}
