// Embeddings through the C API: kestrel_embed pools each input's final states (engine/embed.h).
#include <string>

#include "api/guard.h"
#include "api/handles.h"
#include "engine/embed.h"

using kestrel::api::fail;
using kestrel::api::guard;

extern "C" {

kestrel_status kestrel_embed(kestrel_context* ctx, const kestrel_token* tokens, const int32_t* lengths, int32_t n_inputs,
                             int32_t pooling, bool normalize, float* out, size_t cap, size_t* n_out) {
  return guard("kestrel_embed", [&]() -> kestrel_status {
    const char* fn = "kestrel_embed";
    KS_API_CHECK_ARG(ctx && tokens && lengths && n_out, fn, "ctx, tokens, lengths and n_out must not be NULL");
    KS_API_CHECK_ARG(n_inputs > 0, fn, "n_inputs must be positive");
    KS_API_CHECK_ARG(pooling >= KESTREL_POOLING_MODEL && pooling <= KESTREL_POOLING_LAST, fn,
                     "pooling " + std::to_string(pooling) + " is not a kestrel_pooling");
    const kestrel::Status b = kestrel::api::check_buffer(fn, out, cap);
    if (!b.ok()) return fail(b);
    std::vector<std::span<const int32_t>> inputs;
    size_t at = 0;
    for (int32_t i = 0; i < n_inputs; ++i) {
      KS_API_CHECK_ARG(lengths[i] > 0 && lengths[i] <= (1 << 24), fn,
                       "lengths[" + std::to_string(i) + "] is " + std::to_string(lengths[i]) + " (1 .. 2^24)");
      inputs.emplace_back(tokens + at, static_cast<size_t>(lengths[i]));
      at += static_cast<size_t>(lengths[i]);
    }
    const size_t E = static_cast<size_t>(ctx->ctx->model().hparams().n_embd);
    *n_out = static_cast<size_t>(n_inputs) * E;
    if (cap < *n_out)
      return fail(KESTREL_ERR_BUFFER_TOO_SMALL, std::string(fn) + ": " + std::to_string(*n_out) +
                                                    " floats do not fit in a buffer of " + std::to_string(cap));
    kestrel::Pooling p = static_cast<kestrel::Pooling>(pooling);
    if (pooling == KESTREL_POOLING_MODEL) {
      auto m = kestrel::model_pooling(ctx->ctx->model());
      if (!m.ok()) return fail(m.status());
      p = m.value();
    }
    std::vector<float> v;
    const kestrel::Status st = kestrel::embed(*ctx->ctx, inputs, p, normalize, &v);
    if (!st.ok()) return fail(st);
    std::copy(v.begin(), v.end(), out);
    return KESTREL_OK;
  });
}

}  // extern "C"
