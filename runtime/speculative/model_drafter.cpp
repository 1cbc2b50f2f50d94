// Drafting with a second, smaller model: it keeps its own context, and per sequence the tokens
// its cache holds. Each proposal first brings the cache up to the history (dropping what the
// target rejected, decoding what it accepted since), then drafts k tokens one step at a time;
// every step is one batch over all the requests still drafting.
#include <algorithm>
#include <string>

#include "speculative/drafter.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

// llama.cpp's bound on how far the vocabulary sizes of a draft and a target may differ.
constexpr int32_t kMaxVocabDifference = 128;

Status check_vocab(const Model& draft, const Model& target) {
  const Tokenizer &td = draft.tokenizer(), &tt = target.tokenizer();
  const int32_t nd = td.n_vocab(), nt = tt.n_vocab();
  if (std::abs(nd - nt) > kMaxVocabDifference)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "draft model: its vocabulary has " + std::to_string(nd) +
                                                   " tokens, the target's " + std::to_string(nt) +
                                                   " (they must share one vocabulary)");
  for (int32_t i = 0; i < std::min(nd, nt); ++i)
    if (td.token_text(i) != tt.token_text(i))
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "draft model: token " + std::to_string(i) + " is '" + td.token_text(i) +
                                                     "' in the draft's vocabulary but '" + tt.token_text(i) +
                                                     "' in the target's");
  return Status::Ok();
}

