// Contexts, decode, logits and KV sequence operations through the C API.
#include "api/guard.h"
#include "api/handles.h"
#include "core/limits.h"

using kestrel::api::fail;
using kestrel::api::guard;

namespace kestrel::api {

// The field is an int32_t, not the enum: a caller's out-of-range value must be readable.
Status to_kv_type(int32_t in, const char* where, DType* out, const char* field) {
  switch (in) {
    case KESTREL_KV_F16: *out = DType::F16; return Status::Ok();
    case KESTREL_KV_F32: *out = DType::F32; return Status::Ok();
    case KESTREL_KV_F8_E4M3: *out = DType::F8_E4M3; return Status::Ok();
    case KESTREL_KV_Q8_0: *out = DType::Q8_0; return Status::Ok();
    case KESTREL_KV_Q4_0: *out = DType::Q4_0; return Status::Ok();
  }
  return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(where) + ": " + field + " " + std::to_string(in) +
                                                 " is not a kestrel_kv_type (F16 0, F32 1, F8_E4M3 2, Q8_0 3, Q4_0 4)");
}

Status to_kv_types(int32_t k, int32_t v, const char* where, DType* k_out, std::optional<DType>* v_out) {
  KS_RETURN_IF_ERROR(to_kv_type(k, where, k_out, "kv_type"));
  v_out->reset();
  if (v == -1) return Status::Ok();  // V as K
  DType t;
  KS_RETURN_IF_ERROR(to_kv_type(v, where, &t, "kv_type_v"));
  *v_out = t;
  return Status::Ok();
}

}  // namespace kestrel::api

extern "C" {

void kestrel_context_options_init(kestrel_context_options* o) {
  if (!o) return;
  *o = kestrel_context_options{};
  o->struct_size = sizeof *o;
  o->n_ctx = 0;
  o->n_batch = 512;
  o->n_seq_max = 1;
  o->n_threads = 0;
  o->kv_type = KESTREL_KV_F16;
  o->kv_type_v = -1;
}

kestrel_status kestrel_context_new(const kestrel_model* model, const kestrel_context_options* opts,
                                   kestrel_context** out) {
  return guard("kestrel_context_new", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model && out, "kestrel_context_new", "model and out_ctx must not be NULL");
    *out = nullptr;
    kestrel_context_options o;
    kestrel_context_options_init(&o);
    const char* err = nullptr;
    if (!kestrel::api::read_options(opts, &o, &err))
      return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_context_new: ") + err);
    // The caps of every entry point (core/limits.h), on the caller's values before any narrowing.
    kestrel::Status st = kestrel::limits::check_context("kestrel_context_new", {o.n_ctx, o.n_batch, o.n_seq_max});
    if (st.ok()) st = kestrel::limits::check_threads("kestrel_context_new: n_threads", o.n_threads);
    if (!st.ok()) return fail(st);
    kestrel::ContextOptions co;
    co.n_ctx = static_cast<int32_t>(o.n_ctx);
    co.n_batch = static_cast<int32_t>(o.n_batch);
    co.n_seq_max = static_cast<int32_t>(o.n_seq_max);
    co.n_threads = o.n_threads;
    const kestrel::Status kv =
        kestrel::api::to_kv_types(o.kv_type, o.kv_type_v, "kestrel_context_new", &co.kv_type, &co.kv_type_v);
    if (!kv.ok()) return fail(kv);
    auto c = kestrel::Context::create(*model->model, co);
    if (!c.ok()) return fail(c.status());
    *out = new kestrel_context{model, std::move(c.value())};
    return KESTREL_OK;
  });
}

void kestrel_context_free(kestrel_context* ctx) { delete ctx; }

uint32_t kestrel_context_n_ctx(const kestrel_context* ctx) { return ctx ? static_cast<uint32_t>(ctx->ctx->n_ctx()) : 0; }

const char* kestrel_context_backend(const kestrel_context* ctx) {
  return ctx ? ctx->ctx->device().info().name.c_str() : "";
}

