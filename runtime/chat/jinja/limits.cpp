// The render budget (see limits.h): one per rendering thread, checked before work and allocation.
#include "chat/jinja/limits.h"

#include <utility>

#include "chat/jinja/error.h"

namespace kestrel::jinja {
namespace {
thread_local Budget* t_budget = nullptr;
}  // namespace

Budget* set_thread_budget(Budget* budget) { return std::exchange(t_budget, budget); }
Budget* thread_budget() { return t_budget; }

void count_work(uint64_t n) {
  Budget* b = t_budget;
  if (!b) return;
  b->steps = sat_add(b->steps, n);
  if (b->steps > b->limits.max_steps)
    fail(ErrorKind::Limit, "step limit of " + std::to_string(b->limits.max_steps) + " exceeded");
}

uint64_t output_cap() { return t_budget ? t_budget->limits.max_output_bytes : UINT64_MAX; }

[[noreturn]] void fail_output_limit() {
  const uint64_t limit = t_budget ? t_budget->limits.max_output_bytes : Limits{}.max_output_bytes;
  fail(ErrorKind::Limit, "output limit of " + std::to_string(limit) + " bytes exceeded");
}

[[noreturn]] static void fail_memory_limit(const Budget& b) {
  fail(ErrorKind::Limit, "memory limit of " + std::to_string(b.limits.max_memory_bytes) + " bytes exceeded");
}

void check_alloc(uint64_t bytes) {
  const Budget* b = t_budget;
  if (!b) return;
  if (bytes > b->limits.max_output_bytes) fail_output_limit();
  if (static_cast<int64_t>(bytes) > b->limits.max_memory_bytes - b->live) fail_memory_limit(*b);
}

void check_value_depth(int depth) {
  const Budget* b = t_budget;
  if (b && depth > b->limits.max_value_depth)
    fail(ErrorKind::Limit, "value nesting limit of " + std::to_string(b->limits.max_value_depth) + " exceeded");
}

Budget* count_live(int64_t n) {
  Budget* b = t_budget;
  if (!b) return nullptr;
  if (n > b->limits.max_memory_bytes - b->live) fail_memory_limit(*b);
  b->live += n;
  return b;
}

void append_checked(std::string& out, std::string_view s) {
  if (t_budget) {
    if (sat_add(out.size(), s.size()) > t_budget->limits.max_output_bytes) fail_output_limit();
    count_text_work(s.size());
  }
  out.append(s);
}

void append_repeated(std::string& out, std::string_view s, uint64_t n) {
  if (s.empty() || n == 0) return;
  const uint64_t total = sat_add(out.size(), sat_mul(s.size(), n));
  if (t_budget) {
    if (total > t_budget->limits.max_output_bytes) fail_output_limit();
    count_text_work(total - out.size());
  }
  out.reserve(total);
  for (uint64_t k = 0; k < n; ++k) out.append(s);
}

}  // namespace kestrel::jinja
