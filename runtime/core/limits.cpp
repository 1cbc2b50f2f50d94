#include "core/limits.h"

#include <unistd.h>

namespace kestrel::limits {
namespace {

Status out_of_range(const std::string& what, int64_t v, int64_t lo, int64_t hi) {
  return Error(KESTREL_ERR_INVALID_ARGUMENT, what + " = " + std::to_string(v) + " is outside [" + std::to_string(lo) +
                                                 ", " + std::to_string(hi) + "]");
}

}  // namespace

Status check_threads(const std::string& what, int64_t n) {
  if (n < 0 || n > kMaxThreads) return out_of_range(what, n, 0, kMaxThreads);
  return Status::Ok();
}

Status check_context(const std::string& who, const ContextSizes& s) {
  if (s.n_ctx < 0 || s.n_ctx > kMaxCtx) return out_of_range(who + ": n_ctx", s.n_ctx, 0, kMaxCtx);
  if (s.n_batch < 0 || s.n_batch > kMaxBatch) return out_of_range(who + ": n_batch", s.n_batch, 0, kMaxBatch);
  if (s.n_seq < 1 || s.n_seq > kMaxSeq) return out_of_range(who + ": " + s.seq_name, s.n_seq, 1, kMaxSeq);
  return Status::Ok();
}

uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t add_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return mul_sat(static_cast<uint64_t>(pages), static_cast<uint64_t>(page));
}

}  // namespace kestrel::limits
