// The compile cache (src/cache/disk_cache.h): content addressing, atomic entries, corruption detection,
// and many writers of one key at once — threads and processes.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/disk_cache.h"
#include "scratch_cache.h"

namespace fs = std::filesystem;
using namespace weft;

namespace {

using test::ScratchCache;

std::string random_payload(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

}  // namespace

TEST_CASE("cache keys are length-prefixed digests of every field", "[cache]") {
  std::string a = cache::KeyBuilder().add("ab").add("c").finish();
  std::string b = cache::KeyBuilder().add("a").add("bc").finish();
  CHECK(a.size() == 64);
  CHECK(a != b);  // no ambiguity when fields run together
  CHECK(a == cache::KeyBuilder().add("ab").add("c").finish());
  CHECK(cache::KeyBuilder().add(int64_t(4)).finish() != cache::KeyBuilder().add(int64_t(8)).finish());
}

TEST_CASE("cache entries round-trip binary payloads", "[cache]") {
  ScratchCache scratch;
  std::string key = cache::KeyBuilder().add("round trip").finish();
  CHECK_FALSE(cache::load(key).has_value());
  std::string payload = random_payload(100000, 7);  // includes NUL and newline bytes
  cache::store(key, payload);
  auto back = cache::load(key);
  REQUIRE(back.has_value());
  CHECK(*back == payload);
  CHECK(scratch.files().size() == 1);  // no temporary files left behind
}

TEST_CASE("a corrupt or truncated cache entry is detected and removed", "[cache]") {
  ScratchCache scratch;
  std::string key = cache::KeyBuilder().add("corrupt").finish();
  std::string payload = random_payload(5000, 11);
  for (int damage = 0; damage < 3; ++damage) {
    cache::store(key, payload);
    auto files = scratch.files();
    REQUIRE(files.size() == 1);
    fs::path entry = files[0];
    if (damage == 0) {  // truncated
      fs::resize_file(entry, fs::file_size(entry) - 100);
    } else if (damage == 1) {  // one byte of the payload flipped
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(-10, std::ios::end);
      f.put('\x5a' ^ payload[payload.size() - 10]);
    } else {  // not an entry at all
      std::ofstream(entry, std::ios::trunc) << "garbage";
    }
    CAPTURE(damage);
    CHECK_FALSE(cache::load(key).has_value());
    CHECK_FALSE(fs::exists(entry));  // removed, so the next compile rebuilds it
  }
  cache::store(key, payload);
  CHECK(cache::load(key) == payload);
}

TEST_CASE("WEFT_CACHE=0 turns the cache off", "[cache]") {
  ScratchCache scratch;
  ::setenv("WEFT_CACHE", "0", 1);
  std::string key = cache::KeyBuilder().add("off").finish();
  cache::store(key, "payload");
  CHECK_FALSE(cache::load(key).has_value());
  CHECK(scratch.files().empty());
  ::unsetenv("WEFT_CACHE");
}

TEST_CASE("many threads storing and loading one key see only whole entries", "[cache]") {
  ScratchCache scratch;
  std::string key = cache::KeyBuilder().add("threads").finish();
  // Every writer stores a different complete payload; a reader must get one of them, whole.
  std::vector<std::string> payloads;
  for (uint32_t i = 0; i < 8; ++i) payloads.push_back(random_payload(200000 + i, 100 + i));
  std::atomic<int> torn{0}, hits{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        cache::store(key, payloads[t]);
        if (auto got = cache::load(key)) {
          ++hits;
          if (std::find(payloads.begin(), payloads.end(), *got) == payloads.end()) ++torn;
        }
      }
    });
  for (auto& t : threads) t.join();
  CHECK(torn == 0);
  CHECK(hits > 0);
  CHECK(scratch.files().size() == 1);
}

TEST_CASE("several processes storing one key at once leave one whole entry", "[cache]") {
  ScratchCache scratch;
  std::string key = cache::KeyBuilder().add("processes").finish();
  std::vector<std::string> payloads;
  for (uint32_t i = 0; i < 4; ++i) payloads.push_back(random_payload(300000 + i, 200 + i));
  std::vector<pid_t> children;
  for (int p = 0; p < 4; ++p) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // child: store and load repeatedly; exit 1 on a torn read
      for (int round = 0; round < 25; ++round) {
        cache::store(key, payloads[p]);
        auto got = cache::load(key);
        if (got && std::find(payloads.begin(), payloads.end(), *got) == payloads.end()) ::_exit(1);
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  auto got = cache::load(key);
  REQUIRE(got.has_value());
  CHECK(std::find(payloads.begin(), payloads.end(), *got) != payloads.end());
  CHECK(scratch.files().size() == 1);
}
