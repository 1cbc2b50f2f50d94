// Fibers, one per thread of the block being run; a scheduler that runs every runnable fiber until
// it blocks, then releases whichever barrier is complete. On x86-64 a fiber switch is a few
// instructions of our own (the callee-saved registers; the floating-point control words are the
// same for every fiber, nothing in a kernel changes them); elsewhere ucontext, whose swapcontext
// makes a system call per switch.
// Under ASan the stack switches are announced (sanitizer fiber API), so stacks are tracked.
#include "backends/cuda/emu/simt.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
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
#include <sanitizer/asan_interface.h>
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
  unsigned char* p = __start_ks_emu_shared;
  if (!p) return;
  // Eight bytes a store where the section allows it (it is 128-byte aligned): this runs per block.
  for (; p + 8 <= __stop_ks_emu_shared; p += 8) *reinterpret_cast<volatile uint64_t*>(p) = ~uint64_t{0};
  for (; p < __stop_ks_emu_shared; ++p) *reinterpret_cast<volatile unsigned char*>(p) = 0xFF;
}

#ifdef KS_EMU_ASAN
constexpr size_t kStack = size_t{256} << 10;  // ASan's frames are larger
constexpr size_t kStackTop = size_t{16} << 10;  // fiber_main's and the switch's frames
#else
constexpr size_t kStack = size_t{64} << 10;
#endif
constexpr unsigned kMaxThreads = 1024;

enum class Wait : uint8_t { kNone, kBlock, kWarp, kDone };

