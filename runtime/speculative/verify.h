// Verification of a draft against the target's logits, one sequence at a time.
//
// The target decodes [last, d_1 .. d_k] in one pass; rows[i] is its logits after d_1 .. d_i
// (row 0 scores d_1, row k gives the token after the whole draft). verify() then emits what
// sampling token by token from those rows would have emitted:
// - greedy (temperature <= 0): the drafts while each equals the sampler's pick, then the pick of
//   the first row that disagrees (or of row k): the output is token for token the output
//   without speculation, because the target's logits do not depend on the batch (qgemm.h);
// - sampled: d_i is accepted with probability min(1, p(d_i) / q(d_i)), p the distribution
//   sample() would draw from (temperature, top-k/p, min-p, penalties, bias) and q the one the
//   draft drew d_i from (a point mass when the drafter proposed it with certainty); the first
//   rejection draws from max(0, p - q) normalized instead, and a fully accepted draft adds one
//   token drawn from row k. Leviathan et al. (2023) prove each emitted token then has exactly
//   the target's distribution.
// Every emitted token is recorded in the sampler (penalty history) before the next row is used.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "speculative/drafter.h"

namespace kestrel {

struct VerifyResult {
  int32_t n_accepted = 0;       // drafts kept
  std::vector<int32_t> tokens;  // emitted: the n_accepted drafts, then one token more
};

// For tests only: a rule that is wrong on purpose, to show the statistical test can fail.
enum class AcceptRule {
  kExact,
  kWrongResampleFromTarget,  // on rejection, draw from p instead of max(0, p - q)
};

// rows.size() == draft.tokens.size() + 1. Rows may be whole or best-only (LogitRow) when the
// sampler's best_needed() allows.
Status verify(Sampler& sampler, std::span<const LogitRow> rows, const Draft& draft, VerifyResult* out,
              AcceptRule rule = AcceptRule::kExact);

}  // namespace kestrel
