// Drafters propose the next tokens of a sequence cheaply; the target model then scores all of them
// in one batched pass and keeps the longest prefix verify() accepts (verify.h).
//
//   auto d = make_ngram_drafter({});                     // or make_model_drafter(draft, target, opts)
//   DraftRequest req{.seq = 0, .history = tokens, .k = 4};
//   Draft out;
//   d->propose({&req, 1}, {&out, 1});                     // out.tokens: up to 4 guesses
//
// A drafter may keep state per sequence (a draft model keeps a KV cache); it reconciles that
// state with the history it is given, so rollback needs no call. release() forgets a sequence.
// Room for EAGLE/MTP heads: such a drafter reads the target's hidden states, which a Context
// captures on request (ContextOptions::capture_hidden).
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/context.h"
#include "sampling/sampler.h"

namespace kestrel {

// What one sequence asks for.
struct DraftRequest {
  int32_t seq = 0;                   // the sequence id (slot) it runs in
  std::span<const int32_t> history;  // every token so far, prompt and generated
  int32_t k = 0;                     // propose at most k tokens
  // For a sampled request, the sampler the draft draws with (owned by the caller, its history
  // kept by the caller); null: propose the draft's most likely tokens.
  Sampler* sampler = nullptr;
};

// A proposal. When the tokens were drawn at random, q[i] is the distribution token i was drawn
// from (verify() needs it to keep the target's distribution); empty q: each token was proposed
// with certainty.
struct Draft {
  std::vector<int32_t> tokens;
  std::vector<std::vector<std::pair<int32_t, double>>> q;
  void clear() { tokens.clear(), q.clear(); }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual const char* name() const = 0;
  // out[i] answers reqs[i]. Never fails a request: a drafter that cannot help returns no tokens.
  virtual Status propose(std::span<const DraftRequest> reqs, std::span<Draft> out) = 0;
  // The sequence ended or was preempted.
  virtual void release(int32_t seq) {}
};

// Prompt lookup: the last n tokens (n from n_max down to n_min) matched against earlier history;
// the tokens that followed the latest match are the proposal. No model.
struct NgramOptions {
  int32_t n_min = 1, n_max = 3;
};
std::unique_ptr<Drafter> make_ngram_drafter(const NgramOptions& opts);

// A second, smaller model with the target's vocabulary; it keeps its own context (n_ctx and
// n_seq_max as given) and drafts autoregressively, batched across the requests. Fails when the
// vocabularies differ (token texts, or sizes more than 128 apart, as llama.cpp allows).
Expected<std::unique_ptr<Drafter>> make_model_drafter(const Model& draft, const Model& target,
                                                      const ContextOptions& opts);
// The same over a draft context the caller owns (it must outlive the drafter; its cache is cleared).
Expected<std::unique_ptr<Drafter>> make_model_drafter(Context& draft_ctx, const Model& target);

// How a request speculates (the C API's kestrel_spec_options).
enum class SpecMode { kNone, kDraft, kNgram };
struct SpecParams {
  SpecMode mode = SpecMode::kNone;
  int32_t k_max = 8;  // most tokens drafted per step
  NgramOptions ngram;
};
// What speculation did for one request.
struct SpecStats {
  int32_t steps = 0;     // target passes that verified a draft
  int32_t drafted = 0;   // tokens proposed
  int32_t accepted = 0;  // of those, kept
};

// The sampler a draft model draws with for a request sampled by `target`: the same chain without
// penalties, another seed (any distribution keeps the target's exact, since verify() is told the
// one each token came from; a closer one is accepted more often). Null for greedy requests.
std::unique_ptr<Sampler> draft_sampler_for(const Sampler& target);

// The draft length, adapted to how the last proposals fared: two more after a fully accepted one,
// one fewer after a rejection (Hugging Face's assisted-generation rule), within [1, k_max].
struct DraftLength {
  int32_t k_max, k;  // the bound, and the length to draft next (starting at 4)
  explicit DraftLength(int32_t kmax = 8) : k_max(std::max(1, kmax)), k(std::min(4, k_max)) {}
  void update(int32_t drafted, int32_t accepted) {
    if (drafted <= 0) return;
    k = accepted >= drafted ? std::min(k_max, k + 2) : std::max(1, k - 1);
  }
};

}  // namespace kestrel
