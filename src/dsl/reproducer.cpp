#include "dsl/reproducer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ir/printer.h"
#include "support/build_id.h"
#include "support/env.h"

extern char** environ;

namespace weft::dsl {
namespace {

constexpr std::string_view kMarker = "\nreproducer: ";

std::string contents(const InternalError& fault, const ir::Function& f, const KernelOptions& options,
                     const std::string& backend) {
  std::string env;
  for (char** e = environ; e && *e; ++e)
    if (std::string_view(*e).starts_with("WEFT_")) env += fmt::format("#   {}\n", *e);
  return fmt::format(
      "# weft reproducer of a compiler fault (weft::InternalError)\n"
      "# fault: {}\n"
      "# kernel: '{}', declared at {}\n"
      "# backend: {}\n"
      "# options: KernelOptions{{.num_warps = {}, .cluster = {{{}, {}, {}}}, .debug = {}}}\n"
      "# weft: {}\n"
      "# environment:\n{}"
      "# the kernel's IR as traced (before any pass), with the source line of each node:\n{}",
      fault.what(), f.name, f.loc.str(), backend, options.num_warps, options.cluster.x, options.cluster.y,
      options.cluster.z, options.debug, support::weft_identity(), env.empty() ? "#   (no WEFT_ variables)\n" : env,
      ir::print(f, {.locations = true}));
}

// Writes `text` to a fresh file in $TMPDIR or /tmp; its path, or throws weft::Error saying why not.
std::string write_temp_file(const std::string& kernel, const std::string& text) {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string dir = tmpdir && tmpdir[0] == '/' ? tmpdir : "/tmp";
  std::string path = fmt::format("{}/weft-repro-{}-XXXXXX.txt", dir, kernel);
  const int fd = ::mkstemps(path.data(), 4);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t n = ::write(fd, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::close(fd);
      ::unlink(path.c_str());
      throw Error(fmt::format("writing {} failed: {}", path, n < 0 ? std::strerror(error) : "disk full?"));
    }
    rest.remove_prefix(static_cast<size_t>(n));
  }
  ::close(fd);
  return path;
}

}  // namespace

InternalError with_reproducer(const InternalError& fault, const ir::Function& f, const KernelOptions& options,
                              const std::string& backend) {
  const std::string message = fault.what();
  if (message.find(kMarker) != std::string::npos) return fault;
  const std::string text = contents(fault, f, options, backend);
  try {
    const std::string& dir = support::knobs().dump_dir;
    std::string path;
    if (dir.empty()) {
      path = write_temp_file(f.name, text);
    } else {
      static std::atomic<uint64_t> counter{0};
      const std::string name = fmt::format("{}.repro-{}-{}.txt", f.name, ::getpid(), counter++);
      support::write_dump_file(dir, name, text);
      path = dir + "/" + name;
    }
    return InternalError(fmt::format("{}{}{} (the kernel's IR and options; please attach it to a bug report)",
                                     message, kMarker, path));
  } catch (const Error& e) {
    return InternalError(fmt::format("{}{}none written: {}", message, kMarker, e.what()));
  }
}

}  // namespace weft::dsl
