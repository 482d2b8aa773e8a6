// Compiler faults (weft::InternalError) leave a reproducer on disk: the kernel's IR and options, in a file
// whose path the error names (src/dsl/reproducer.h).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "driver/backend.h"
#include "scratch_cache.h"
#include "weft/weft.h"

using namespace weft;

namespace {

// A backend whose compiler always faults, as a broken lowering would.
class FaultyBackend final : public detail::Backend {
 public:
  BackendKind kind() const override { return BackendKind::cpu; }
  std::string name() const override { return "faulty test backend"; }
  void* allocate(size_t) override { return nullptr; }
  void release(void*) override {}
  void copy_to_device(void*, const void*, size_t) override {}
  void copy_to_host(void*, const void*, size_t) override {}
  std::shared_ptr<detail::CompiledKernel> compile(const ir::Function&, const KernelOptions&) override {
    throw InternalError("test lowering: no rule for op 'exp2'");
  }
  void launch(const detail::CompiledKernel&, const detail::LaunchDims&, const uint64_t*, size_t, void*) override {}
  void synchronize(void*) override {}
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// This test binary running the WEFT_DUMP_DIR test as its child, with WEFT_DUMP_DIR=dir.
std::string child_command(const std::string& dir) {
  return "WEFT_TEST_REPRODUCER_CHILD=1 WEFT_DUMP_DIR='" + dir + "' /proc/" + std::to_string(::getpid()) +
         "/exe '[reproducer-dump-dir]' 2>&1";
}

}  // namespace

TEST_CASE("an InternalError while compiling writes a reproducer named in the message", "[errors][reproducer]") {
  test::ScratchDir tmp("weft-repro-test");
  test::ScopedEnv tmpdir("TMPDIR", tmp.dir.string());
  FaultyBackend backend;
  Kernel k("faulty_kernel",
           [](Ptr<float> x, Const<int> block) { store(x + arange(0, block), exp2(load(x + arange(0, block)))); },
           KernelOptions{.num_warps = 2});
  std::string message;
  try {
    k.compile(Device::from_backend(backend), 64);
    FAIL("no InternalError");
  } catch (const InternalError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::StartsWith("test lowering: no rule for op 'exp2'\nreproducer: "));
  const std::string prefix = "\nreproducer: ";
  const size_t at = message.find(prefix) + prefix.size();
  const std::string path = message.substr(at, message.find(' ', at) - at);
  CAPTURE(message, path);
  CHECK(std::filesystem::path(path).parent_path() == tmp.dir);
  REQUIRE(std::filesystem::is_regular_file(path));
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  const std::string text = read_file(path);
  CHECK_THAT(text, Catch::Contains("# fault: test lowering: no rule for op 'exp2'"));
  CHECK_THAT(text, Catch::Contains("# kernel: 'faulty_kernel', declared at "));
  CHECK_THAT(text, Catch::Contains("test_reproducer.cpp:"));  // the user's lines, for each node
  CHECK_THAT(text, Catch::Contains("# backend: faulty test backend"));
  CHECK_THAT(text, Catch::Contains(".num_warps = 2"));
  const std::string ir = k.ir(64);
  CHECK_THAT(text, Catch::Contains(ir.substr(0, ir.find('\n'))));  // the traced IR, from its signature
  CHECK_THAT(text, Catch::Contains("exp2"));
}

TEST_CASE("with WEFT_DUMP_DIR set, the reproducer goes there", "[errors][reproducer][reproducer-dump-dir]") {
  if (std::getenv("WEFT_TEST_REPRODUCER_CHILD")) {  // the child: the knobs are read once per process
    FaultyBackend backend;
    Kernel k("faulty_kernel", [](Ptr<float> x) { store(x, load(x) + 1.f); });
    try {
      k.compile(Device::from_backend(backend));
    } catch (const InternalError& e) {
      std::printf("%s\n", e.what());
    }
    return;
  }
  test::ScratchDir dumps("weft-repro-dumps");
  const std::string command = child_command(dumps.dir.string());
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p);
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) output.append(buffer, n);
  CHECK(::pclose(p) == 0);
  CAPTURE(command, output);
  const std::string expected = "\nreproducer: " + dumps.dir.string() + "/faulty_kernel.repro-";
  REQUIRE(output.find(expected) != std::string::npos);
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dumps.dir)) {
    ++files;
    CHECK_THAT(read_file(entry.path().string()), Catch::Contains("# fault: test lowering: no rule for op 'exp2'"));
  }
  CHECK(files == 1);
}
