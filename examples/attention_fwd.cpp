// attention_fwd: the FlashAttention-style forward of attention_fwd.h on the current device (the H200, or
// the CPU backend, which runs the same warp-specialized tasks as fibers), bf16 and f16, causal and not,
// grouped-query, ragged lengths; O and LSE checked against a double-precision reference.
//   attention_fwd [B Hq Hkv Sq Sk D]   (default: a few shapes sized for the device)
#include "attention_fwd.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace weft;

namespace {

template <class T>
int check(const Device& dev, const AttentionParams& p, std::mt19937& rng, bool sample) {
  std::normal_distribution<float> dist(0.f, 1.f);
  size_t nq = size_t(p.B) * p.Hq * p.Sq * p.D, nk = size_t(p.B) * p.Hkv * p.Sk * p.D;
  std::vector<T> q(nq), k(nk), v(nk);
  for (T& x : q) x = T(dist(rng));
  for (T& x : k) x = T(dist(rng));
  for (T& x : v) x = T(dist(rng));
  Buffer<T> dq = dev.upload(q), dk = dev.upload(k), dv = dev.upload(v);
  Buffer<T> dout = dev.upload(std::vector<T>(nq, T(std::nanf(""))));  // poison
  Buffer<float> dlse = dev.upload(std::vector<float>(size_t(p.B) * p.Hq * p.Sq, std::nanf("")));
  attention_fwd(dev.stream(), dq, dk, dv, dout, dlse, p);
  std::vector<T> out = dout.download();
  std::vector<float> lse = dlse.download();

  double scale = p.scale > 0 ? p.scale : 1.0 / std::sqrt(double(p.D));
  int group = p.Hq / p.Hkv, wrong = 0, checked = 0;
  double worst = 0;
  std::uniform_int_distribution<int> pick_row(0, p.Sq - 1);
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.Hq; ++h) {
      size_t qb = (size_t(b) * p.Hq + h) * p.Sq, kb = (size_t(b) * p.Hkv + h / group) * p.Sk;
      int rows = sample ? std::min(p.Sq, 4) : p.Sq;
      for (int t = 0; t < rows; ++t) {
        int i = sample ? pick_row(rng) : t;
        std::vector<double> s(p.Sk);
        double m = -INFINITY;
        int last = p.causal ? std::min(p.Sk - 1, i + p.Sk - p.Sq) : p.Sk - 1;
        for (int j = 0; j <= last; ++j) {
          double dot = 0;
          for (int d = 0; d < p.D; ++d) dot += double(float(q[(qb + i) * p.D + d])) * double(float(k[(kb + j) * p.D + d]));
          s[j] = dot * scale;
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= last; ++j) sum += std::exp(s[j] - m);
        double want_lse = last < 0 ? INFINITY : m + std::log(sum);
        double got_lse = lse[qb + i];
        ++checked;
        if (!(std::abs(got_lse - want_lse) <= 1e-3 * (1 + std::abs(want_lse))) && !(std::isinf(want_lse) && got_lse == want_lse)) {
          if (++wrong <= 5) std::printf("  LSE[b %d, h %d, row %d] = %g, want %g\n", b, h, i, got_lse, want_lse);
        }
        for (int d = 0; d < p.D; ++d) {
          double want = 0, mag = 0;
          for (int j = 0; j <= last; ++j) {
            double w = std::exp(s[j] - m) / sum * double(float(v[(kb + j) * p.D + d]));
            want += w;
            mag += std::abs(w);
          }
          double got = float(out[(qb + i) * p.D + d]);
          double err = std::abs(got - want);
          worst = std::max(worst, err / (mag + 1e-30));
          // P is rounded to 16 bits before P V (about 2^-8 of each term for bf16), O once more at the end.
          double tol = (sizeof(T) == 2 ? 0x1p-7 : 0x1p-9) * mag + 0x1p-7 * std::abs(want) + 1e-6;
          if (!(err <= tol)) {
            if (++wrong <= 5) std::printf("  O[b %d, h %d, row %d, %d] = %g, want %g\n", b, h, i, d, got, want);
          }
        }
      }
    }
  std::printf("attention_fwd %s B %d Hq %d Hkv %d Sq %d Sk %d D %d%s on %s: %d wrong of %d rows checked (worst %.2e "
              "of sum |p v|)\n",
              dtype_of<T>.str().c_str(), p.B, p.Hq, p.Hkv, p.Sq, p.Sk, p.D, p.causal ? " causal" : "",
              dev.name().c_str(), wrong, checked, worst);
  return wrong;
}

}  // namespace

int main(int argc, char** argv) try {
  Device dev = Device::current();
  bool gpu = dev.kind() != BackendKind::cpu;
  std::mt19937 rng(std::random_device{}());
  int bad = 0;
  if (argc > 6) {
    AttentionParams p{std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]),
                      std::atoi(argv[6])};
    for (bool causal : {false, true}) {
      p.causal = causal;
      bad += check<bf16>(dev, p, rng, gpu && p.Sq * p.Sk > (1 << 22));
    }
  } else if (gpu) {
    for (bool causal : {false, true}) {
      bad += check<bf16>(dev, {2, 16, 16, 4096, 4096, 128, causal}, rng, true);
      bad += check<f16>(dev, {2, 8, 2, 1000, 1537, 64, causal}, rng, false);
      bad += check<bf16>(dev, {1, 4, 4, 777, 300, 256, causal}, rng, false);
      // Persistent (at most 1024 keys): 1280 tiles on the GPU's programs, each running from tile to tile.
      bad += check<bf16>(dev, {4, 64, 8, 600, 900, 128, causal}, rng, true);
    }
  } else {  // the CPU backend simulates every warp group: small shapes
    bad += check<bf16>(dev, {1, 2, 1, 150, 200, 64, false}, rng, false);
    bad += check<f16>(dev, {1, 2, 2, 200, 130, 128, true}, rng, false);
  }
  std::printf("%s\n", bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "attention_fwd: %s\n", e.what());
  return 1;
}
