// Fibers over ucontext, one per thread of the block being run; a scheduler that runs every
// runnable fiber until it blocks, then releases whichever barrier is complete. Under ASan the
// stack switches are announced (sanitizer fiber API), so stacks are tracked correctly.
#include "backends/cuda/emu/simt.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define KS_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KS_EMU_ASAN 1
#endif
#endif
#ifdef KS_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

// The static __shared__ variables of every emulated kernel (cuda_shim.h), bounds from the linker;
// weak, so a program with none links (both null).
extern "C" {
extern unsigned char __start_ks_emu_shared[] __attribute__((weak));
extern unsigned char __stop_ks_emu_shared[] __attribute__((weak));
}

namespace kestrel::cuda_emu {
namespace {

// Fills static shared memory with 0xFF. Not instrumented: under ASan the section also holds the
// redzones between the variables, which nothing reads.
__attribute__((no_sanitize_address)) void poison_static_shared() {
  volatile unsigned char* p = __start_ks_emu_shared;
  if (!p) return;
  for (; p < __stop_ks_emu_shared; ++p) *p = 0xFF;
}

#ifdef KS_EMU_ASAN
constexpr size_t kStack = size_t{512} << 10;  // ASan's frames are larger
#else
constexpr size_t kStack = size_t{128} << 10;
#endif
constexpr unsigned kMaxThreads = 1024;

enum class Wait : uint8_t { kNone, kBlock, kWarp, kDone };

struct Fiber {
  ucontext_t uc{};
  void* stack = nullptr;  // kStack bytes, mapped once and reused
  ThreadContext ctx;
  Wait wait = Wait::kNone;
  void* asan_fake = nullptr;
};

struct Block {
  std::vector<Fiber> fibers;
  unsigned n = 0;  // threads in this block
  ucontext_t sched{};
  const void* sched_bottom = nullptr;  // the scheduler's stack, for ASan
  size_t sched_size = 0;
  const std::function<void()>* body = nullptr;
  std::vector<uint64_t> slots;  // warp exchange, one per thread
  std::vector<unsigned char> smem;
  Fiber* running = nullptr;
  std::string error;
};

thread_local Block* g_block = nullptr;

void to_scheduler(Fiber& f, bool finished) {
  Block& b = *g_block;
#ifdef KS_EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake, b.sched_bottom, b.sched_size);
#endif
  swapcontext(&f.uc, &b.sched);
#ifdef KS_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.asan_fake, &b.sched_bottom, &b.sched_size);
#endif
}

void fiber_main() {
  Block& b = *g_block;
  Fiber& f = *b.running;
#ifdef KS_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b.sched_bottom, &b.sched_size);
#endif
  try {
    (*b.body)();
  } catch (const std::exception& e) {
    if (b.error.empty()) b.error = "thread " + std::to_string(f.ctx.linear) + " threw: " + e.what();
  } catch (...) {
    if (b.error.empty()) b.error = "thread " + std::to_string(f.ctx.linear) + " threw";
  }
  f.wait = Wait::kDone;
  to_scheduler(f, true);  // never resumed
}

void run(Block& b, Fiber& f) {
  b.running = &f;
#ifdef KS_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStack);
#endif
  swapcontext(&b.sched, &f.uc);
#ifdef KS_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  b.running = nullptr;
}

// A fresh context that enters fiber_main on f's stack. Out of line: getcontext returns twice,
// which would make the compiler distrust the caller's locals.
__attribute__((noinline)) void start_at_main(Fiber& f) {
  getcontext(&f.uc);
  f.uc.uc_stack.ss_sp = f.stack;
  f.uc.uc_stack.ss_size = kStack;
  f.uc.uc_link = nullptr;
  makecontext(&f.uc, fiber_main, 0);
}

std::string list(const std::vector<unsigned>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 8) s += ", ... (" + std::to_string(v.size()) + ")";
  return s;
}

// Runs the block's fibers to completion; "" or what went wrong.
std::string schedule(Block& b) {
  const unsigned n_warps = (b.n + 31) / 32;
  for (;;) {
    for (unsigned i = 0; i < b.n; ++i) {
      Fiber& f = b.fibers[i];
      if (f.wait == Wait::kNone) run(b, f);
      if (!b.error.empty()) return b.error;
    }
    // Every fiber now waits or is done. Release complete warp barriers first.
    bool released = false;
    for (unsigned w = 0; w < n_warps; ++w) {
      const unsigned l0 = 32 * w, l1 = std::min(b.n, l0 + 32);
      unsigned at_warp = 0, done = 0;
      for (unsigned i = l0; i < l1; ++i) {
        at_warp += b.fibers[i].wait == Wait::kWarp;
        done += b.fibers[i].wait == Wait::kDone;
      }
      if (at_warp == 0) continue;
      if (at_warp + done == l1 - l0 && done > 0)
        return "warp " + std::to_string(w) + ": a warp-wide operation waits for lanes that have exited";
      if (at_warp == l1 - l0) {
        for (unsigned i = l0; i < l1; ++i) b.fibers[i].wait = Wait::kNone;
        released = true;
      }
    }
    if (released) continue;
    std::vector<unsigned> at_block, at_warp, done;
    for (unsigned i = 0; i < b.n; ++i) {
      const Wait w = b.fibers[i].wait;
      (w == Wait::kBlock ? at_block : w == Wait::kWarp ? at_warp : done).push_back(i);
    }
    if (done.size() == b.n) return "";
    if (at_block.size() == b.n) {
      for (Fiber& f : b.fibers) f.wait = Wait::kNone;
      continue;
    }
    if (!at_block.empty() && at_warp.empty())
      return "__syncthreads reached by threads " + list(at_block) + " but never by threads " + list(done) +
             " (they exited)";
    return "threads wait at different barriers: __syncthreads: " + list(at_block) + "; warp: " + list(at_warp);
  }
}

// Stacks are mapped lazily (MAP_NORESERVE) and kept for the next launch of this OS thread.
struct StackPool {
  std::vector<void*> stacks;
  ~StackPool() {
    for (void* s : stacks) munmap(s, kStack);
  }
  void* get(size_t i) {
    while (stacks.size() <= i) {
      void* s = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (s == MAP_FAILED) return nullptr;
      stacks.push_back(s);
    }
    return stacks[i];
  }
};

}  // namespace

