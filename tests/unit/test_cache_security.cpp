// The compile cache against another local user and against a hostile file system (src/cache/cache_dir.h,
// disk_cache.h): one test per attack. Entries are code weft runs, so every way of slipping one in, or of
// making a load hang or a store write elsewhere, must fail.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "cache/disk_cache.h"
#include "scratch_cache.h"
#include "weft/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace weft;
using test::CaptureStderr;
using test::ScopedEnv;
using test::ScratchCache;

namespace {

std::string key_of(const char* what) { return cache::KeyBuilder().add(what).finish(); }

fs::path shard_of(const ScratchCache& c, const std::string& key) { return c.dir / key.substr(0, 2); }
fs::path entry_of(const ScratchCache& c, const std::string& key) {
  return shard_of(c, key) / cache::entry_file_name(key);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

uint32_t mode_of(const fs::path& p) {
  struct stat st;
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Runs cache::load(key) in a child process under a 1 GiB address-space limit and waits at most 10 s:
// "miss" when it returned nothing, "hit" when it returned a payload, else what went wrong (a hang is
// killed). A child, so that a load that blocks or reads without end cannot take the test runner with it.
std::string load_in_child(const std::string& key) {
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit limit{rlim_t(1) << 30, rlim_t(1) << 30};
    ::setrlimit(RLIMIT_AS, &limit);
    try {
      ::_exit(cache::load(key) ? 1 : 0);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  for (int waited_ms = 0; waited_ms < 10000; waited_ms += 10) {
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status) == 0 ? "miss" : WEXITSTATUS(status) == 1 ? "hit" : "threw";
      return "killed by signal " + std::to_string(WTERMSIG(status));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return "hung";
}

}  // namespace

TEST_CASE("the cache's directory rule: owned by the user and writable by nobody else", "[cache][security]") {
  const uint32_t me = 1000, dir = S_IFDIR;
  CHECK(cache::unsafe_directory_reason(me, dir | 0700, me).empty());
  CHECK(cache::unsafe_directory_reason(me, dir | 0755, me).empty());
  CHECK_THAT(cache::unsafe_directory_reason(me, dir | 0777, me), Catch::Contains("writable by group or others (mode 0777)"));
  CHECK_THAT(cache::unsafe_directory_reason(me, dir | 0720, me), Catch::Contains("writable by group"));
  CHECK_THAT(cache::unsafe_directory_reason(me, dir | 01777, me), Catch::Contains("mode 1777"));  // sticky /tmp too
  CHECK_THAT(cache::unsafe_directory_reason(4242, dir | 0700, me), Catch::Contains("owned by uid 4242, not by you (uid 1000)"));
  CHECK_THAT(cache::unsafe_directory_reason(me, S_IFREG | 0600, me), Catch::Contains("not a directory"));
}

TEST_CASE("a cache directory writable by others is refused with one warning", "[cache][security]") {
  ScratchCache scratch;
  const std::string key = key_of("world-writable");
  cache::store(key, "genuine");  // an entry of our own, before the directory was opened up
  REQUIRE(cache::load(key) == "genuine");

  for (const bool shard : {false, true}) {
    CAPTURE(shard);
    const fs::path opened = shard ? shard_of(scratch, key) : scratch.dir;
    REQUIRE(::chmod(opened.c_str(), 0777) == 0);
    CaptureStderr err;
    CHECK_FALSE(cache::load(key).has_value());  // anyone could have written that entry
    cache::store(key, "planted");                // refused too
    cache::store(key, "planted");
    const std::string text = err.text();
    CHECK(weft_test::count_occurrences(text, "weft: warning: compile cache off: " + opened.string() +
                          " is writable by group or others (mode 0777)") == 1);
    CHECK(weft_test::count_occurrences(text, "\n") == 1);  // one line, once per process
    REQUIRE(::chmod(opened.c_str(), 0700) == 0);
  }
  CHECK(cache::load(key) == "genuine");  // private again: used again
}

TEST_CASE("a cache directory owned by another user is refused", "[cache][security]") {
  if (::geteuid() != 0) {
    WARN("not root: cannot give a directory to another user here (the rule itself is tested above)");
    return;
  }
  ScratchCache scratch;
  const std::string key = key_of("foreign");
  cache::store(key, "genuine");
  REQUIRE(cache::load(key) == "genuine");
  const uid_t nobody = 65534;

  SECTION("the root") { REQUIRE(::chown(scratch.dir.c_str(), nobody, nobody) == 0); }
  SECTION("a shard") { REQUIRE(::chown(shard_of(scratch, key).c_str(), nobody, nobody) == 0); }
  SECTION("the entry") { REQUIRE(::chown(entry_of(scratch, key).c_str(), nobody, nobody) == 0); }
  CaptureStderr err;
  CHECK_FALSE(cache::load(key).has_value());
  const std::string text = err.text();
  if (fs::exists(entry_of(scratch, key)))  // a foreign directory: warned about and left alone
    CHECK_THAT(text, Catch::Contains("is owned by uid 65534, not by you (uid 0)"));
}

TEST_CASE("with no HOME there is no shared fallback: the cache is off with one warning", "[cache][security]") {
  ScopedEnv no_dir("WEFT_CACHE_DIR", std::nullopt), no_switch("WEFT_CACHE", std::nullopt);
  ScopedEnv no_home("HOME", std::nullopt), relative_xdg("XDG_CACHE_HOME", "relative/cache");  // ignored (XDG rule)
  CHECK(cache::directory().empty());
  const fs::path old_fallback = fs::temp_directory_path() / "weft-cache";
  const bool existed = fs::exists(old_fallback);
  CaptureStderr err;
  const std::string key = key_of("homeless");
  cache::store(key, "payload");
  CHECK_FALSE(cache::load(key).has_value());
  cache::store(key, "payload");
  const std::string text = err.text();
  CHECK(weft_test::count_occurrences(text, "compile cache off: none of WEFT_CACHE_DIR, XDG_CACHE_HOME and HOME") == 1);
  CHECK(fs::exists(old_fallback) == existed);
  CHECK_FALSE(fs::exists(fs::path("relative/cache")));
  {
    ScopedEnv home("HOME", "/home/someone");
    CHECK(cache::directory() == "/home/someone/.cache/weft");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    CHECK(cache::directory() == "/xdg/weft");
  }
}

TEST_CASE("the cache's directories and entries are private whatever the umask", "[cache][security]") {
  ScratchCache scratch;
  ScopedEnv nested("WEFT_CACHE_DIR", (scratch.dir / "a" / "b").string());
  const mode_t old_umask = ::umask(0);
  const std::string key = key_of("private");
  cache::store(key, "payload");
  ::umask(old_umask);
  CHECK(mode_of(scratch.dir / "a") == 0700);
  CHECK(mode_of(scratch.dir / "a" / "b") == 0700);
  CHECK(mode_of(scratch.dir / "a" / "b" / key.substr(0, 2)) == 0700);
  CHECK(mode_of(scratch.dir / "a" / "b" / key.substr(0, 2) / cache::entry_file_name(key)) == 0600);
  CHECK(cache::load(key) == "payload");
}

TEST_CASE("an entry copied or linked under another key is a miss", "[cache][security]") {
  ScratchCache scratch;
  const std::string good = key_of("the real kernel"), victim = key_of("another kernel");
  cache::store(good, "code of the real kernel");
  fs::create_directories(shard_of(scratch, victim));

  SECTION("copied") { fs::copy_file(entry_of(scratch, good), entry_of(scratch, victim)); }
  SECTION("hard-linked") { fs::create_hard_link(entry_of(scratch, good), entry_of(scratch, victim)); }
  CHECK_FALSE(cache::load(victim).has_value());
  CHECK_FALSE(fs::exists(entry_of(scratch, victim)));  // removed: the next compile rebuilds it
  CHECK(cache::load(good) == "code of the real kernel");
}

TEST_CASE("an entry written by another build of weft is a miss", "[cache][security]") {
  ScratchCache scratch;
  const std::string key = key_of("other build");
  cache::store(key, "payload");
  std::string text = read_file(entry_of(scratch, key));
  const size_t build = text.find("\nbuild weft ");
  REQUIRE(build != std::string::npos);
  text.insert(build + 7, "0.0.9 ");  // the payload and its checksum stay valid
  std::ofstream(entry_of(scratch, key), std::ios::binary | std::ios::trunc) << text;
  CHECK_FALSE(cache::load(key).has_value());
}

TEST_CASE("a symlink at an entry's path is never followed", "[cache][security]") {
  ScratchCache scratch;
  const std::string key = key_of("symlinked");
  // A well-formed entry of this very key, elsewhere: only the link makes it a hit, and links are refused.
  test::ScratchDir elsewhere("weft-cache-elsewhere");
  {
    ScopedEnv there("WEFT_CACHE_DIR", elsewhere.dir.string());
    cache::store(key, "planted code");
    REQUIRE(cache::load(key) == "planted code");
  }
  fs::create_directories(shard_of(scratch, key));
  fs::create_symlink(elsewhere.dir / key.substr(0, 2) / cache::entry_file_name(key), entry_of(scratch, key));
  CHECK(load_in_child(key) == "miss");
  CHECK_FALSE(cache::load(key).has_value());
  CHECK_FALSE(fs::is_symlink(entry_of(scratch, key)));  // removed
  cache::store(key, "compiled here");
  CHECK(cache::load(key) == "compiled here");
  ScopedEnv there("WEFT_CACHE_DIR", elsewhere.dir.string());
  CHECK(cache::load(key) == "planted code");  // the link's target was not touched
}

TEST_CASE("a FIFO at an entry's path does not block a load", "[cache][security]") {
  ScratchCache scratch;
  const std::string key = key_of("fifo");
  fs::create_directories(shard_of(scratch, key));
  REQUIRE(::mkfifo(entry_of(scratch, key).c_str(), 0600) == 0);
  CHECK(load_in_child(key) == "miss");
  cache::store(key, "payload");  // replaces the FIFO
  CHECK(cache::load(key) == "payload");
}

TEST_CASE("a symlink to /dev/zero at an entry's path is not read", "[cache][security]") {
  ScratchCache scratch;
  const std::string key = key_of("dev zero");
  fs::create_directories(shard_of(scratch, key));
  fs::create_symlink("/dev/zero", entry_of(scratch, key));
  CHECK(load_in_child(key) == "miss");
}

TEST_CASE("an entry larger than the size cap is not read", "[cache][security]") {
  ScratchCache scratch;
  const std::string key = key_of("huge");
  cache::store(key, "payload");
  // A valid header and then a sparse gigabyte: refused from its size alone, before anything is read.
  REQUIRE(::truncate(entry_of(scratch, key).c_str(), off_t(1) << 30) == 0);
  CHECK(load_in_child(key) == "miss");
  CHECK_FALSE(cache::load(key).has_value());
  CHECK_FALSE(fs::exists(entry_of(scratch, key)));
  // Nor is a payload over the cap stored.
  const std::string big(cache::kMaxEntryBytes + 1, 'x');
  cache::store(key, big);
  CHECK_FALSE(fs::exists(entry_of(scratch, key)));
}

TEST_CASE("a symlink planted at the temporary file's name is not written through", "[cache][security]") {
  ScratchCache scratch;
  const std::string key = key_of("temp name");
  test::ScratchDir outside("weft-cache-victim");
  const fs::path victim = outside.dir / "victim.txt";
  std::ofstream(victim) << "precious";
  fs::create_directories(shard_of(scratch, key));
  // The names the next stores of this process will use (predictable: pid and a counter).
  const uint64_t next = cache::next_temp_sequence();
  for (uint64_t s = next; s < next + 4; ++s)
    fs::create_symlink(victim, shard_of(scratch, key) / cache::temp_file_name(key, s));
  cache::store(key, "payload");
  CHECK(read_file(victim) == "precious");
  CHECK(cache::load(key) == "payload");  // stored under a name nobody planted
}

TEST_CASE("WEFT_CACHE takes 0 or 1", "[cache][knobs]") {
  ScratchCache scratch;
  ScopedEnv bogus("WEFT_CACHE", "off");
  CHECK_THROWS_WITH(cache::load(key_of("x")), Catch::Contains("WEFT_CACHE=off is not a setting; use WEFT_CACHE=0"));
  ScopedEnv on("WEFT_CACHE", "1");
  CHECK(cache::enabled());
}
