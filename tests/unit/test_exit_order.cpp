// Objects in static storage made before the first use of a backend — a library's map of workspace Buffers,
// a Kernel compiled later — are destroyed at exit after anything the backend made at its first use. They
// must still release their memory and modules cleanly (on the H200 they once aborted the process after all
// its tests had passed: a double free in cuModuleUnload, and a CPU Buffer removing itself from the
// destroyed backend's registry). The check runs in a fresh process: this binary again, as a child.
#include <catch2/catch.hpp>
#include <weft/weft.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

extern char** environ;

// main() runs this when WEFT_TEST_EXIT_ORDER_CHILD is set, before anything touches a backend: the statics
// below are constructed first, so they are destroyed last, after the backend's own first-use state.
int exit_order_child() {
  using namespace weft;
  static std::map<int, Buffer<float>> buffers;
  static std::unique_ptr<Kernel> kernel;
  kernel = std::make_unique<Kernel>("exit_order_add_one", [](Ptr<float> x) {
    Int i = arange(0, 32);
    store(x + i, load(x + i) + 1.0f);
  });
  Device dev = Device::current();
  buffers[0] = dev.upload(std::vector<float>(32, 1.0f));
  kernel->launch(Grid(1), buffers[0]);
  return buffers[0].download()[5] == 2.0f ? 0 : 3;
}

TEST_CASE("Buffers and Kernels in static storage made before the backend are released cleanly at exit", "[ops][exit]") {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.emplace_back("WEFT_TEST_EXIT_ORDER_CHILD=1");
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe";
  char* argv[] = {self.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  INFO("child status " << status);
  REQUIRE(WIFEXITED(status));  // not killed by an abort or a fault at exit
  CHECK(WEXITSTATUS(status) == 0);
}