const ThreadContext& current() { return g_block->running->ctx; }

void* dynamic_shared() { return g_block->smem.data(); }

unsigned lane_id() { return g_block->running->ctx.linear % 32; }

void sync_block() {
  Fiber& f = *g_block->running;
  f.wait = Wait::kBlock;
  to_scheduler(f, false);
}

void sync_warp() {
  Fiber& f = *g_block->running;
  f.wait = Wait::kWarp;
  to_scheduler(f, false);
}

uint64_t warp_exchange(uint64_t value, unsigned (*src_lane)(unsigned, unsigned, unsigned), unsigned arg,
                       unsigned width) {
  Block& b = *g_block;
  const unsigned self = b.running->ctx.linear, base = self - self % 32;
  b.slots[self] = value;
  sync_warp();  // every lane has written
  const unsigned src = base + src_lane(self % 32, arg, width);
  const uint64_t got = src < b.n ? b.slots[src] : value;
  sync_warp();  // every lane has read before the slots are reused
  return got;
}

uint32_t warp_ballot(bool pred) {
  uint32_t bits = 0;
  Block& b = *g_block;
  const unsigned self = b.running->ctx.linear, base = self - self % 32;
  b.slots[self] = pred ? 1 : 0;
  sync_warp();
  for (unsigned l = 0; l < 32 && base + l < b.n; ++l) bits |= static_cast<uint32_t>(b.slots[base + l] != 0) << l;
  sync_warp();
  return bits;
}

// As the CUDA guide says: with width < 32 a lane may read earlier segments, not later ones (it
// gets its own value).
unsigned src_xor(unsigned lane, unsigned mask, unsigned width) {
  const unsigned seg = lane - lane % width, t = (lane ^ mask) % 32;
  return t >= seg + width ? lane : t;
}
unsigned src_down(unsigned lane, unsigned delta, unsigned width) {
  const unsigned seg = lane - lane % width;
  return lane + delta < seg + width ? lane + delta : lane;
}
unsigned src_up(unsigned lane, unsigned delta, unsigned width) {
  const unsigned seg = lane - lane % width;
  return lane >= seg + delta ? lane - delta : lane;
}
unsigned src_idx(unsigned lane, unsigned idx, unsigned width) { return lane - lane % width + idx % width; }

std::string launch(dim3 grid, dim3 block, size_t dynamic_smem, const std::function<void()>& body) {
  const unsigned n = block.count();
  if (n == 0 || n > kMaxThreads) return "block of " + std::to_string(n) + " threads (1 to 1024)";
  if (grid.count() == 0) return "empty grid";
  if (g_block) return "launch from inside a kernel (dynamic parallelism is not emulated)";
  // One launch at a time in the process: static __shared__ variables have one copy.
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  thread_local StackPool pool;
  Block b;
  b.n = n;
  b.body = &body;
  b.fibers.resize(n);
  b.slots.assign(n, 0);
  g_block = &b;
  std::string error;
  for (unsigned bz = 0; bz < grid.z && error.empty(); ++bz)
    for (unsigned by = 0; by < grid.y && error.empty(); ++by)
      for (unsigned bx = 0; bx < grid.x && error.empty(); ++bx) {
        b.smem.assign(dynamic_smem, 0xFF);  // undefined at block start, as on the GPU
        poison_static_shared();
        for (unsigned i = 0; i < n; ++i) {
          Fiber& f = b.fibers[i];
          f.stack = pool.get(i);
          if (!f.stack) {
            error = "no memory for fiber stacks";
            break;
          }
          f.ctx.thread_idx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
          f.ctx.block_idx = dim3(bx, by, bz);
          f.ctx.block_dim = block;
          f.ctx.grid_dim = grid;
          f.ctx.linear = i;
          f.wait = Wait::kNone;
          f.asan_fake = nullptr;
          start_at_main(f);
        }
        if (error.empty()) error = schedule(b);
        if (!error.empty())
          error = "block (" + std::to_string(bx) + ", " + std::to_string(by) + ", " + std::to_string(bz) + "): " + error;
      }
  g_block = nullptr;
  return error;
}

}  // namespace kestrel::cuda_emu
