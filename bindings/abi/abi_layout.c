/* The ABI guard: prints the layout of every public struct and the value of every enumerator of
 * kestrel.h, one line each:
 *   struct NAME size=N align=A FIELD=OFFSET ...
 *   enum NAME size=N ENUMERATOR=VALUE ...
 *   const NAME=VALUE
 * The Python and Rust bindings compare their mirrors against this output, so a header change
 * that forgets a binding fails their tests. A field appended to a struct here but not listed
 * below fails to compile (the last listed field must end the struct). */
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>

#include "kestrel.h"

#define ROUND_UP(n, a) (((n) + (a)-1) / (a) * (a))
#define FIELD(S, f) printf(" %s=%zu", #f, offsetof(S, f));
#define STRUCT(S, LAST, FIELDS)                                                                  \
  _Static_assert(sizeof(S) == ROUND_UP(offsetof(S, LAST) + sizeof(((S *)0)->LAST), alignof(S)), \
                 #S ": a field after " #LAST " is missing from abi_layout.c");                \
  printf("struct %s size=%zu align=%zu", #S, sizeof(S), alignof(S));                           \
  FIELDS puts("");
#define ENUM_BEGIN(E) printf("enum %s size=%zu", #E, sizeof(enum E));
#define VALUE(v) printf(" %s=%d", #v, (int)(v));
#define ENUM_END puts("");

int main(void) {
  printf("const KESTREL_API_VERSION=%d\n", KESTREL_API_VERSION);

  ENUM_BEGIN(kestrel_status)
  VALUE(KESTREL_OK) VALUE(KESTREL_ERR_INVALID_ARGUMENT) VALUE(KESTREL_ERR_IO) VALUE(KESTREL_ERR_FORMAT)
  VALUE(KESTREL_ERR_UNSUPPORTED) VALUE(KESTREL_ERR_OUT_OF_MEMORY) VALUE(KESTREL_ERR_OUT_OF_RANGE)
  VALUE(KESTREL_ERR_CONTEXT_FULL) VALUE(KESTREL_ERR_BUFFER_TOO_SMALL) VALUE(KESTREL_ERR_CANCELLED)
  VALUE(KESTREL_ERR_BACKEND) VALUE(KESTREL_ERR_INTERNAL) ENUM_END
  ENUM_BEGIN(kestrel_log_level)
  VALUE(KESTREL_LOG_DEBUG) VALUE(KESTREL_LOG_INFO) VALUE(KESTREL_LOG_WARN) VALUE(KESTREL_LOG_ERROR)
  VALUE(KESTREL_LOG_NONE) ENUM_END
  ENUM_BEGIN(kestrel_kv_type)
  VALUE(KESTREL_KV_F16) VALUE(KESTREL_KV_F32) VALUE(KESTREL_KV_F8_E4M3) VALUE(KESTREL_KV_Q8_0)
  VALUE(KESTREL_KV_Q4_0) ENUM_END
  ENUM_BEGIN(kestrel_pooling)
  VALUE(KESTREL_POOLING_MODEL) VALUE(KESTREL_POOLING_MEAN) VALUE(KESTREL_POOLING_CLS) VALUE(KESTREL_POOLING_LAST) ENUM_END
  ENUM_BEGIN(kestrel_spec_mode)
  VALUE(KESTREL_SPEC_NONE) VALUE(KESTREL_SPEC_DRAFT) VALUE(KESTREL_SPEC_NGRAM) ENUM_END
  ENUM_BEGIN(kestrel_finish_reason)
  VALUE(KESTREL_FINISH_NONE) VALUE(KESTREL_FINISH_STOP) VALUE(KESTREL_FINISH_LENGTH)
  VALUE(KESTREL_FINISH_CANCELLED) VALUE(KESTREL_FINISH_ERROR) ENUM_END

  STRUCT(kestrel_model_options, progress_user,
         FIELD(kestrel_model_options, struct_size) FIELD(kestrel_model_options, backend)
         FIELD(kestrel_model_options, n_threads) FIELD(kestrel_model_options, use_mmap)
         FIELD(kestrel_model_options, vocab_only) FIELD(kestrel_model_options, progress)
         FIELD(kestrel_model_options, progress_user))
  STRUCT(kestrel_chat_options, add_generation_prompt,
         FIELD(kestrel_chat_options, struct_size) FIELD(kestrel_chat_options, template_source)
         FIELD(kestrel_chat_options, tools_json) FIELD(kestrel_chat_options, extra_context_json)
         FIELD(kestrel_chat_options, bos_token) FIELD(kestrel_chat_options, eos_token)
         FIELD(kestrel_chat_options, add_generation_prompt))
  STRUCT(kestrel_context_options, kv_type_v,
         FIELD(kestrel_context_options, struct_size) FIELD(kestrel_context_options, n_ctx)
         FIELD(kestrel_context_options, n_batch) FIELD(kestrel_context_options, n_seq_max)
         FIELD(kestrel_context_options, n_threads) FIELD(kestrel_context_options, kv_type)
         FIELD(kestrel_context_options, kv_type_v))
  STRUCT(kestrel_batch, logits,
         FIELD(kestrel_batch, n_tokens) FIELD(kestrel_batch, tokens) FIELD(kestrel_batch, positions)
         FIELD(kestrel_batch, seq_ids) FIELD(kestrel_batch, logits))
  STRUCT(kestrel_sampler_options, n_logit_bias,
         FIELD(kestrel_sampler_options, struct_size) FIELD(kestrel_sampler_options, temperature)
         FIELD(kestrel_sampler_options, top_k) FIELD(kestrel_sampler_options, top_p)
         FIELD(kestrel_sampler_options, min_p) FIELD(kestrel_sampler_options, repeat_penalty)
         FIELD(kestrel_sampler_options, presence_penalty) FIELD(kestrel_sampler_options, frequency_penalty)
         FIELD(kestrel_sampler_options, penalty_last_n) FIELD(kestrel_sampler_options, seed)
         FIELD(kestrel_sampler_options, logit_bias_tokens) FIELD(kestrel_sampler_options, logit_bias_values)
         FIELD(kestrel_sampler_options, n_logit_bias))
  STRUCT(kestrel_spec_options, ngram_max,
         FIELD(kestrel_spec_options, struct_size) FIELD(kestrel_spec_options, mode)
         FIELD(kestrel_spec_options, k_max) FIELD(kestrel_spec_options, ngram_min)
         FIELD(kestrel_spec_options, ngram_max))
  STRUCT(kestrel_token_logprob, logprob, FIELD(kestrel_token_logprob, token) FIELD(kestrel_token_logprob, logprob))
  STRUCT(kestrel_spec_stats, n_accepted,
         FIELD(kestrel_spec_stats, struct_size) FIELD(kestrel_spec_stats, n_steps)
         FIELD(kestrel_spec_stats, n_drafted) FIELD(kestrel_spec_stats, n_accepted))
  STRUCT(kestrel_generate_options, json_schema,
         FIELD(kestrel_generate_options, struct_size) FIELD(kestrel_generate_options, max_tokens)
         FIELD(kestrel_generate_options, add_special) FIELD(kestrel_generate_options, parse_special)
         FIELD(kestrel_generate_options, stop_at_eog) FIELD(kestrel_generate_options, sampling)
         FIELD(kestrel_generate_options, on_token) FIELD(kestrel_generate_options, user)
         FIELD(kestrel_generate_options, speculative) FIELD(kestrel_generate_options, draft)
         FIELD(kestrel_generate_options, spec_stats) FIELD(kestrel_generate_options, stop_strings)
         FIELD(kestrel_generate_options, n_stop_strings) FIELD(kestrel_generate_options, grammar)
         FIELD(kestrel_generate_options, json_schema))
  STRUCT(kestrel_engine_options, kv_type_v,
         FIELD(kestrel_engine_options, struct_size) FIELD(kestrel_engine_options, n_ctx)
         FIELD(kestrel_engine_options, n_parallel) FIELD(kestrel_engine_options, n_batch)
         FIELD(kestrel_engine_options, n_threads) FIELD(kestrel_engine_options, draft_model)
         FIELD(kestrel_engine_options, speculative) FIELD(kestrel_engine_options, kv_type)
         FIELD(kestrel_engine_options, kv_type_v))
  STRUCT(kestrel_request_result, queue_s,
         FIELD(kestrel_request_result, struct_size) FIELD(kestrel_request_result, finish)
         FIELD(kestrel_request_result, status) FIELD(kestrel_request_result, n_prompt)
         FIELD(kestrel_request_result, n_cached) FIELD(kestrel_request_result, n_generated)
         FIELD(kestrel_request_result, n_drafted) FIELD(kestrel_request_result, n_accepted) FIELD(kestrel_request_result, stop_string)
         FIELD(kestrel_request_result, queue_s))
  STRUCT(kestrel_request, reply,
         FIELD(kestrel_request, struct_size) FIELD(kestrel_request, prompt) FIELD(kestrel_request, n_prompt)
         FIELD(kestrel_request, max_tokens) FIELD(kestrel_request, sampling) FIELD(kestrel_request, stop_at_eog)
         FIELD(kestrel_request, stop_tokens) FIELD(kestrel_request, n_stop_tokens)
         FIELD(kestrel_request, stop_strings) FIELD(kestrel_request, n_stop_strings)
         FIELD(kestrel_request, on_token) FIELD(kestrel_request, on_logits) FIELD(kestrel_request, on_done)
         FIELD(kestrel_request, user) FIELD(kestrel_request, speculative) FIELD(kestrel_request, grammar)
         FIELD(kestrel_request, json_schema) FIELD(kestrel_request, reply))
  return 0;
}
