// The sampler chain: turns one row of logits into a token id.
//
// Order (llama.cpp's common default): logit bias -> penalties -> [temperature <= 0: greedy argmax,
// ties to the lowest id] -> top-k -> top-p -> min-p -> temperature -> softmax -> seeded draw.
// Top-p and min-p measure probabilities before temperature (softmax of the logits at that step).
//
//   Sampler s(params);                       // check validate(params) first for a clear error
//   for (int32_t t : prompt) s.accept(t);    // the penalties look back over accepted tokens
//   auto tok = s.sample(logits);             // does not record the token: call accept(*tok)
//
// Ordering among candidates is the strict order (logit descending, id ascending), so truncation
// with ties is deterministic, and the draw walks a deterministic candidate order: with the
// integer RNG in rng.h one seed reproduces a run. Not thread-safe; one Sampler per sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "sampling/rng.h"

namespace kestrel {

class GrammarMatcher;

struct SamplerParams {
  float temperature = 0.8f;     // <= 0: greedy
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // >= 1: off; keep the smallest top set with mass >= top_p
  float min_p = 0.05f;          // <= 0: off; drop tokens with p < min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; positive logits divided, negative multiplied
  float presence_penalty = 0;   // 0: off; subtracted once from any token seen
  float frequency_penalty = 0;  // 0: off; subtracted per occurrence
  int32_t penalty_last_n = 64;  // accepted tokens the penalties look back over; 0: off
  uint64_t seed = 0;            // the same seed reproduces the same draws
  // (token, value) added to that token's logit; -inf bans the token. Ids past n_vocab are
  // reported by sample() (n_vocab is not known here).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// One token's logit, as a decode step that selected on the device hands it back.
struct TokenLogit {
  int32_t id;
  float logit;
};

// Most best logits a step keeps per row when the sampler needs only those (Context's top_k; the
// TOP_K op's limit).
inline constexpr int32_t kMaxBestLogits = 256;

// One row of logits as a decode step returned it: the whole vocabulary, or only its best tokens
// in the chain's strict order (logit descending, id ascending; a NaN or +inf logit anywhere in
// the row is among them), which is all the chain reads when best_needed() says so.
struct LogitRow {
  std::span<const float> all;        // n_vocab logits, or empty
  std::span<const TokenLogit> best;  // else the best best.size() tokens, best first
  int32_t n_vocab = 0;               // of the row (all.size() when whole)
};
inline LogitRow whole_row(std::span<const float> logits) {
  return {logits, {}, static_cast<int32_t>(logits.size())};
}

// KESTREL_ERR_INVALID_ARGUMENT naming the field for NaN/inf values, top_p < 0, min_p > 1,
// repeat_penalty <= 0, penalty_last_n < 0, a negative bias token or a NaN/+inf bias.
Status validate(const SamplerParams& p);

class Sampler {
 public:
  // Invalid params are remembered and returned by every sample() call.
  explicit Sampler(SamplerParams params);

  // Picks a token. logits are not modified; a NaN or +inf logit, an empty row or a logit bias
  // token outside [0, logits.size()) is an error. -inf logits are allowed (never drawn) but at
  // least one token must remain finite.
  Expected<int32_t> sample(std::span<const float> logits) { return sample(whole_row(logits)); }
  Expected<int32_t> sample(const LogitRow& row);

  // How many of a row's best logits sample() and distribution() read: 1 for greedy, top_k for
  // top-k sampling (up to kMaxBestLogits), 0 when they need the whole row (logit bias and
  // penalties move tokens into the top; top-p or min-p without top-k measure the whole row).
  // A step may then keep only that many per row (device-side selection) with the same results.
  int32_t best_needed() const;

  // Records a generated token: for the penalties (negative ids are ignored; ids past n_vocab at
  // sample time have no effect) and, with a grammar, in its state (a token the grammar does not
  // allow makes the next sample() fail).
  void accept(int32_t token);
  // Records a prompt token: the penalties only.
  void accept_prompt(int32_t token);

  // Constrained decoding (grammar_matcher.h): from the next sample() on, only tokens the grammar
  // allows (its state advanced by accept()) can be drawn; the mask is applied after logit bias
  // and penalties, before truncation, so top-k, top-p and min-p measure the allowed tokens.
  // Shared with nobody else: the matcher is this sequence's state.
  void set_grammar(std::shared_ptr<GrammarMatcher> grammar);

  // Forgets the history and restarts the RNG from the seed (a grammar keeps its state).
  void reset();

  // For speculative decoding, which must draw from exactly the distribution sample() draws from:
  // the tokens sample() could return for these logits with their probabilities (summing to 1),
  // in the order its draw walks them. Greedy: the argmax alone, probability 1.
  Status distribution(std::span<const float> logits, std::vector<std::pair<int32_t, double>>* out) {
    return distribution(whole_row(logits), out);
  }
  Status distribution(const LogitRow& row, std::vector<std::pair<int32_t, double>>* out);
  // One uniform number in [0, 1) from this sampler's random stream.
  double uniform() { return rng_.uniform(); }
  // A token drawn from nonnegative weights (not necessarily normalized; not all zero), walking
  // them in order as sample() does.
  int32_t draw_from(std::span<const std::pair<int32_t, double>> weights);

  const SamplerParams& params() const { return params_; }

  // For tests: the candidates left after every step but the draw, in the order the draw walks
  // them, with logits divided by the temperature. With temperature <= 0, all tokens after bias
  // and penalties (greedy takes the first highest).
  Expected<std::vector<std::pair<int32_t, float>>> debug_apply(std::span<const float> logits);

 private:
  struct Candidate {
    Candidate() {}  // NOLINT: left uninitialized, so growing cand_ back each call costs nothing
    Candidate(int32_t i, float l) : id(i), logit(l) {}
    int32_t id;
    float logit;
  };
  Status prepare(const LogitRow& row);             // copy, check, bias, penalties
  Status prepare_all(std::span<const float> logits);
  Status prepare_best(const LogitRow& row);        // a row of best logits: already in order
  void truncate();                                 // top-k, top-p, min-p
  void sort_prefix(size_t m);
  void apply_top_k();
  void apply_top_p();
  void apply_min_p();
  int32_t argmax() const;
  int32_t draw();

  SamplerParams params_;
  Status params_status_;
  Rng rng_;
  std::vector<Candidate> cand_;  // reused across calls
  std::vector<double> weights_;  // reused across calls
  std::vector<Candidate> heap_;  // reused by sort_prefix
  std::vector<double> hist_;     // reused by apply_top_p
  size_t sorted_ = 0;            // cand_[0, sorted_) are the best, in order
  float max_logit_ = 0;          // over cand_, set by prepare()
  // The last penalty_last_n accepted tokens (a ring, grown as tokens arrive) and their counts.
  std::vector<int32_t> history_;
  size_t history_head_ = 0;
  std::unordered_map<int32_t, int32_t> counts_;
  std::shared_ptr<GrammarMatcher> grammar_;
  Status grammar_status_;  // a generated token the grammar refused
};

}  // namespace kestrel
