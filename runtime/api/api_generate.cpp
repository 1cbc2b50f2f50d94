// kestrel_generate: tokenize, decode the prompt, then sample and decode one token at a time,
// streaming complete UTF-8 pieces to the callback.
#include "api/guard.h"
#include "api/handles.h"

using kestrel::api::fail;
using kestrel::api::guard;

extern "C" {

void kestrel_generate_options_init(kestrel_generate_options* o) {
  if (!o) return;
  *o = kestrel_generate_options{};
  o->struct_size = sizeof *o;
  o->max_tokens = 128;
  o->add_special = true;
  o->parse_special = false;
  o->stop_at_eog = true;
}

kestrel_status kestrel_generate(kestrel_context* ctx, const char* prompt, const kestrel_generate_options* opts,
                                int32_t* n_generated) {
  return guard("kestrel_generate", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx && prompt, "kestrel_generate", "ctx and prompt must not be NULL");
    if (n_generated) *n_generated = 0;
    kestrel_generate_options o;
    kestrel_generate_options_init(&o);
    const char* err = nullptr;
    if (!kestrel::api::read_options(opts, &o, &err))
      return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_generate: ") + err);
    kestrel_sampler_options so;
    kestrel_sampler_options_init(&so);
    if (!kestrel::api::read_options(o.sampling, &so, &err))
      return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_generate: sampling: ") + err);
    kestrel::SamplerParams sp = kestrel::api::to_sampler_params(so);
    kestrel::Status st = kestrel::validate(sp);
    if (!st.ok()) return fail(st);
    kestrel::Sampler sampler(sp);

    const kestrel::Model& model = ctx->ctx->model();
    const kestrel::Tokenizer& tok = model.tokenizer();
    auto ids = tok.tokenize(prompt, o.add_special, o.parse_special);
    if (!ids.ok()) return fail(ids.status());
    if (ids->empty()) return fail(KESTREL_ERR_INVALID_ARGUMENT, "kestrel_generate: the prompt has no tokens");
    for (int32_t t : ids.value()) sampler.accept(t);

    ctx->ctx->kv().clear();
    st = ctx->ctx->decode({.tokens = ids.value()});
    if (!st.ok()) return fail(st);
    kestrel::StreamingDetokenizer detok(tok, false);
    for (int32_t i = 0; i < o.max_tokens; ++i) {
      auto logits = ctx->ctx->logits(-1);
      if (!logits.ok()) return fail(logits.status());
      auto next = sampler.sample(logits.value());
      if (!next.ok()) return fail(next.status());
      const int32_t t = next.value();
      sampler.accept(t);
      if (n_generated) *n_generated = i + 1;
      const bool eog = tok.is_eog(t);
      const std::string piece = eog && o.stop_at_eog ? detok.flush() : detok.push(t);
      if (o.on_token && !o.on_token(t, piece.data(), piece.size(), o.user)) break;
      if (eog && o.stop_at_eog) return KESTREL_OK;
      if (i + 1 == o.max_tokens) break;
      st = ctx->ctx->decode({.tokens = std::span<const int32_t>(&t, 1)});
      if (!st.ok()) return fail(st);
    }
    const std::string rest = detok.flush();
    if (!rest.empty() && o.on_token) o.on_token(-1, rest.data(), rest.size(), o.user);
    return KESTREL_OK;
  });
}

}  // extern "C"
