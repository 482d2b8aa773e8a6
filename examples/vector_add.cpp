// vector_add: out[i] = x[i] + y[i] for any n, one block of 1024 elements per program instance.
#include <weft/weft.h>

#include <cmath>
#include <cstdio>
#include <random>

using namespace weft;

int main() try {
  Kernel vector_add("vector_add", [](Ptr<float> x, Ptr<float> y, Ptr<float> out, Int n, Const<int> block) {
    Int offsets = program_id(0) * block + arange(0, block);
    Bool in_range = offsets < n;
    store(out + offsets, load(x + offsets, in_range) + load(y + offsets, in_range), in_range);
  });

  const int n = 98'765;  // not a multiple of the block: the mask matters
  const int block = 1024;
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-100.f, 100.f);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = dist(rng), y[i] = dist(rng);

  Device dev = Device::current();
  Buffer<float> dx = dev.upload(x), dy = dev.upload(y);
  Buffer<float> dout = dev.upload(std::vector<float>(n, std::nanf("")));  // poisoned
  vector_add.launch(Grid((n + block - 1) / block), dx, dy, dout, n, block);
  std::vector<float> out = dout.download();

  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (out[i] != x[i] + y[i]) ++bad;
  std::printf("vector_add on %s: n = %d, %d mismatches: %s\n", dev.name().c_str(), n, bad, bad ? "FAIL" : "PASS");
  return bad ? 1 : 0;
} catch (const weft::Error& e) {  // e.g. WEFT_TARGET=sm_90a without that GPU: compiled, cannot run
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
