// WEFT_CHECK_PTX: the PTX of every traced kernel through ptxas (see ptx_check.h).
#include "driver/ptx_check.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "codegen/nvptx/compile_ptx.h"
#include "support/env.h"

extern char** environ;

namespace weft::detail {
namespace {

constexpr const char* kDefaultPtxas = "/usr/local/cuda/bin/ptxas";

bool is_executable_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// ptxas from PATH, else the CUDA toolkit's default place; empty when neither has it.
std::string find_ptxas() {
  if (const char* path = std::getenv("PATH")) {
    std::string_view rest = path;
    while (true) {
      size_t colon = rest.find(':');
      std::string_view dir = rest.substr(0, colon);
      if (!dir.empty() && is_executable_file(std::filesystem::path(dir) / "ptxas"))
        return (std::filesystem::path(dir) / "ptxas").string();
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  return is_executable_file(kDefaultPtxas) ? kDefaultPtxas : "";
}

// The PTX ISA the code generator must emit for `arch` ("sm_90a", "sm_100a", ...): the same rule as the
// CUDA backend's (cuda_backend.cpp, minimum_ptx_features): 8.5 up to sm_90a, later ISAs for newer chips.
codegen::nvptx::PtxTarget target_for(const std::string& arch) {
  codegen::nvptx::PtxTarget target;
  target.arch = arch;
  int number = std::atoi(arch.c_str() + (arch.starts_with("sm_") ? 3 : 0));  // 90, 100, 120, ...
  int major = number / 10, minor = number % 10;
  if (major >= 10) {
    if (major == 10 && minor <= 1)
      target.features = "+ptx86";
    else if (major == 12 && minor == 0)
      target.features = "+ptx87";
    else
      target.features = "+ptx88";
  }
  return target;
}

// A file that removes itself unless kept.
struct TempFile {
  std::string path;
  bool keep = false;
  ~TempFile() {
    if (!path.empty() && !keep) ::unlink(path.c_str());
  }
};

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// Runs argv (no shell), returning its exit status (or -1 when it did not exit normally) and its stdout
// and stderr together in `output`.
int run(const std::vector<std::string>& argv, std::string& output) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(fmt::format("WEFT_CHECK_PTX: pipe failed: {}", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int spawned = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    throw Error(fmt::format("WEFT_CHECK_PTX: could not run {}: {}", argv[0], std::strerror(spawned)));
  }
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    output.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// PTX that ptxas already accepted in this process (specializations often lower to the same module; the
// op tests trace ~850 kernels, ~600 distinct): each ptxas run costs tens of milliseconds.
struct Accepted {
  std::mutex mutex;
  std::unordered_set<std::string> ptx;
  bool contains(const std::string& p) {
    std::lock_guard<std::mutex> lock(mutex);
    return ptx.count(p) != 0;
  }
  void insert(std::string p) {
    std::lock_guard<std::mutex> lock(mutex);
    ptx.insert(std::move(p));
  }
};
Accepted& accepted() {
  static Accepted* a = new Accepted;  // never destroyed: kernels may be traced during static destruction
  return *a;
}

}  // namespace

void check_ptx_if_asked(const ir::Function& f, const KernelOptions& options) {
  const std::string& arch = support::knobs().check_ptx;
  if (arch.empty()) return;
  if (std::string why = codegen::nvptx::unknown_arch_reason(arch); !why.empty())
    throw Error(fmt::format("WEFT_CHECK_PTX={}: {}", arch, why));
  std::string ptxas = find_ptxas();
  if (ptxas.empty())
    throw Error(fmt::format("WEFT_CHECK_PTX={} needs NVIDIA's ptxas, which is neither on PATH nor at {}; install the "
                            "CUDA toolkit or unset WEFT_CHECK_PTX",
                            arch, kDefaultPtxas));

  codegen::nvptx::PtxKernel ptx = codegen::nvptx::compile_to_ptx(f, options, target_for(arch));
  if (accepted().contains(ptx.ptx)) return;  // one architecture per process (the knob is read once)

  TempFile file;
  std::string pattern = (std::filesystem::temp_directory_path() / "weft-check-ptx-XXXXXX.ptx").string();
  int fd = ::mkstemps(pattern.data(), 4);
  if (fd < 0) throw Error(fmt::format("WEFT_CHECK_PTX: cannot create {}: {}", pattern, std::strerror(errno)));
  file.path = pattern;
  bool written = true;
  for (size_t done = 0; done < ptx.ptx.size();) {
    ssize_t n = ::write(fd, ptx.ptx.data() + done, ptx.ptx.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      written = false;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0) written = false;
  if (!written) throw Error(fmt::format("WEFT_CHECK_PTX: cannot write {}: {}", file.path, std::strerror(errno)));

  std::string output;
  int status = run({ptxas, "-arch=" + arch, file.path, "-o", "/dev/null"}, output);
  if (status == 0) {
    accepted().insert(std::move(ptx.ptx));
    return;
  }
  file.keep = true;
  throw Error(fmt::format("WEFT_CHECK_PTX={}: ptxas rejected the PTX of kernel '{}' ({} exited with {}); the PTX "
                          "is kept at {}; ptxas said:\n{}",
                          arch, f.name, ptxas, status < 0 ? std::string("a signal") : fmt::format("status {}", status),
                          file.path, output.empty() ? "(nothing)" : trimmed(output)),
              f.loc);
}

}  // namespace weft::detail
