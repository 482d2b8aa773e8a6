// The consumer project of the README ("Using weft from another CMake project"), built against an installed
// weft by tests/check_consumer.sh: a kernel traced, compiled and run on the CPU backend.
#include <weft/weft.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace weft;
  Kernel twice("twice", [](Ptr<float> x, Ptr<float> y) {
    Int i = arange(0, 64);
    store(y + i, load(x + i) * 2.0f);
  });
  Device dev = Device::cpu();
  std::vector<float> host(64);
  for (int i = 0; i < 64; ++i) host[i] = static_cast<float>(i) - 20.5f;
  Buffer<float> x = dev.upload(host), y = dev.alloc<float>(64);
  twice.launch(Grid(1), x, y);
  std::vector<float> out = y.download();
  for (int i = 0; i < 64; ++i)
    if (out[i] != 2 * host[i]) {
      std::printf("element %d: %g, want %g\n", i, out[i], 2 * host[i]);
      return 1;
    }
  std::printf("consumer app: ok\n");
  return 0;
}
