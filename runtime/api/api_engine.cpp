// The engine's C boundary: options, request copies, callbacks bridged to the scheduler.
#include <cstddef>
#include <memory>
#include <string>

#include "api/guard.h"
#include "api/handles.h"
#include "core/limits.h"
#include "engine/scheduler.h"

using kestrel::api::fail;
using kestrel::api::guard;

struct kestrel_engine {
  std::unique_ptr<kestrel::Scheduler> sched;
  kestrel::SpecParams speculative;  // for requests that do not say
};

namespace {

void fill_result(const kestrel::RequestResult& r, kestrel_request_result* out) {
  if (!out) return;
  kestrel_request_result v{};
  v.struct_size = sizeof v;
  v.finish = static_cast<kestrel_finish_reason>(r.finish);
  v.status = r.status.ok() ? KESTREL_OK : r.status.code();
  v.n_prompt = r.n_prompt;
  v.n_cached = r.n_cached;
  v.n_generated = r.n_generated;
  v.n_drafted = r.spec.drafted;
  v.n_accepted = r.spec.accepted;
  v.stop_string = r.stop_index;
  v.queue_s = static_cast<float>(r.queue_s);
  kestrel::api::write_out(v, out, offsetof(kestrel_request_result, n_drafted));  // the fields API version 1 had
}

}  // namespace

extern "C" {

void kestrel_engine_options_init(kestrel_engine_options* o) {
  if (!o) return;
  *o = kestrel_engine_options{};
  o->struct_size = sizeof *o;
  o->n_parallel = 4;
  o->n_batch = 256;
  o->kv_type = KESTREL_KV_F16;
  o->kv_type_v = -1;
}

kestrel_status kestrel_engine_new(const kestrel_model* model, const kestrel_engine_options* opts, kestrel_engine** out) {
  return guard("kestrel_engine_new", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model && out, "kestrel_engine_new", "model and out must not be NULL");
    *out = nullptr;
    kestrel_engine_options o;
    kestrel_engine_options_init(&o);
    const char* err = nullptr;
    if (!kestrel::api::read_options(opts, &o, &err))
      return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_engine_new: ") + err);
    // The caps of every entry point (core/limits.h), on the caller's values before any narrowing.
    kestrel::Status caps = kestrel::limits::check_context("kestrel_engine_new", {o.n_ctx, o.n_batch, o.n_parallel, "n_parallel"});
    if (caps.ok()) caps = kestrel::limits::check_threads("kestrel_engine_new: n_threads", o.n_threads);
    if (!caps.ok()) return fail(caps);
    kestrel::SchedulerOptions so;
    so.n_ctx = static_cast<int32_t>(o.n_ctx);
    so.n_parallel = static_cast<int32_t>(o.n_parallel);
    so.n_batch = static_cast<int32_t>(o.n_batch);
    so.n_threads = o.n_threads;
    so.draft_model = o.draft_model ? o.draft_model->model.get() : nullptr;
    const kestrel::Status kv =
        kestrel::api::to_kv_types(o.kv_type, o.kv_type_v, "kestrel_engine_new", &so.kv_type, &so.kv_type_v);
    if (!kv.ok()) return fail(kv);
    kestrel::SpecParams spec;
    const kestrel::Status st = kestrel::api::to_spec_params(o.speculative, &spec);
    if (!st.ok()) return fail(st);
    if (spec.mode == kestrel::SpecMode::kDraft && !so.draft_model)
      return fail(KESTREL_ERR_INVALID_ARGUMENT, "kestrel_engine_new: speculative mode DRAFT needs a draft_model");
    auto s = kestrel::Scheduler::create(*model->model, so);
    if (!s.ok()) return fail(s.status());
    *out = new kestrel_engine{std::move(s.value()), spec};
    return KESTREL_OK;
  });
}

void kestrel_engine_free(kestrel_engine* engine) { delete engine; }

void kestrel_request_init(kestrel_request* r) {
  if (!r) return;
  *r = kestrel_request{};
  r->struct_size = sizeof *r;
  r->max_tokens = 128;
  r->stop_at_eog = true;
}

