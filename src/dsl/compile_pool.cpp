#include "dsl/compile_pool.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "support/env.h"

namespace weft::dsl {
namespace {

class CompilePool {
 public:
  void run(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    // More jobs queued than threads idle: another thread, up to one per core. Idle threads wait, never spin.
    if (jobs_.size() > static_cast<size_t>(idle_) && threads_.size() < static_cast<size_t>(support::host_cores()))
      threads_.emplace_back([this] { work(); });
    ready_.notify_one();
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ++idle_;
      ready_.wait(lock, [&] { return !jobs_.empty(); });
      --idle_;
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;  // detached in effect: the pool lives as long as the process
  int idle_ = 0;
};

}  // namespace

void run_on_compile_thread(std::function<void()> job) {
  static CompilePool* pool = new CompilePool;  // never destroyed: its threads wait for jobs until exit
  pool->run(std::move(job));
}

}  // namespace weft::dsl