kestrel_status kestrel_context_set_profiling(kestrel_context* ctx, bool on) {
  return guard("kestrel_context_set_profiling", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx, "kestrel_context_set_profiling", "ctx must not be NULL");
    ctx->ctx->set_profiling(on);
    return KESTREL_OK;
  });
}

kestrel_status kestrel_context_profile(kestrel_context* ctx, bool reset, char* buf, size_t cap, size_t* len) {
  return guard("kestrel_context_profile", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx && len, "kestrel_context_profile", "ctx and len must not be NULL");
    kestrel::Profiler* p = ctx->ctx->profiler();
    const kestrel_status st = kestrel::api::copy_out("kestrel_context_profile", p ? p->json() : "[]", buf, cap, len);
    if (st == KESTREL_OK && reset && p && buf) p->reset();
    return st;
  });
}

kestrel_status kestrel_decode(kestrel_context* ctx, const kestrel_batch* b) {
  return guard("kestrel_decode", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx && b, "kestrel_decode", "ctx and batch must not be NULL");
    KS_API_CHECK_ARG(b->n_tokens > 0 && b->tokens, "kestrel_decode", "batch has no tokens");
    const size_t n = static_cast<size_t>(b->n_tokens);
    kestrel::DecodeBatch db;
    db.tokens = {b->tokens, n};
    if (b->positions) db.positions = {b->positions, n};
    if (b->seq_ids) db.seq_ids = {b->seq_ids, n};
    if (b->logits) db.want_logits = {b->logits, n};
    kestrel::Status st = ctx->ctx->decode(db);
    return st.ok() ? KESTREL_OK : fail(st);
  });
}

kestrel_status kestrel_get_logits(kestrel_context* ctx, int32_t i, const float** logits, int32_t* n_vocab) {
  return guard("kestrel_get_logits", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx && logits, "kestrel_get_logits", "ctx and logits must not be NULL");
    auto l = ctx->ctx->logits(i);
    if (!l.ok()) return fail(l.status());
    *logits = l->data();
    if (n_vocab) *n_vocab = static_cast<int32_t>(l->size());
    return KESTREL_OK;
  });
}

kestrel_status kestrel_kv_seq_remove(kestrel_context* ctx, int32_t seq, int32_t p0, int32_t p1) {
  return guard("kestrel_kv_seq_remove", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx, "kestrel_kv_seq_remove", "ctx must not be NULL");
    const kestrel::Status st = ctx->ctx->kv().seq_remove(seq, p0, p1);
    return st.ok() ? KESTREL_OK : fail(st);
  });
}

kestrel_status kestrel_kv_seq_copy(kestrel_context* ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
  return guard("kestrel_kv_seq_copy", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx, "kestrel_kv_seq_copy", "ctx must not be NULL");
    const int32_t n = ctx->ctx->kv().n_seq_max();
    KS_API_CHECK_ARG(src >= 0 && src < n && dst >= 0 && dst < n, "kestrel_kv_seq_copy", "sequence id out of range");
    const kestrel::Status st = ctx->ctx->kv().seq_copy(src, dst, p0, p1);
    return st.ok() ? KESTREL_OK : fail(st);
  });
}

kestrel_status kestrel_kv_seq_keep(kestrel_context* ctx, int32_t seq) {
  return guard("kestrel_kv_seq_keep", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(ctx, "kestrel_kv_seq_keep", "ctx must not be NULL");
    const int32_t n = ctx->ctx->kv().n_seq_max();
    if (seq < 0 || seq >= n)
      return fail(KESTREL_ERR_OUT_OF_RANGE, "kestrel_kv_seq_keep: sequence id " + std::to_string(seq) + " is outside [0, " +
                                                std::to_string(n) + ")");
    ctx->ctx->kv().seq_keep(seq);
    return KESTREL_OK;
  });
}

int32_t kestrel_kv_seq_pos_max(const kestrel_context* ctx, int32_t seq) {
  return ctx ? ctx->ctx->kv().seq_pos_max(seq) : -1;
}

void kestrel_kv_clear(kestrel_context* ctx) {
  if (ctx) ctx->ctx->kv().clear();
}

}  // extern "C"
