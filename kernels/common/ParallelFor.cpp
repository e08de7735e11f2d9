// parallelFor's thread pool: workers wait for a job and take chunks of it off an atomic counter.
#include "kernels/common/ParallelFor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace glm::kernels {

namespace {

/// True on a thread that is running chunks of a job: nested loops then run inline.
thread_local bool tInsideJob = false;

class ThreadPool {
public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) {
      workers_.emplace_back([this] { workerLoop(); });
    }
  }

  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread &t : workers_) {
      t.join();
    }
  }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  /// Runs fn(chunk) for every chunk in [0, numChunks) and waits for all of them.
  void run(int64_t numChunks, const std::function<void(int64_t)> &fn) {
    // One job at a time: callers on different threads queue here.
    std::lock_guard<std::mutex> callerLock(callerMutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &fn;
      numChunks_ = numChunks;
      next_.store(0);
      busy_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return busy_ == 0; });
    job_ = nullptr;
  }

private:
  void drain() {
    tInsideJob = true;
    for (int64_t c = next_.fetch_add(1); c < numChunks_; c = next_.fetch_add(1)) {
      (*job_)(c);
    }
    tInsideJob = false;
  }

  void workerLoop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) {
        return;
      }
      seen = generation_;
      lock.unlock();
      drain();
      lock.lock();
      if (--busy_ == 0) {
        done_.notify_one();
      }
    }
  }

  std::vector<std::thread> workers_;
  std::mutex callerMutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t)> *job_ = nullptr;
  int64_t numChunks_ = 0;
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
  int busy_ = 0;
  bool stop_ = false;
};

int configuredThreads() {
  if (const char *env = std::getenv("GLM_CPU_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) {
      return n;
    }
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool &pool() {
  static ThreadPool instance(configuredThreads());
  return instance;
}

} // namespace

int parallelThreads() { return pool().threads(); }

void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)> &fn) {
  if (count <= 0) {
    return;
  }
  grain = std::max<int64_t>(grain, 1);
  const int64_t numChunks = (count + grain - 1) / grain;
  if (numChunks == 1 || tInsideJob || pool().threads() == 1) {
    for (int64_t begin = 0; begin < count; begin += grain) {
      fn(begin, std::min(count, begin + grain));
    }
    return;
  }
  pool().run(numChunks, [&](int64_t chunk) {
    const int64_t begin = chunk * grain;
    fn(begin, std::min(count, begin + grain));
  });
}

} // namespace glm::kernels