#if defined(__x86_64__)
// ks_emu_switch(save, to): saves the callee-saved state on the current stack, stores the stack
// pointer in *save and resumes the stack `to` (one saved by ks_emu_switch, or made by new_stack).
extern "C" void ks_emu_switch(void** save, void* to);
asm(R"(
  .text
  .globl ks_emu_switch
  .type ks_emu_switch, @function
ks_emu_switch:
  .cfi_startproc
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .cfi_endproc
  .size ks_emu_switch, .-ks_emu_switch
)");
struct Context {
  void* sp = nullptr;
};
void switch_to(Context& from, Context& to) { ks_emu_switch(&from.sp, to.sp); }
// A stack whose first switch "returns" into entry (which must never return).
void new_stack(Context& c, void* stack, size_t size, void (*entry)()) {
  auto top = (reinterpret_cast<uintptr_t>(stack) + size) & ~uintptr_t{15};
  auto* w = reinterpret_cast<uint64_t*>(top);
  w[-1] = 0;                                     // entry's own return address: none
  w[-2] = reinterpret_cast<uint64_t>(entry);     // popped by ret; entry then sees rsp = 8 mod 16
  for (int i = 3; i <= 8; ++i) w[-i] = 0;        // rbp rbx r12 r13 r14 r15
  c.sp = &w[-8];
}
#else
struct Context {
  ucontext_t uc{};
};
void switch_to(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
// Out of line: getcontext returns twice, which would make the compiler distrust the caller's locals.
__attribute__((noinline)) void new_stack(Context& c, void* stack, size_t size, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif

struct Fiber {
  Context uc;
  void* stack = nullptr;  // kStack bytes, mapped once and reused
  ThreadContext ctx;
  Wait wait = Wait::kNone;
  uint8_t parity = 0;  // which half of Block::slots this thread's next warp exchange uses
  void* asan_fake = nullptr;
};

struct Block {
  std::vector<Fiber> fibers;
  unsigned n = 0;  // threads in this block
  Context sched;
  const void* sched_bottom = nullptr;  // the scheduler's stack, for ASan
  size_t sched_size = 0;
  const std::function<void()>* body = nullptr;
  // Warp exchanges, two per thread: consecutive exchanges alternate halves, so one barrier per
  // exchange suffices (a lane can reach exchange k + 2 only after every lane finished k + 1,
  // and so had read k).
  std::vector<uint64_t> slots;
  std::vector<unsigned char> smem;
  Fiber* running = nullptr;
  std::string error;
  // Arrivals at the current barriers (park's fast path; the scheduler resets them too).
  std::vector<unsigned> warp_waiting;
  unsigned block_waiting = 0;
};

thread_local Block* g_block = nullptr;

// Called where a fiber resumes: tells ASan the switch is over, and keeps the scheduler's stack
// bounds (the first switch of a launch always comes from the scheduler).
void resumed(Fiber* f) {
#ifdef KS_EMU_ASAN
  Block& b = *g_block;
  const void* from_bottom = nullptr;
  size_t from_size = 0;
  __sanitizer_finish_switch_fiber(f ? f->asan_fake : nullptr, &from_bottom, &from_size);
  if (!b.sched_bottom) b.sched_bottom = from_bottom, b.sched_size = from_size;
#else
  (void)f;
#endif
}

void to_scheduler(Fiber& f, bool finished) {
  Block& b = *g_block;
#ifdef KS_EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.asan_fake, b.sched_bottom, b.sched_size);
#endif
  switch_to(f.uc, b.sched);
  resumed(&f);
}

// Fiber to fiber, without the scheduler in between.
void switch_fiber(Fiber& from, Fiber& to, bool finished) {
  Block& b = *g_block;
  b.running = &to;
#ifdef KS_EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &from.asan_fake, to.stack, kStack);
#else
  (void)finished;
#endif
  switch_to(from.uc, to.uc);
  resumed(&from);
}

// The next fiber after `self` (wrapping) that can run, or null.
Fiber* next_runnable(Block& b, unsigned self) {
  for (unsigned i = self + 1; i < b.n; ++i)
    if (b.fibers[i].wait == Wait::kNone) return &b.fibers[i];
  for (unsigned i = 0; i < self; ++i)
    if (b.fibers[i].wait == Wait::kNone) return &b.fibers[i];
  return nullptr;
}

// The running fiber waits at a barrier. Fast paths, no scheduler: the fiber that completes its
// barrier releases it and runs on; otherwise the next fiber that can run takes over directly.
// What is left (every fiber blocked, barriers that do not match) goes to the scheduler, which
// releases what is complete and reports misuse.
void park(Wait kind) {
  Block& b = *g_block;
  Fiber& f = *b.running;
  const unsigned self = f.ctx.linear;
  f.wait = kind;
  if (kind == Wait::kWarp) {
    const unsigned w = self / 32, lanes = std::min(b.n - 32 * w, 32u);
    if (++b.warp_waiting[w] == lanes) {
      b.warp_waiting[w] = 0;
      for (unsigned i = 32 * w; i < 32 * w + lanes; ++i) b.fibers[i].wait = Wait::kNone;
      return;
    }
  } else if (++b.block_waiting == b.n) {
    b.block_waiting = 0;
    for (Fiber& g : b.fibers) g.wait = Wait::kNone;
    return;
  }
  if (Fiber* next = next_runnable(b, self)) return switch_fiber(f, *next, false);
  to_scheduler(f, false);
}

void fiber_main() {
  Block& b = *g_block;
  Fiber& f = *b.running;
  resumed(nullptr);
  try {
    (*b.body)();
  } catch (const std::exception& e) {
    if (b.error.empty()) b.error = "thread " + std::to_string(f.ctx.linear) + " threw: " + e.what();
  } catch (...) {
    if (b.error.empty()) b.error = "thread " + std::to_string(f.ctx.linear) + " threw";
  }
  f.wait = Wait::kDone;
  Fiber* next = b.error.empty() ? next_runnable(b, f.ctx.linear) : nullptr;
  if (next) switch_fiber(f, *next, true);  // never resumed
  to_scheduler(f, true);
}

void run(Block& b, Fiber& f) {
  b.running = &f;
#ifdef KS_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStack);
#endif
  switch_to(b.sched, f.uc);
#ifdef KS_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  b.running = nullptr;
}

// `deep`: the stack's last fiber may have left frames anywhere on it (its launch failed, or it is
// the stack's first use); otherwise only the top kStackTop bytes can hold a frame's shadow.
void start_at_main(Fiber& f, bool deep) {
#ifdef KS_EMU_ASAN
  // A reused stack keeps the shadow of the frames its last fiber left: a fiber ends by switching
  // away from fiber_main, so those frames never return. A finished kernel's own frames did return
  // (and were unpoisoned then), so after a clean launch only the top of the stack needs it, which
  // spares ASan clearing 32 KiB of shadow per thread per block.
  if (deep)
    __asan_unpoison_memory_region(f.stack, kStack);
  else
    __asan_unpoison_memory_region(static_cast<unsigned char*>(f.stack) + kStack - kStackTop, kStackTop);
#else
  (void)deep;
#endif
  new_stack(f.uc, f.stack, kStack, fiber_main);
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
        b.warp_waiting[w] = 0;
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
      b.block_waiting = 0;
      continue;
    }
    if (!at_block.empty() && at_warp.empty())
      return "__syncthreads reached by threads " + list(at_block) + " but never by threads " + list(done) +
             " (they exited)";
    return "threads wait at different barriers: __syncthreads: " + list(at_block) + "; warp: " + list(at_warp);
  }
}

