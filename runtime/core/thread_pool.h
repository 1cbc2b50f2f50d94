// A fixed pool of worker threads that run one function on every thread at once (fork-join).
// Workers spin briefly on an atomic generation counter before sleeping, because decode runs
// hundreds of small ops per token and a sleep/wake per op would dominate.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads - 1 workers; the caller is thread 0
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn(thread_index, n_threads) on all threads; returns when every call has returned.
  // Not re-entrant: one run() at a time per pool.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into n_threads near-equal chunks: chunk of thread ith.
  static void split(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
    const int64_t per = (n + nth - 1) / nth;
    *begin = std::min<int64_t>(n, per * ith);
    *end = std::min<int64_t>(n, *begin + per);
  }

 private:
  void worker(int index);
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// Physical cores available to this process (at least 1).
int default_thread_count();

}  // namespace kestrel
