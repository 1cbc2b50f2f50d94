#include "engine/generate.h"

#include <memory>
#include <string>
#include <vector>

#include "core/trace.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

Status generate(Context& ctx, std::span<const int32_t> prompt, Sampler& sampler, const GenerateOptions& o,
                GenerateResult* res) {
  *res = GenerateResult{};
  const Tokenizer& tok = ctx.model().tokenizer();
  for (int32_t t : prompt) sampler.accept_prompt(t);
  ctx.kv().clear();
  // Only the best logits of each row come back when the sampler reads no more (device-side
  // selection: on a GPU the vocabulary-wide row stays there).
  const int32_t top_k = ctx.top_k_for(sampler.best_needed());
  KS_RETURN_IF_ERROR(ctx.decode({.tokens = prompt, .top_k = top_k}));
  if (o.max_tokens <= 0) return Status::Ok();
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  auto logits = ctx.row(-1);
  if (!logits.ok()) return logits.status();
  auto first = sampler.sample(logits.value());
  if (!first.ok()) return first.status();
  sampler.accept(first.value());
  std::vector<int32_t> emitted = {first.value()};

  const std::unique_ptr<Sampler> dsampler = o.drafter ? draft_sampler_for(sampler) : nullptr;
  DraftLength len(o.k_max);
  Draft draft;
  VerifyResult vr;
  std::vector<int32_t> batch;
  std::vector<LogitRow> rows;
  for (;;) {
    for (int32_t t : emitted) {
      history.push_back(t);
      ++res->n_generated;
      const bool stop = (o.on_token && !o.on_token(t)) || (o.stop_at_eog && tok.is_eog(t)) ||
                        res->n_generated >= o.max_tokens;
      if (stop) {  // the cache keeps what one-token decoding would have: all but the last token
        return ctx.kv().seq_remove(0, static_cast<int32_t>(history.size()) - 1, -1);
      }
    }
    // The last token is not in the cache yet: decode it, with a draft after it.
    draft.clear();
    const int32_t k = std::min(len.k, o.max_tokens - res->n_generated - 1);
    if (o.drafter && k > 0) {
      const DraftRequest req{.seq = 0, .history = history, .k = k, .sampler = dsampler.get()};
      trace::Span span("speculative", "draft");
      KS_RETURN_IF_ERROR(o.drafter->propose({&req, 1}, {&draft, 1}));
    }
    batch.assign(1, history.back());
    batch.insert(batch.end(), draft.tokens.begin(), draft.tokens.end());
    std::unique_ptr<bool[]> want(new bool[batch.size()]);
    for (size_t i = 0; i < batch.size(); ++i) want[i] = true;
    // Recurrent layers cannot drop rejected drafts: checkpoint, and replay what stays (below).
    const bool rollback = ctx.kv().recurrent() && !draft.tokens.empty();
    if (rollback) KS_RETURN_IF_ERROR(ctx.kv().checkpoint(0));
    KS_RETURN_IF_ERROR(ctx.decode({.tokens = batch, .want_logits = {want.get(), batch.size()}, .top_k = top_k}));
    rows.clear();
    for (size_t i = 0; i < batch.size(); ++i) {
      auto row = ctx.row(static_cast<int32_t>(i));
      if (!row.ok()) return row.status();
      rows.push_back(row.value());
    }
    {
      trace::Span span("speculative", "verify");
      KS_RETURN_IF_ERROR(verify(sampler, rows, draft, &vr, o.rule));
      if (trace::on())
        span.set_args("{\"drafted\":" + std::to_string(draft.tokens.size()) + ",\"accepted\":" +
                      std::to_string(vr.n_accepted) + "}");
    }
    // Rejected drafts leave the cache: it keeps the history and the accepted drafts. A recurrent
    // state goes back to its checkpoint and decodes the kept tokens again (their logits are known).
    if (rollback && vr.n_accepted < static_cast<int32_t>(draft.tokens.size())) {
      KS_RETURN_IF_ERROR(ctx.kv().seq_remove(0, static_cast<int32_t>(history.size()) - 1, -1));
      const std::span<const int32_t> kept(batch.data(), static_cast<size_t>(1 + vr.n_accepted));
      for (size_t i = 0; i < kept.size(); ++i) want[i] = i + 1 == kept.size();
      KS_RETURN_IF_ERROR(ctx.decode({.tokens = kept, .want_logits = {want.get(), kept.size()}, .top_k = top_k}));
    } else {
      KS_RETURN_IF_ERROR(ctx.kv().seq_remove(0, static_cast<int32_t>(history.size()) + vr.n_accepted, -1));
    }
    if (!draft.tokens.empty()) {
      ++res->spec.steps;
      res->spec.drafted += static_cast<int32_t>(draft.tokens.size());
      res->spec.accepted += vr.n_accepted;
      len.update(static_cast<int32_t>(draft.tokens.size()), vr.n_accepted);
    }
    emitted = vr.tokens;
  }
}

}  // namespace kestrel