// Stacks for up to 1024 fibers, in one region mapped lazily (MAP_NORESERVE: only the pages a
// fiber touches become memory) and kept for the next launch of this OS thread.
struct StackPool {
  void* region = nullptr;
  // Which stacks may hold shadow below their top kStackTop bytes (see start_at_main).
  std::vector<bool> deep = std::vector<bool>(kMaxThreads, true);
  ~StackPool() {
    if (region) munmap(region, kStack * kMaxThreads);
  }
  void* get(size_t i) {
    if (!region) {
      void* r = mmap(nullptr, kStack * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (r == MAP_FAILED) return nullptr;
      region = r;
    }
    return static_cast<unsigned char*>(region) + i * kStack;
  }
};

}  // namespace

const ThreadContext& current() { return g_block->running->ctx; }

void* dynamic_shared() { return g_block->smem.data(); }

unsigned lane_id() { return g_block->running->ctx.linear % 32; }

void sync_block() { park(Wait::kBlock); }

void sync_warp() { park(Wait::kWarp); }

uint64_t warp_exchange(uint64_t value, unsigned (*src_lane)(unsigned, unsigned, unsigned), unsigned arg,
                       unsigned width) {
  Block& b = *g_block;
  Fiber& f = *b.running;
  const unsigned self = f.ctx.linear, base = self - self % 32;
  uint64_t* slots = b.slots.data() + (f.parity ? b.n : 0);
  f.parity ^= 1;
  slots[self] = value;
  sync_warp();  // every lane has written
  const unsigned src = base + src_lane(self % 32, arg, width);
  return src < b.n ? slots[src] : value;
}

uint32_t warp_ballot(bool pred) {
  uint32_t bits = 0;
  Block& b = *g_block;
  Fiber& f = *b.running;
  const unsigned self = f.ctx.linear, base = self - self % 32;
  uint64_t* slots = b.slots.data() + (f.parity ? b.n : 0);
  f.parity ^= 1;
  slots[self] = pred ? 1 : 0;
  sync_warp();
  for (unsigned l = 0; l < 32 && base + l < b.n; ++l) bits |= static_cast<uint32_t>(slots[base + l] != 0) << l;
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
  b.slots.assign(2 * size_t{n}, 0);
  b.warp_waiting.assign((n + 31) / 32, 0);
  g_block = &b;
  std::string error;
  for (unsigned bz = 0; bz < grid.z && error.empty(); ++bz)
    for (unsigned by = 0; by < grid.y && error.empty(); ++by)
      for (unsigned bx = 0; bx < grid.x && error.empty(); ++bx) {
        b.smem.assign(dynamic_smem, 0xFF);  // undefined at block start, as on the GPU
        std::fill(b.warp_waiting.begin(), b.warp_waiting.end(), 0u);
        b.block_waiting = 0;
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
          f.parity = 0;
          f.asan_fake = nullptr;
          start_at_main(f, pool.deep[i]);
          pool.deep[i] = false;
        }
        if (error.empty()) error = schedule(b);
        // A failed block may leave fibers parked mid-kernel, or frames an exception unwound
        // (ASan does not unpoison those): their stacks are cleared whole next time.
        if (!error.empty() || !b.error.empty())
          for (unsigned i = 0; i < n; ++i) pool.deep[i] = true;
        if (!error.empty())
          error = "block (" + std::to_string(bx) + ", " + std::to_string(by) + ", " + std::to_string(bz) + "): " + error;
      }
  g_block = nullptr;
  return error;
}

}  // namespace kestrel::cuda_emu
