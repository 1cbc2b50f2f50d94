// Limits on the sizes that callers, files and requests choose, kept as data: each is checked
// before any work or allocation, with the same bounds at every entry point (C API, engine,
// server through the C API), and documented in kestrel.h.
#pragma once
#include <cstdint>
#include <string>

#include "core/status.h"

namespace kestrel::limits {

inline constexpr int64_t kMaxThreads = 1024;             // n_threads (0: the default)
inline constexpr int64_t kMaxCtx = int64_t{1} << 24;     // KV cells: n_ctx, <arch>.context_length
inline constexpr int64_t kMaxBatch = int64_t{1} << 20;   // tokens per decode step: n_batch
inline constexpr int64_t kMaxSeq = 64;                   // sequences: n_seq_max, n_parallel
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;   // tokens: <arch>.vocab_size, tokenizer.ggml.tokens
inline constexpr int64_t kMaxPosition = INT32_MAX - 1;   // a token's position in its sequence

// n in [0, kMaxThreads]; `what` names the field, e.g. "kestrel_context_new: n_threads".
Status check_threads(const std::string& what, int64_t n);

struct ContextSizes {
  int64_t n_ctx = 0;                   // 0: the entry point's default
  int64_t n_batch = 0;                 // 0: the entry point's default
  int64_t n_seq = 1;
  const char* seq_name = "n_seq_max";  // the engine calls it n_parallel
};
// n_ctx in [0, kMaxCtx], n_batch in [0, kMaxBatch], n_seq in [1, kMaxSeq]; `who` starts the
// message (INVALID_ARGUMENT naming the field and its value).
Status check_context(const std::string& who, const ContextSizes& s);

// a * b and a + b, or UINT64_MAX when the result does not fit: sizes computed from file or
// caller values never wrap.
uint64_t mul_sat(uint64_t a, uint64_t b);
uint64_t add_sat(uint64_t a, uint64_t b);

// Bytes of physical memory of this machine (0 when unknown).
uint64_t physical_memory();

}  // namespace kestrel::limits
