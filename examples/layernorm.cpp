// layernorm and rmsnorm forward over the rows of a bf16 matrix (f32 math), checked against a double
// reference computed from the same bf16 inputs.
#include <cmath>
#include <cstdio>
#include <random>

#include "norms.h"

using namespace weft;

static int next_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

int main() try {
  Kernel layernorm = make_layernorm(), rmsnorm = make_rmsnorm();
  Kernel layernorm_rows = make_layernorm_rows(), rmsnorm_rows = make_rmsnorm_rows();
  Device dev = Device::current();
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> dist(0.5f, 2.f);
  int failures = 0;
  const float eps = 1e-5f;
  for (auto [rows, cols] : {std::pair{33, 1000}, std::pair{8, 4096}, std::pair{5, 77}}) {
    std::vector<bf16> x(size_t(rows) * cols), w(cols), b(cols);
    for (bf16& v : x) v = dist(rng);
    for (bf16& v : w) v = dist(rng);
    for (bf16& v : b) v = dist(rng);
    Buffer<bf16> dx = dev.upload(x), dw = dev.upload(w), db = dev.upload(b);
    std::vector<bf16> poison(x.size(), bf16::from_bits(0x7fc0));
    Buffer<bf16> dln = dev.upload(poison), drms = dev.upload(poison);
    Buffer<bf16> dln_rows = dev.upload(poison), drms_rows = dev.upload(poison);
    layernorm.launch(Grid(rows), dx, dw, db, dln, cols, eps, next_pow2(cols));
    rmsnorm.launch(Grid(rows), dx, dw, drms, cols, eps, next_pow2(cols));
    const int per_program = 4;  // the row-loop variants; rows need not be a multiple
    Grid programs((rows + per_program - 1) / per_program);
    layernorm_rows.launch(programs, dx, dw, db, dln_rows, cols, rows, eps, next_pow2(cols), per_program);
    rmsnorm_rows.launch(programs, dx, dw, drms_rows, cols, rows, eps, next_pow2(cols), per_program);
    std::vector<bf16> ln = dln.download(), rms = drms.download();
    // The row-loop variants compute the same thing in the same order: bit-identical results.
    std::vector<bf16> ln_rows = dln_rows.download(), rms_rows = drms_rows.download();
    for (size_t i = 0; i < ln.size(); ++i)
      if (ln[i].bits != ln_rows[i].bits || rms[i].bits != rms_rows[i].bits) ++failures;
    double worst_ln = 0, worst_rms = 0;
    for (int r = 0; r < rows; ++r) {
      const bf16* xr = &x[size_t(r) * cols];
      double mean = 0, sq = 0, var = 0;
      for (int c = 0; c < cols; ++c) mean += float(xr[c]), sq += double(float(xr[c])) * float(xr[c]);
      mean /= cols;
      for (int c = 0; c < cols; ++c) var += (float(xr[c]) - mean) * (float(xr[c]) - mean);
      double rstd = 1 / std::sqrt(var / cols + eps), rrms = 1 / std::sqrt(sq / cols + eps);
      for (int c = 0; c < cols; ++c) {
        double want_ln = (float(xr[c]) - mean) * rstd * float(w[c]) + float(b[c]);
        double want_rms = float(xr[c]) * rrms * float(w[c]);
        double e_ln = std::abs(float(ln[size_t(r) * cols + c]) - want_ln);
        double e_rms = std::abs(float(rms[size_t(r) * cols + c]) - want_rms);
        // bf16 output: 8 bits of mantissa, plus f32 and approximate rsqrt on the way
        if (!(e_ln <= 1e-2 * std::abs(want_ln) + 1e-2)) ++failures;
        if (!(e_rms <= 1e-2 * std::abs(want_rms) + 1e-2)) ++failures;
        worst_ln = std::max(worst_ln, e_ln);
        worst_rms = std::max(worst_rms, e_rms);
      }
    }
    std::printf("rows %3d x cols %5d: layernorm max abs error %.3e, rmsnorm %.3e\n", rows, cols, worst_ln, worst_rms);
  }
  std::printf("layernorm/rmsnorm on %s: %s\n", dev.name().c_str(), failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
} catch (const weft::Error& e) {  // e.g. WEFT_TARGET=sm_90a without that GPU: compiled, cannot run
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