class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(Context& ctx, std::unique_ptr<Context> owned, int32_t target_vocab)
      : owned_(std::move(owned)), ctx_(&ctx), cached_(static_cast<size_t>(ctx.kv().n_seq_max())),
        target_vocab_(target_vocab) {
    ctx_->kv().clear();  // the cells must be the ones cached_ lists
  }
  const char* name() const override { return "draft"; }

  Status propose(std::span<const DraftRequest> reqs, std::span<Draft> out) override {
    // Step 0: each request's uncached history (its last token at least), logits for the last.
    std::vector<int32_t> tokens, pos, seqs;
    std::vector<bool> want;
    std::vector<size_t> active;  // requests still drafting, in batch order
    for (size_t i = 0; i < reqs.size(); ++i) {
      out[i].clear();
      const DraftRequest& r = reqs[i];
      if (r.k <= 0 || r.history.empty() || r.seq < 0 || r.seq >= ctx_->kv().n_seq_max()) continue;
      const int32_t keep = sync(r.seq, r.history);
      for (size_t p = static_cast<size_t>(keep); p < r.history.size(); ++p) {
        tokens.push_back(r.history[p]);
        pos.push_back(static_cast<int32_t>(p));
        seqs.push_back(r.seq);
        want.push_back(p + 1 == r.history.size());
      }
      active.push_back(i);
    }
    for (int32_t step = 0; !active.empty(); ++step) {
      if (!decode(tokens, pos, seqs, want, ctx_->top_k_for(best_needed(reqs, active)))) {
        for (size_t i : active) out[i].clear();  // no room: no draft this time
        return Status::Ok();
      }
      // Sample each active request's next draft token from its logits row (the rows come in
      // batch order, one per active request).
      std::vector<size_t> next;
      tokens.clear(), pos.clear(), seqs.clear(), want.clear();
      int32_t row = 0;
      for (size_t i : active) {
        const DraftRequest& r = reqs[i];
        auto logits = ctx_->row(logit_rows_[static_cast<size_t>(row++)]);
        if (!logits.ok()) return logits.status();
        const int32_t t = pick(r, logits.value(), &out[i]);
        if (t < 0 || t >= target_vocab_) {  // a token the target does not have ends the draft
          if (!out[i].q.empty()) out[i].q.pop_back();
          continue;
        }
        out[i].tokens.push_back(t);
        const bool more = static_cast<int32_t>(out[i].tokens.size()) < r.k && !ctx_->model().tokenizer().is_eog(t);
        if (!more) continue;
        tokens.push_back(t);
        pos.push_back(static_cast<int32_t>(r.history.size()) + step);
        seqs.push_back(r.seq);
        want.push_back(true);
        next.push_back(i);
      }
      active.swap(next);
    }
    return Status::Ok();
  }

  void release(int32_t seq) override {
    if (seq < 0 || seq >= ctx_->kv().n_seq_max()) return;
    (void)ctx_->kv().seq_remove(seq, 0, -1);
    cached_[static_cast<size_t>(seq)].clear();
  }

 private:
  // Drops the cached tokens past the longest common prefix with the history; returns its length,
  // at most history.size() - 1 (the last token is decoded again for its logits).
  int32_t sync(int32_t seq, std::span<const int32_t> history) {
    std::vector<int32_t>& c = cached_[static_cast<size_t>(seq)];
    if (c.empty()) {  // a new sequence: shared prompt blocks come from the draft's prefix cache
      const int32_t n = ctx_->kv().attach_prefix(seq, history.first(history.size() - 1));
      c.assign(history.begin(), history.begin() + n);
      return n;
    }
    size_t keep = 0;
    const size_t lim = std::min(c.size(), history.size() - 1);
    while (keep < lim && c[keep] == history[keep]) ++keep;
    if (keep < c.size() && !ctx_->kv().seq_remove(seq, static_cast<int32_t>(keep), -1).ok()) {
      (void)ctx_->kv().seq_remove(seq, 0, -1);
      keep = 0;
    }
    c.resize(keep);
    return static_cast<int32_t>(keep);
  }

  // Decodes one drafting step; false (nothing cached) when the draft's cache has no room.
  bool decode(const std::vector<int32_t>& tokens, const std::vector<int32_t>& pos, const std::vector<int32_t>& seqs,
              const std::vector<bool>& want, int32_t top_k) {
    std::unique_ptr<bool[]> w(new bool[want.size()]);
    logit_rows_.clear();
    for (size_t i = 0; i < want.size(); ++i) {
      w[i] = want[i];
      if (want[i]) logit_rows_.push_back(static_cast<int32_t>(i));
    }
    const Status st = ctx_->decode({.tokens = tokens, .positions = pos, .seq_ids = seqs,
                                    .want_logits = {w.get(), want.size()}, .top_k = top_k});
    if (!st.ok()) return false;  // nothing was cached
    for (size_t i = 0; i < tokens.size(); ++i) cached_[static_cast<size_t>(seqs[i])].push_back(tokens[i]);
    return true;
  }

  // The draft's next token: its most likely one, or a draw from its sampler (recording q).
  static int32_t pick(const DraftRequest& r, const LogitRow& logits, Draft* out) {
    if (!r.sampler) {
      if (!logits.best.empty()) return logits.best.front().id;
      return static_cast<int32_t>(std::max_element(logits.all.begin(), logits.all.end()) - logits.all.begin());
    }
    std::vector<std::pair<int32_t, double>> q;
    if (!r.sampler->distribution(logits, &q).ok() || q.empty()) return -1;
    const int32_t t = r.sampler->draw_from(q);
    out->q.push_back(std::move(q));
    return t;
  }

  // The best logits per row a step needs for all active requests (0: whole rows): the argmax for
  // greedy drafts, else what their samplers read.
  static int32_t best_needed(std::span<const DraftRequest> reqs, const std::vector<size_t>& active) {
    int32_t k = 1;
    for (size_t i : active) {
      const int32_t need = reqs[i].sampler ? reqs[i].sampler->best_needed() : 1;
      if (need == 0) return 0;
      k = std::max(k, need);
    }
    return k;
  }

  std::unique_ptr<Context> owned_;
  Context* ctx_;
  std::vector<std::vector<int32_t>> cached_;  // per sequence: the tokens its cells hold, in order
  std::vector<int32_t> logit_rows_;           // batch rows of the last decode that have logits
  int32_t target_vocab_;
};

}  // namespace

Expected<std::unique_ptr<Drafter>> make_model_drafter(const Model& draft, const Model& target, const ContextOptions& opts) {
  KS_RETURN_IF_ERROR(check_vocab(draft, target));
  auto ctx = Context::create(draft, opts);
  if (!ctx.ok()) return Error(ctx.status().code(), "draft model: " + ctx.status().message());
  Context& c = *ctx.value();
  return std::unique_ptr<Drafter>(new ModelDrafter(c, std::move(ctx.value()), target.hparams().n_vocab));
}

Expected<std::unique_ptr<Drafter>> make_model_drafter(Context& draft_ctx, const Model& target) {
  KS_RETURN_IF_ERROR(check_vocab(draft_ctx.model(), target));
  return std::unique_ptr<Drafter>(new ModelDrafter(draft_ctx, nullptr, target.hparams().n_vocab));
}

}  // namespace kestrel
