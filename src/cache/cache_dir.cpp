#include "cache/cache_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>

namespace weft::cache {
namespace {

constexpr const char* kStillCompiled = "kernels are still compiled, just not cached";

// An environment variable that names an absolute path, else "" (the XDG rule: relative values are ignored).
std::string absolute_env(const char* name) {
  const char* v = std::getenv(name);
  return v && v[0] == '/' ? v : "";
}

// mkdir -p with mode 0700 for every directory it creates (existing ones are left as they are).
bool make_directories(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// Checks an opened directory; warns and returns false when it must not be used.
bool check_directory(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return false;
  const std::string reason = unsafe_directory_reason(st.st_uid, st.st_mode, ::geteuid());
  if (reason.empty()) return true;
  warn_once(fmt::format("compile cache off: {} {} ({})", path, reason, kStillCompiled));
  return false;
}

UniqueFd open_root(bool create) {
  const std::string path = directory();
  if (path.empty()) {
    warn_once(fmt::format("compile cache off: none of WEFT_CACHE_DIR, XDG_CACHE_HOME and HOME is set to an absolute "
                          "path, and weft has no shared fallback; set WEFT_CACHE_DIR to a directory only you can "
                          "write ({})",
                          kStillCompiled));
    return {};
  }
  // The root may be a symlink (~/.cache often is): what it points to is checked.
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create && make_directories(path))
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return {};  // absent (a load) or not creatable (read-only disk …): quietly uncached
  UniqueFd root(fd);
  if (!check_directory(root.get(), path)) return {};
  return root;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string directory() {
  if (const char* d = std::getenv("WEFT_CACHE_DIR"); d && *d) return d;
  if (std::string x = absolute_env("XDG_CACHE_HOME"); !x.empty()) return x + "/weft";
  if (std::string h = absolute_env("HOME"); !h.empty()) return h + "/.cache/weft";
  return "";
}

std::string unsafe_directory_reason(uint32_t owner, uint32_t mode, uint32_t me) {
  if (!S_ISDIR(mode)) return "is not a directory";
  if (owner != me)
    return fmt::format("is owned by uid {}, not by you (uid {}); point WEFT_CACHE_DIR at a directory of your own",
                       owner, me);
  if (mode & (S_IWGRP | S_IWOTH))
    return fmt::format("is writable by group or others (mode {:04o}); run chmod go-w on it, or point WEFT_CACHE_DIR "
                       "at a directory only you can write",
                       mode & 07777);
  return "";
}

UniqueFd open_shard(const std::string& key, bool create) {
  UniqueFd root = open_root(create);
  if (!root) return {};
  const std::string shard = key.substr(0, 2);
  if (create && ::mkdirat(root.get(), shard.c_str(), 0700) != 0 && errno != EEXIST) return {};
  // O_NOFOLLOW: a shard that is a symlink is refused, wherever it points.
  int fd = ::openat(root.get(), shard.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP || errno == ENOTDIR)
      warn_once(fmt::format("compile cache off for {}/{}: it is not a directory (a symlink?); remove it ({})",
                            directory(), shard, kStillCompiled));
    return {};
  }
  UniqueFd dir(fd);
  if (!check_directory(dir.get(), directory() + "/" + shard)) return {};
  return dir;
}

void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mutex);
  if (said.insert(message).second) std::fprintf(stderr, "weft: warning: %s\n", message.c_str());
}

}  // namespace weft::cache
