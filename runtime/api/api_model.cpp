// Model loading, description and the tokenizer through the C API.
#include "api/guard.h"
#include "api/handles.h"
#include "backends/backend.h"
#include "core/limits.h"

#include <algorithm>

using kestrel::api::fail;
using kestrel::api::guard;

extern "C" {

void kestrel_model_options_init(kestrel_model_options* o) {
  if (!o) return;
  *o = kestrel_model_options{};
  o->struct_size = sizeof *o;
  o->backend = "auto";
  o->n_threads = 0;
  o->use_mmap = true;
}

kestrel_status kestrel_model_load(const char* path, const kestrel_model_options* opts, kestrel_model** out) {
  return guard("kestrel_model_load", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(path && out, "kestrel_model_load", "path and out_model must not be NULL");
    *out = nullptr;
    kestrel_model_options o;
    kestrel_model_options_init(&o);
    const char* err = nullptr;
    if (!kestrel::api::read_options(opts, &o, &err)) return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_model_load: ") + err);
    kestrel::ModelLoadOptions lo;
    lo.backend = o.backend ? o.backend : "auto";
    const auto names = kestrel::compiled_backends();
    if (lo.backend != "auto" && std::find(names.begin(), names.end(), lo.backend) == names.end())
      return fail(KESTREL_ERR_INVALID_ARGUMENT, "kestrel_model_load: unknown backend '" + lo.backend + "'");
    const kestrel::Status threads = kestrel::limits::check_threads("kestrel_model_load: n_threads", o.n_threads);
    if (!threads.ok()) return fail(threads);
    lo.n_threads = o.n_threads;
    lo.use_mmap = o.use_mmap;
    lo.vocab_only = o.vocab_only;
    lo.progress = o.progress;
    lo.progress_user = o.progress_user;
    auto m = kestrel::Model::load(path, lo);
    if (!m.ok()) return fail(m.status());
    *out = new kestrel_model{std::move(m.value())};
    return KESTREL_OK;
  });
}

void kestrel_model_free(kestrel_model* model) { delete model; }

kestrel_status kestrel_model_describe(const kestrel_model* model, char* buf, size_t cap, size_t* len) {
  return guard("kestrel_model_describe", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model, "kestrel_model_describe", "model must not be NULL");
    return kestrel::api::copy_out("kestrel_model_describe", model->model->describe_json(), buf, cap, len);
  });
}

int32_t kestrel_model_n_vocab(const kestrel_model* m) { return m ? m->model->hparams().n_vocab : 0; }
int32_t kestrel_model_n_ctx_train(const kestrel_model* m) { return m ? m->model->hparams().n_ctx_train : 0; }
kestrel_token kestrel_model_token_bos(const kestrel_model* m) { return m ? m->model->tokenizer().bos() : -1; }
kestrel_token kestrel_model_token_eos(const kestrel_model* m) { return m ? m->model->tokenizer().eos() : -1; }
bool kestrel_model_token_is_eog(const kestrel_model* m, kestrel_token t) {
  return m && m->model->tokenizer().is_eog(t);
}

kestrel_status kestrel_tokenize(const kestrel_model* model, const char* text, size_t text_len, bool add_special,
                                bool parse_special, kestrel_token* tokens, size_t cap, size_t* n_tokens) {
  return guard("kestrel_tokenize", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model && (text || text_len == 0) && n_tokens, "kestrel_tokenize",
                     "model, text and n_tokens must not be NULL");
    const kestrel::Status b = kestrel::api::check_buffer("kestrel_tokenize", tokens, cap);
    if (!b.ok()) return fail(b);
    auto ids = model->model->tokenizer().tokenize(std::string_view(text ? text : "", text_len), add_special, parse_special);
    if (!ids.ok()) return fail(ids.status());
    return kestrel::api::copy_tokens("kestrel_tokenize", *ids, tokens, cap, n_tokens);
  });
}

kestrel_status kestrel_detokenize(const kestrel_model* model, const kestrel_token* tokens, size_t n, bool render_special,
                                  char* buf, size_t cap, size_t* len) {
  return guard("kestrel_detokenize", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model && (tokens || n == 0), "kestrel_detokenize", "model and tokens must not be NULL");
    std::span<const int32_t> ids(tokens, n);
    const kestrel::Tokenizer& tok = model->model->tokenizer();
    kestrel::Status st = tok.check_ids(ids);
    if (!st.ok()) return fail(st);
    // Text leaving the library is valid UTF-8: invalid bytes become U+FFFD (as when streamed).
    return kestrel::api::copy_out("kestrel_detokenize", kestrel::utf8_repaired(tok.detokenize(ids, render_special)), buf,
                                  cap, len);
  });
}

kestrel_status kestrel_token_to_piece(const kestrel_model* model, kestrel_token token, bool render_special, char* buf,
                                      size_t cap, size_t* len) {
  return guard("kestrel_token_to_piece", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model && len, "kestrel_token_to_piece", "model and len must not be NULL");
    const kestrel::Tokenizer& tok = model->model->tokenizer();
    kestrel::Status st = tok.check_ids(std::span<const int32_t>(&token, 1));
    if (!st.ok()) return fail(st);
    return kestrel::api::copy_out("kestrel_token_to_piece", tok.token_to_piece(token, render_special), buf, cap, len);
  });
}

kestrel_status kestrel_detokenizer_new(const kestrel_model* model, bool render_special, kestrel_detokenizer** out) {
  return guard("kestrel_detokenizer_new", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model && out, "kestrel_detokenizer_new", "model and out must not be NULL");
    *out = new kestrel_detokenizer{
        std::make_unique<kestrel::StreamingDetokenizer>(model->model->tokenizer(), render_special)};
    return KESTREL_OK;
  });
}

void kestrel_detokenizer_free(kestrel_detokenizer* d) { delete d; }

kestrel_status kestrel_detokenizer_push(kestrel_detokenizer* d, kestrel_token token, char* buf, size_t cap, size_t* len) {
  return guard("kestrel_detokenizer_push", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(d && len, "kestrel_detokenizer_push", "detokenizer and len must not be NULL");
    // Every check before the token is taken: a refused call changes nothing.
    const kestrel::Status b = kestrel::api::check_buffer("kestrel_detokenizer_push", buf, cap);
    if (!b.ok()) return fail(b);
    const kestrel::Status t = token == -1 ? kestrel::Status::Ok() : d->detok->tokenizer().check_ids({&token, 1});
    if (!t.ok()) return fail(t.code(), "kestrel_detokenizer_push: " + t.message());
    if (token != -1) d->pending += d->detok->push(token);  // -1: only what is pending
    const kestrel_status st = kestrel::api::copy_out("kestrel_detokenizer_push", d->pending, buf, cap, len);
    if (st == KESTREL_OK && buf) d->pending.clear();  // a sizing call (NULL, 0) keeps it
    return st;
  });
}

kestrel_status kestrel_detokenizer_flush(kestrel_detokenizer* d, char* buf, size_t cap, size_t* len) {
  return guard("kestrel_detokenizer_flush", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(d && len, "kestrel_detokenizer_flush", "detokenizer and len must not be NULL");
    const kestrel::Status st0 = kestrel::api::check_buffer("kestrel_detokenizer_flush", buf, cap);
    if (!st0.ok()) return fail(st0);
    d->pending += d->detok->flush();
    const kestrel_status st = kestrel::api::copy_out("kestrel_detokenizer_flush", d->pending, buf, cap, len);
    if (st == KESTREL_OK && buf) d->pending.clear();  // a sizing call (NULL, 0) keeps it
    return st;
  });
}

}  // extern "C"
