// A backend that compiles for a GPU target without a GPU (WEFT_TARGET=sm_90a): kernels are lowered to
// PTX (and dumped with WEFT_DUMP=ptx), buffers live in host memory so a program can get as far as its
// launches, and each launch then fails with an Error saying the kernel cannot run here.
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "codegen/nvptx/compile_ptx.h"
#include "driver/backend.h"

namespace weft::detail {
namespace {

struct PtxOnlyKernel : CompiledKernel {
  codegen::nvptx::PtxKernel ptx;
};

class CompileOnlyBackend final : public Backend {
 public:
  CompileOnlyBackend(std::string arch, std::string why_no_device) : arch_(std::move(arch)), why_(std::move(why_no_device)) {}

  BackendKind kind() const override { return BackendKind::cuda; }
  std::string name() const override { return fmt::format("{} (compile only: {})", arch_, why_); }

  void* allocate(size_t bytes) override {
    void* p = std::malloc(bytes ? bytes : 1);
    if (!p) throw Error(fmt::format("out of host memory allocating {} bytes", bytes));
    return p;
  }
  void release(void* address) override { std::free(address); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  std::shared_ptr<CompiledKernel> compile(const ir::Function& f, const KernelOptions& options) override {
    auto k = std::make_shared<PtxOnlyKernel>();
    k->name = f.name;
    k->cluster = options.cluster;
    k->ptx = codegen::nvptx::compile_to_ptx(f, options, codegen::nvptx::PtxTarget{arch_, "+ptx85"});
    return k;
  }

  void launch(const CompiledKernel& k, const LaunchDims&, const uint64_t*, size_t, void*) override {
    throw Error(fmt::format("kernel '{}' was compiled for {} but cannot run: {}", k.name, arch_, why_));
  }
  void synchronize(void*) override {}

 private:
  std::string arch_;
  std::string why_;
};

}  // namespace

Backend& compile_only_backend(const std::string& arch, const std::string& why_no_device) {
  static CompileOnlyBackend backend(arch, why_no_device);
  return backend;
}

}  // namespace weft::detail
