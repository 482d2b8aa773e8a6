// Test helpers for the compile cache: a private scratch cache directory, environment variables set for a
// scope, and stderr captured (the cache's warnings go there).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace weft::test {

// Sets (or, with nullopt, unsets) an environment variable until the end of the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_)
      ::setenv(name_, saved_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// A fresh directory under the system's temporary directory, removed with the object.
struct ScratchDir {
  std::filesystem::path dir;
  explicit ScratchDir(const std::string& tag) {
    dir = std::filesystem::temp_directory_path() /
          (tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}()));
    std::filesystem::create_directories(dir);
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ignored);
    std::filesystem::remove_all(dir, ignored);
  }
  // Every file (not directory) below `dir`, symlinks and FIFOs included.
  std::vector<std::filesystem::path> files() const {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
      if (!e.is_directory() || e.is_symlink()) out.push_back(e.path());
    return out;
  }
};

// WEFT_CACHE_DIR pointed at a fresh private directory (and WEFT_CACHE unset) for the life of the object.
struct ScratchCache : ScratchDir {
  ScopedEnv cache_dir{"WEFT_CACHE_DIR", std::nullopt};
  ScopedEnv cache_switch{"WEFT_CACHE", std::nullopt};
  ScratchCache() : ScratchDir("weft-cache-test") { ::setenv("WEFT_CACHE_DIR", dir.c_str(), 1); }
};

// Everything written to stderr (the file descriptor) between construction and text().
class CaptureStderr {
 public:
  CaptureStderr() {
    std::fflush(stderr);
    char path[] = "/tmp/weft-stderr-XXXXXX";
    fd_ = ::mkstemp(path);
    path_ = path;
    saved_ = ::dup(2);
    ::dup2(fd_, 2);
  }
  ~CaptureStderr() {
    restore();
    ::unlink(path_.c_str());
  }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    ::close(fd_);
    saved_ = -1;
  }
  int fd_ = -1, saved_ = -1;
  std::string path_;
};

}  // namespace weft::test
