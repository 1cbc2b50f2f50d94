// The resource limits of one render, as data, and the budget that enforces them. A chat template
// comes with the model file, so it is untrusted code: every operation whose output size or work a
// template controls (a format width, str * n, join, replace, indent, tojson, ...) asks the budget
// BEFORE it allocates or loops, and a template that asks too much fails with a Limit error that
// names the limit ("output limit of 16777216 bytes exceeded") instead of exhausting memory or time.
//
// The budget is installed per thread for the duration of a render, so values and builtins deep
// inside an expression check it without an interpreter at hand; with none installed (building the
// template's input, tests of the value layer) nothing is checked.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace kestrel::jinja {

struct Limits {
  // The rendered text, and any one string or list a template builds. Above the server's largest
  // request body (8 MiB), which a legitimate template renders once plus its own markup.
  uint64_t max_output_bytes = uint64_t{16} << 20;
  // Bytes of strings and lists alive at once (a template can hold several large values).
  int64_t max_memory_bytes = int64_t{64} << 20;
  // Work: evaluated nodes, loop iterations and macro calls (4 each), items a builtin walks,
  // 256-byte units of text copied or scanned; a few tenths of a second of rendering. Real
  // templates use a few thousand steps per conversation; an 8 MiB one of 1000 messages, ~5%.
  uint64_t max_steps = 4'000'000;
  // Macro calls and recursive loops in progress.
  int max_recursion = 64;
  // Nested evaluations (expression within expression, block within block, across macro calls):
  // what the C++ stack holds, well under 1 MiB at this depth.
  int max_nesting = 500;
  // Containers nested in containers (a list in a dict in a namespace ...): printing, comparing
  // and freeing a value recurse this deep. The chat input itself may nest 256 deep.
  int max_value_depth = 400;
};

// What one render has used so far, against its limits.
struct Budget {
  Limits limits;
  int64_t live = 0;    // bytes of the strings and lists alive now
  uint64_t steps = 0;  // work done
};

// Installs the budget of this thread's render (nullptr: none); returns the previous one.
Budget* set_thread_budget(Budget* budget);
Budget* thread_budget();

// Counts n units of work; throws the step-limit error past max_steps.
void count_work(uint64_t n);
// Counts the work of copying or scanning `bytes` of text (one unit per 256 bytes).
inline void count_text_work(uint64_t bytes) { count_work(bytes >> 8); }
// Throws the output- or memory-limit error when one string or list of `bytes` may not be built
// now. Called BEFORE allocating.
void check_alloc(uint64_t bytes);
// Throws the value-depth error when a container `depth` deep may not be built.
void check_value_depth(int depth);
// The largest string the installed budget allows (no limit when none is installed). Builders
// whose output grows by a bounded amount per step compare against it in their loops.
uint64_t output_cap();
// Throws "output limit of N bytes exceeded" (the installed limit; the default one when none is).
[[noreturn]] void fail_output_limit();
// Adds n bytes to the live total (throws past max_memory_bytes); returns the budget they must be
// released to later, or nullptr when none is installed.
Budget* count_live(int64_t n);

// Counts n bytes as live for its own lifetime (a temporary copy the interpreter holds).
class LiveBytes {
 public:
  explicit LiveBytes(int64_t n) : budget_(count_live(n)), n_(n) {}
  ~LiveBytes() {
    if (budget_) budget_->live -= n_;
  }
  LiveBytes(const LiveBytes&) = delete;
  LiveBytes& operator=(const LiveBytes&) = delete;

 private:
  Budget* budget_;
  int64_t n_;
};

// Bytes a value's storage counts against the render's budget while alive. A copy counts nothing
// (the copy's owner counts its own bytes, if any).
class LiveCharge {
 public:
  LiveCharge() = default;
  LiveCharge(const LiveCharge&) {}
  LiveCharge& operator=(const LiveCharge&) { return *this; }
  ~LiveCharge() { release(); }
  void add(int64_t n) {  // throws the memory-limit error past max_memory_bytes
    if (Budget* b = count_live(n); b && (!budget_ || b == budget_)) budget_ = b, bytes_ += n;
    else if (b) b->live -= n;  // another render's budget: not ours to hold
  }
  void release() {
    if (budget_) budget_->live -= bytes_;
    budget_ = nullptr;
    bytes_ = 0;
  }

 private:
  Budget* budget_ = nullptr;
  int64_t bytes_ = 0;
};
// What a string, list or dict entry costs beyond its bytes (control block, node, header).
constexpr int64_t kValueOverhead = 48;

// Saturating arithmetic for sizes a template computes from its own numbers.
inline uint64_t sat_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
inline uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

// out += s, after checking that the grown string fits the one-value limit (and counting the work).
void append_checked(std::string& out, std::string_view s);
// out += n copies of s, checked the same way before anything is appended.
void append_repeated(std::string& out, std::string_view s, uint64_t n);

}  // namespace kestrel::jinja
