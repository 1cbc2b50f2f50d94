// A fixed pool of worker threads that run one function on every thread at once (fork-join).
// Workers spin briefly on an atomic generation counter before sleeping, because decode runs
// hundreds of small ops per token and a sleep/wake per op would dominate. Every wait pauses for a
// while and then yields the core (thread_pool.cpp, wait_turn), so that more threads than cores
// (two processes on one machine) do not spin away the time slice of the thread they wait for.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kestrel {

class ThreadPool {
 public:
  // n_threads - 1 workers; the caller is thread 0. When a worker cannot start, the ones started
  // are stopped and joined, then std::system_error says which one failed (callers at the API
  // boundary turn it into a status).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn(thread_index, n_threads) on all threads; returns when every call has returned.
  // Not re-entrant: one run() at a time per pool.
  void run(const std::function<void(int, int)>& fn);

  // What the workers' trace spans are named while a trace records (the op the caller is about to
  // run; the caller's own span is its business). A static or caller-owned string, or nullptr.
  void trace_label(const char* label) { trace_label_ = label; }

  // Splits [0, n) into n_threads near-equal chunks: chunk of thread ith.
  static void split(int64_t n, int ith, int nth, int64_t* begin, int64_t* end) {
    const int64_t per = (n + nth - 1) / nth;
    *begin = std::min<int64_t>(n, per * ith);
    *end = std::min<int64_t>(n, *begin + per);
  }

 private:
  void worker(int index);
  void stop_workers();  // wakes every worker with stop_ set and joins it
  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  const char* trace_label_ = nullptr;  // read by workers after the generation's release
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// A split of [0, n) for loops whose threads may run at different speeds (a VM's neighbours, a
// core that also served an interrupt): each thread starts on its near-equal share and takes it a
// chunk at a time, in order, so it still streams one region; a thread done with its share takes
// chunks from the fronts of the others'. Which thread runs an item never changes its result.
class ChunkedSplit {
 public:
  ChunkedSplit(int64_t n, int nth, int64_t chunk);
  // The next [begin, end) for thread ith; false once every item is taken.
  bool next(int ith, int64_t* begin, int64_t* end);

 private:
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  std::unique_ptr<Share[]> shares_;
  int nth_;
  int64_t chunk_;
};

// Physical cores available to this process (at least 1).
int default_thread_count();

}  // namespace kestrel
