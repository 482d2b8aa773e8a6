// softmax: row-wise softmax of an M x N matrix for any N, one row per program instance. The row is loaded
// once into a tile of the next power of two; the columns past N are masked (-inf in, never stored).
#include <weft/weft.h>

#include <cmath>
#include <cstdio>
#include <random>

using namespace weft;

Kernel make_softmax() {
  return Kernel("softmax", [](Ptr<float> in, Ptr<float> out, Int n_cols, Int row_stride, Const<int> block) {
    Int row = program_id(0);
    Int cols = arange(0, block);
    Bool valid = cols < n_cols;
    Tile<float> x = load(in + row * row_stride + cols, valid, -INFINITY);
    Tile<float> shifted = x - max(x, 0);  // subtract the row maximum for stability
    Tile<float> e = exp(shifted);
    store(out + row * row_stride + cols, e / sum(e, 0), valid);
  });
}

static int next_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

int main() try {
  Kernel softmax = make_softmax();
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-8.f, 8.f);
  Device dev = Device::current();
  int failures = 0;
  for (auto [rows, cols] : {std::pair{37, 1000}, std::pair{5, 1}, std::pair{64, 4096}, std::pair{3, 333}}) {
    std::vector<float> x(size_t(rows) * cols);
    for (float& v : x) v = dist(rng);
    Buffer<float> dx = dev.upload(x);
    Buffer<float> dy = dev.upload(std::vector<float>(x.size(), std::nanf("")));
    softmax.launch(Grid(rows), dx, dy, cols, cols, next_pow2(cols));
    std::vector<float> y = dy.download();
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      double m = -INFINITY, s = 0;
      for (int c = 0; c < cols; ++c) m = std::max(m, double(x[r * cols + c]));
      for (int c = 0; c < cols; ++c) s += std::exp(double(x[r * cols + c]) - m);
      for (int c = 0; c < cols; ++c) {
        double want = std::exp(double(x[r * cols + c]) - m) / s;
        double err = std::abs(y[r * cols + c] - want);
        if (!(err <= 1e-6 + 1e-5 * want)) ++failures;
        worst = std::max(worst, err);
      }
    }
    std::printf("softmax %4d x %-5d max abs error %.2e\n", rows, cols, worst);
  }
  std::printf("softmax on %s: %s\n", dev.name().c_str(), failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
} catch (const weft::Error& e) {  // e.g. WEFT_TARGET=sm_90a without that GPU: compiled, cannot run
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
