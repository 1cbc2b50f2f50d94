#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <system_error>

#include "core/trace.h"

namespace kestrel {

namespace {

// One turn of a wait loop: a pause for the first kSpinPauses turns, then sched_yield. A thread
// waiting on another that the OS has descheduled (more runnable threads than cores: two
// processes, or a test next to a server) would otherwise burn its whole time slice, pausing,
// while the thread it waits for needs exactly that core; a decode step waits once per op.
constexpr int kSpinPauses = 2048;
inline void wait_turn(int turn) {
  if (turn < kSpinPauses) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  threads_.reserve(static_cast<size_t>(n_threads_ - 1));  // no reallocation (and no throw) below but the start
  for (int i = 1; i < n_threads_; ++i) {
    try {
      threads_.emplace_back([this, i] { worker(i); });
    } catch (...) {
      // Unwinding with workers alive would destroy the condition variable they wait on (a hang)
      // or a joinable std::thread (an abort): stop and join the ones started first.
      stop_workers();
      try {
        throw;
      } catch (const std::system_error& e) {
        throw std::system_error(e.code(), "thread pool: cannot start thread " + std::to_string(i + 1) + " of " +
                                              std::to_string(n_threads_) + " (lower n_threads)");
      }
    }
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0, n_threads_);
  for (int turn = 0; pending_.load(std::memory_order_acquire) != 0; ++turn) wait_turn(turn);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a while for the next job, yield for up to a millisecond more, then sleep. The yields
    // end by the clock: with more runnable threads than cores one yield can last a time slice,
    // and a worker that should sleep must not stay runnable for thousands of them.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int turn = 0; gen == seen && turn < kSpinPauses; ++turn) {
      wait_turn(turn);
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      while (gen == seen && std::chrono::steady_clock::now() < until) {
        sched_yield();
        gen = generation_.load(std::memory_order_acquire);
      }
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    if (trace::on() && trace_label_) {  // the worker's share of the op, as its own span
      trace::Span span("op", trace_label_);
      (*job_)(index, n_threads_);
    } else {
      (*job_)(index, n_threads_);
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

ChunkedSplit::ChunkedSplit(int64_t n, int nth, int64_t chunk)
    : shares_(std::make_unique<Share[]>(static_cast<size_t>(std::max(1, nth)))),
      nth_(std::max(1, nth)),
      chunk_(std::max<int64_t>(1, chunk)) {
  for (int t = 0; t < nth_; ++t) {
    int64_t b, e;
    ThreadPool::split(n, t, nth_, &b, &e);
    shares_[t].next.store(b, std::memory_order_relaxed);
    shares_[t].end = e;
  }
}

bool ChunkedSplit::next(int ith, int64_t* begin, int64_t* end) {
  for (int k = 0; k < nth_; ++k) {
    Share& s = shares_[(ith + k) % nth_];
    if (s.next.load(std::memory_order_relaxed) >= s.end) continue;
    const int64_t b = s.next.fetch_add(chunk_, std::memory_order_relaxed);
    if (b >= s.end) continue;
    *begin = b;
    *end = std::min(s.end, b + chunk_);
    return true;
  }
  return false;
}

int default_thread_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n ? static_cast<int>(n) : 1;
}

}  // namespace kestrel
