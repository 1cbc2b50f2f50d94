// kestrel_generate: tokenize, then engine/generate.h (the prompt, then one token or one verified
// draft per step), streaming complete UTF-8 pieces to the callback.
#include "api/guard.h"
#include "api/handles.h"
#include "engine/generate.h"
#include "engine/stop_strings.h"
#include "sampling/grammar_matcher.h"
#include "sampling/json_schema.h"
#include "tokenizer/unicode.h"

using kestrel::api::fail;
using kestrel::api::guard;

namespace kestrel::api {
Status to_stop_strings(const char* fn, const char* const* in, int32_t n, std::vector<std::string>* out) {
  if (n < 0 || (n > 0 && !in))
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": stop_strings is NULL or n_stop_strings negative");
  for (int32_t i = 0; i < n; ++i) {
    if (!in[i]) return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": a stop string is NULL");
    // Streamed text is valid UTF-8; a stop string that is not could match inside a character.
    if (!unicode::is_valid_utf8(in[i]))
      return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": stop string " + std::to_string(i) + " is not valid UTF-8");
    out->emplace_back(in[i]);
  }
  return Status::Ok();
}

Status to_grammar(const char* fn, const char* grammar, const char* json_schema, const Tokenizer& tok,
                  std::shared_ptr<GrammarMatcher>* out) {
  if (grammar && json_schema)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": grammar and json_schema are both set (one at most)");
  if (!grammar && !json_schema) return Status::Ok();
  std::string gbnf;
  if (json_schema) {
    auto g = json_schema_to_gbnf(json_schema);
    if (!g.ok()) return Error(g.status().code(), std::string(fn) + ": " + g.status().message());
    gbnf = std::move(g.value());
  }
  auto m = make_grammar_matcher(grammar ? std::string_view(grammar) : std::string_view(gbnf), tok);
  if (!m.ok()) return Error(m.status().code(), std::string(fn) + ": " + m.status().message());
  *out = std::move(m.value());
  return Status::Ok();
}

Status to_grammar(const char* fn, const char* grammar, const char* json_schema, const kestrel_reply_parser* reply,
                  const std::vector<int32_t>& markers, const Tokenizer& tok, std::shared_ptr<GrammarMatcher>* out) {
  KS_RETURN_IF_ERROR(to_grammar(fn, grammar, json_schema, tok, out));
  if (!reply || reply->grammar.empty()) return Status::Ok();
  if (*out)
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": reply forces a tool call: grammar and json_schema must be NULL");
  auto m = make_grammar_matcher(reply->grammar, tok, markers);
  KS_RETURN_IF_ERROR(m.status());
  *out = std::move(m.value());
  return Status::Ok();
}
}  // namespace kestrel::api

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
    kestrel::Status st = kestrel::api::check_logit_bias("kestrel_generate", so);
    if (!st.ok()) return fail(st);
    kestrel::SamplerParams sp = kestrel::api::to_sampler_params(so);
    st = kestrel::validate(sp);
    if (!st.ok()) return fail(st);
    kestrel::Sampler sampler(sp);
    std::vector<std::string> stop_list;
    st = kestrel::api::to_stop_strings("kestrel_generate", o.stop_strings, o.n_stop_strings, &stop_list);
    if (!st.ok()) return fail(st);
    kestrel::StopStrings stops(std::move(stop_list));
    kestrel::SpecParams spec;
    st = kestrel::api::to_spec_params(o.speculative, &spec);
    if (!st.ok()) return fail(st);

    const kestrel::Model& model = ctx->ctx->model();
    const kestrel::Tokenizer& tok = model.tokenizer();
    std::shared_ptr<kestrel::GrammarMatcher> grammar;
    st = kestrel::api::to_grammar("kestrel_generate", o.grammar, o.json_schema, tok, &grammar);
    if (!st.ok()) return fail(st);
    sampler.set_grammar(std::move(grammar));
    auto ids = tok.tokenize(prompt, o.add_special, o.parse_special);
    if (!ids.ok()) return fail(ids.status());
    if (ids->empty()) return fail(KESTREL_ERR_INVALID_ARGUMENT, "kestrel_generate: the prompt has no tokens");

    std::unique_ptr<kestrel::Drafter> drafter;
    if (spec.mode == kestrel::SpecMode::kNgram) drafter = kestrel::make_ngram_drafter(spec.ngram);
    if (spec.mode == kestrel::SpecMode::kDraft) {
      KS_API_CHECK_ARG(o.draft && o.draft != ctx, "kestrel_generate", "KESTREL_SPEC_DRAFT needs a draft context (another one)");
      auto d = kestrel::make_model_drafter(*o.draft->ctx, model);
      if (!d.ok()) return fail(d.status());
      drafter = std::move(d.value());
    }
    kestrel::GenerateOptions go;
    go.max_tokens = o.max_tokens;
    go.stop_at_eog = o.stop_at_eog;
    go.drafter = drafter.get();
    go.k_max = spec.k_max;
    kestrel::StreamingDetokenizer detok(tok, false);
    go.on_token = [&](int32_t t) {
      const bool last = o.stop_at_eog && tok.is_eog(t);
      const std::string piece = stops.push(last ? detok.flush() : detok.push(t));
      const bool go_on = !o.on_token || o.on_token(t, piece.data(), piece.size(), o.user);
      return go_on && !stops.stopped();
    };
    kestrel::GenerateResult res;
    st = kestrel::generate(*ctx->ctx, ids.value(), sampler, go, &res);
    if (n_generated) *n_generated = res.n_generated;
    kestrel::api::write_spec_stats(res.spec, o.spec_stats);
    if (!st.ok()) return fail(st);
    if (stops.stopped()) return KESTREL_OK;
    std::string rest = stops.push(detok.flush());  // the incomplete tail, then what stop strings held
    rest += stops.take_held();
    if (!rest.empty() && o.on_token) o.on_token(-1, rest.data(), rest.size(), o.user);
    return KESTREL_OK;
  });
}

}  // extern "C"
