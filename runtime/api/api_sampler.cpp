// The sampler chain through the C API.
#include <cmath>

#include "api/guard.h"
#include "api/handles.h"
#include "chat/chat_syntax.h"
#include "sampling/grammar_matcher.h"
#include "sampling/logprobs.h"

using kestrel::api::fail;
using kestrel::api::guard;

namespace kestrel::api {

SamplerParams to_sampler_params(const kestrel_sampler_options& o) {
  SamplerParams p;
  p.temperature = o.temperature;
  p.top_k = o.top_k;
  p.top_p = o.top_p;
  p.min_p = o.min_p;
  p.repeat_penalty = o.repeat_penalty;
  p.presence_penalty = o.presence_penalty;
  p.frequency_penalty = o.frequency_penalty;
  p.penalty_last_n = o.penalty_last_n;
  p.seed = o.seed;
  if (o.n_logit_bias > 0 && o.logit_bias_tokens && o.logit_bias_values)
    for (int32_t i = 0; i < o.n_logit_bias; ++i) p.logit_bias.emplace_back(o.logit_bias_tokens[i], o.logit_bias_values[i]);
  return p;
}

Status check_logit_bias(const char* fn, const kestrel_sampler_options& o) {
  if (o.n_logit_bias < 0 || (o.n_logit_bias > 0 && (!o.logit_bias_tokens || !o.logit_bias_values)))
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": n_logit_bias is " + std::to_string(o.n_logit_bias) +
                                                   " but logit_bias_tokens or logit_bias_values is NULL (or it is negative)");
  return Status::Ok();
}

}  // namespace kestrel::api

extern "C" {

void kestrel_sampler_options_init(kestrel_sampler_options* o) {
  if (!o) return;
  *o = kestrel_sampler_options{};
  o->struct_size = sizeof *o;
  o->temperature = 0.8f;
  o->top_k = 40;
  o->top_p = 0.95f;
  o->min_p = 0.05f;
  o->repeat_penalty = 1.0f;
  o->presence_penalty = 0.0f;
  o->frequency_penalty = 0.0f;
  o->penalty_last_n = 64;
  o->seed = 0;
}

kestrel_status kestrel_sampler_new(const kestrel_sampler_options* opts, kestrel_sampler** out) {
  return guard("kestrel_sampler_new", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(out, "kestrel_sampler_new", "out must not be NULL");
    *out = nullptr;
    kestrel_sampler_options o;
    kestrel_sampler_options_init(&o);
    const char* err = nullptr;
    if (!kestrel::api::read_options(opts, &o, &err))
      return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_sampler_new: ") + err);
    kestrel::Status st = kestrel::api::check_logit_bias("kestrel_sampler_new", o);
    if (!st.ok()) return fail(st);
    kestrel::SamplerParams p = kestrel::api::to_sampler_params(o);
    st = kestrel::validate(p);
    if (!st.ok()) return fail(st);
    *out = new kestrel_sampler{std::make_unique<kestrel::Sampler>(p)};
    return KESTREL_OK;
  });
}

void kestrel_sampler_free(kestrel_sampler* s) { delete s; }

kestrel_status kestrel_logprobs(const float* logits, int32_t n_vocab, kestrel_token token, float* token_logprob,
                                kestrel_token_logprob* top, int32_t k) {
  return guard("kestrel_logprobs", [&]() -> kestrel_status {
    const char* fn = "kestrel_logprobs";
    KS_API_CHECK_ARG(logits && n_vocab > 0, fn, "logits must not be NULL and n_vocab must be positive");
    KS_API_CHECK_ARG(token >= -1 && token < n_vocab, fn, "token " + std::to_string(token) + " is outside [-1, n_vocab)");
    KS_API_CHECK_ARG(k <= 0 || top, fn, "top must not be NULL when k > 0");
    std::vector<kestrel::TokenLogprob> best;
    const float lp = kestrel::log_softmax_top({logits, static_cast<size_t>(n_vocab)}, token, top ? k : 0, &best);
    if (token_logprob) *token_logprob = lp;
    for (size_t i = 0; i < best.size(); ++i) top[i] = {best[i].token, best[i].logprob};
    return KESTREL_OK;
  });
}

kestrel_status kestrel_sampler_sample(kestrel_sampler* s, const float* logits, int32_t n_vocab, kestrel_token* out) {
  return guard("kestrel_sampler_sample", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(s && logits && out && n_vocab > 0, "kestrel_sampler_sample",
                     "sampler, logits and out must not be NULL and n_vocab > 0");
    auto t = s->sampler->sample(std::span<const float>(logits, static_cast<size_t>(n_vocab)));
    if (!t.ok()) return fail(t.status());
    *out = t.value();
    s->sampler->accept(t.value());
    return KESTREL_OK;
  });
}

void kestrel_sampler_accept(kestrel_sampler* s, kestrel_token token) {
  if (s) s->sampler->accept(token);
}

void kestrel_sampler_reset(kestrel_sampler* s) {
  if (s) s->sampler->reset();
}

kestrel_status kestrel_sampler_set_grammar(kestrel_sampler* s, const kestrel_model* model, const char* grammar,
                                           const char* json_schema, const kestrel_reply_parser* reply) {
  return guard("kestrel_sampler_set_grammar", [&]() -> kestrel_status {
    const char* fn = "kestrel_sampler_set_grammar";
    KS_API_CHECK_ARG(s && model, fn, "sampler and model must not be NULL");
    const kestrel::Tokenizer& tok = model->model->tokenizer();
    std::shared_ptr<kestrel::GrammarMatcher> m;
    const std::vector<int32_t> markers = reply ? kestrel::chat_marker_tokens(reply->syntax, tok) : std::vector<int32_t>{};
    const kestrel::Status st = kestrel::api::to_grammar(fn, grammar, json_schema, reply, markers, tok, &m);
    if (!st.ok()) return fail(st);
    s->sampler->set_grammar(std::move(m));
    return KESTREL_OK;
  });
}

}  // extern "C"