kestrel_status kestrel_submit(kestrel_engine* engine, const kestrel_request* req, uint64_t* id) {
  return guard("kestrel_submit", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(engine && req && id, "kestrel_submit", "engine, req and id must not be NULL");
    kestrel_request r;
    kestrel_request_init(&r);
    const char* err = nullptr;
    if (!kestrel::api::read_options(req, &r, &err))
      return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_submit: ") + err);
    KS_API_CHECK_ARG(r.n_prompt > 0 && r.prompt, "kestrel_submit", "the request has no prompt tokens");
    KS_API_CHECK_ARG(r.n_stop_tokens >= 0 && (r.n_stop_tokens == 0 || r.stop_tokens), "kestrel_submit",
                     "stop_tokens is NULL or n_stop_tokens negative");
    kestrel_sampler_options so;
    kestrel_sampler_options_init(&so);
    if (!kestrel::api::read_options(r.sampling, &so, &err))
      return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_submit: sampling: ") + err);
    const kestrel::Status bias = kestrel::api::check_logit_bias("kestrel_submit: sampling", so);
    if (!bias.ok()) return fail(bias);
    kestrel::RequestSpec spec;
    spec.prompt.assign(r.prompt, r.prompt + r.n_prompt);
    spec.max_tokens = r.max_tokens;
    spec.sampling = kestrel::api::to_sampler_params(so);
    spec.stop_at_eog = r.stop_at_eog;
    spec.speculative = engine->speculative;
    if (r.speculative) {
      const kestrel::Status st = kestrel::api::to_spec_params(r.speculative, &spec.speculative);
      if (!st.ok()) return fail(st);
    }
    spec.stop_tokens.assign(r.stop_tokens, r.stop_tokens + r.n_stop_tokens);
    const kestrel::Status stops = kestrel::api::to_stop_strings("kestrel_submit", r.stop_strings, r.n_stop_strings,
                                                                &spec.stop_strings);
    if (!stops.ok()) return fail(stops);
    const kestrel::Tokenizer& tok = engine->sched->model().tokenizer();
    // A chat family: its markers shown, its grammar (a forced tool call) enforced.
    if (r.reply) spec.render_tokens = kestrel::chat_marker_tokens(r.reply->syntax, tok);
    const kestrel::Status gst = kestrel::api::to_grammar("kestrel_submit", r.grammar, r.json_schema, r.reply,
                                                         spec.render_tokens, tok, &spec.grammar);
    if (!gst.ok()) return fail(gst);
    void* user = r.user;
    if (r.on_token) {
      kestrel_token_fn fn = r.on_token;
      spec.on_token = [fn, user](int32_t t, const std::string& piece) { return fn(t, piece.data(), piece.size(), user); };
    }
    if (r.on_logits) {
      kestrel_logits_fn fn = r.on_logits;
      spec.on_logits = [fn, user](std::span<const float> l) { fn(l.data(), static_cast<int32_t>(l.size()), user); };
    }
    if (r.on_done) {
      kestrel_done_fn fn = r.on_done;
      spec.on_done = [fn, user](const kestrel::RequestResult& res) {
        kestrel_request_result c{};
        c.struct_size = sizeof c;
        fill_result(res, &c);
        fn(&c, user);
      };
    }
    auto got = engine->sched->submit(std::move(spec));
    if (!got.ok()) return fail(got.status());
    *id = got.value();
    return KESTREL_OK;
  });
}

kestrel_status kestrel_cancel(kestrel_engine* engine, uint64_t id) {
  return guard("kestrel_cancel", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(engine, "kestrel_cancel", "engine must not be NULL");
    const kestrel::Status st = engine->sched->cancel(id);
    return st.ok() ? KESTREL_OK : fail(st);
  });
}

kestrel_status kestrel_wait(kestrel_engine* engine, uint64_t id, kestrel_request_result* result) {
  return guard("kestrel_wait", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(engine, "kestrel_wait", "engine must not be NULL");
    auto r = engine->sched->wait(id);
    if (!r.ok()) return fail(r.status());
    fill_result(r.value(), result);
    if (r->finish == kestrel::FinishReason::Error) kestrel::api::set_last_error(r->status.to_string());
    return KESTREL_OK;
  });
}

kestrel_status kestrel_engine_generate(kestrel_engine* engine, const kestrel_request* req,
                                       kestrel_request_result* result) {
  uint64_t id = 0;
  const kestrel_status st = kestrel_submit(engine, req, &id);
  return st == KESTREL_OK ? kestrel_wait(engine, id, result) : st;
}

kestrel_status kestrel_engine_stats(const kestrel_engine* engine, char* buf, size_t cap, size_t* len) {
  return guard("kestrel_engine_stats", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(engine && len, "kestrel_engine_stats", "engine and len must not be NULL");
    return kestrel::api::copy_out("kestrel_engine_stats", engine->sched->stats_json(), buf, cap, len);
  });
}

}  // extern "C"
