// One sequence from prompt to finish on a Context (what kestrel_generate runs): the prompt in one
// pass, then one token per step, or, with a drafter, a verified draft per step (speculative
// decoding: 1 to k+1 tokens per target pass, the same output under greedy sampling, the same
// distribution otherwise; runtime/speculative).
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "engine/context.h"
#include "sampling/sampler.h"
#include "speculative/drafter.h"
#include "speculative/verify.h"

namespace kestrel {

struct GenerateOptions {
  int32_t max_tokens = 128;
  bool stop_at_eog = true;     // an end-of-generation token ends it (after on_token sees it)
  Drafter* drafter = nullptr;  // null: no speculation
  int32_t k_max = 8;           // most tokens drafted per step (the length adapts below it)
  // Each generated token, in order; false stops.
  std::function<bool(int32_t token)> on_token;
  AcceptRule rule = AcceptRule::kExact;  // tests only: a wrong rule on purpose
};

struct GenerateResult {
  int32_t n_generated = 0;
  SpecStats spec;
};

// Clears ctx's cache (sequence 0 is used) and generates. On return the cache holds the prompt
// and every generated token but the last, exactly as one-token-at-a-time decoding leaves it.
Status generate(Context& ctx, std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& opts,
                GenerateResult* result);

}  // namespace kestrel
