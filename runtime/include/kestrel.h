/*
 * kestrel.h — the C API of Kestrel, an embeddable LLM inference runtime. Usage: docs/API.md.
 *
 * Contract:
 * - Every function that can fail returns a kestrel_status; on failure a message naming the
 *   offending thing is available from kestrel_last_error() on the same thread.
 * - Nothing aborts or throws across this boundary. Options structs begin with struct_size; fill
 *   them with the matching *_init() first and pass them by pointer (NULL means "defaults").
 * - Caller buffers are (buf, cap, *len): *len receives the full size needed; if cap is too small
 *   the call returns KESTREL_ERR_BUFFER_TOO_SMALL and writes nothing past cap. Text is written
 *   NUL-terminated and *len counts its bytes without the NUL (as snprintf): cap must be > *len.
 *   (NULL, 0) asks for the size; NULL with cap > 0 is KESTREL_ERR_INVALID_ARGUMENT.
 * - Text the library returns is valid UTF-8 (invalid bytes become U+FFFD, one per maximal invalid
 *   subpart), except the raw bytes of kestrel_token_to_piece.
 * - Limits, refused with KESTREL_ERR_INVALID_ARGUMENT naming the field: n_threads in [0, 1024],
 *   n_ctx <= 2^24, n_batch <= 2^20, n_seq_max and n_parallel in [1, 64], the same for every call.
 * - Ownership: objects returned through an out-pointer belong to the caller and are released with
 *   the matching *_free(). Pointers returned by accessors are owned by the object they came from.
 * - Threads: a kestrel_model is immutable after load and may be shared by any number of threads
 *   and contexts. A kestrel_context or kestrel_sampler must be used by one thread at a time.
 */
#ifndef KESTREL_H
#define KESTREL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KESTREL_API __declspec(dllexport)
#else
#define KESTREL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* 2: speculative decoding; 3: stop strings; 4: chat_tokenize; 5: kv_type; 6: grammar, json_schema;
 * 7: reply parser (tool calls, reasoning); 8: queue_s; 9: Q8_0/Q4_0 KV caches, kv_type_v */
#define KESTREL_API_VERSION 9

/* ---- status codes ------------------------------------------------------------------------ */
typedef enum kestrel_status {
  KESTREL_OK = 0,
  KESTREL_ERR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad option value, a malformed batch */
  KESTREL_ERR_IO = 2,               /* a file could not be opened, read or mapped */
  KESTREL_ERR_FORMAT = 3,           /* a file is malformed (names the key, tensor or offset) */
  KESTREL_ERR_UNSUPPORTED = 4,      /* an architecture, tensor type or feature we do not have */
  KESTREL_ERR_OUT_OF_MEMORY = 5,
  KESTREL_ERR_OUT_OF_RANGE = 6,     /* a token id, position or index outside its range */
  KESTREL_ERR_CONTEXT_FULL = 7,     /* the KV cache has no room for the batch */
  KESTREL_ERR_BUFFER_TOO_SMALL = 8, /* the caller's buffer is too small; *len says how big */
  KESTREL_ERR_CANCELLED = 9,        /* a callback asked to stop */
  KESTREL_ERR_BACKEND = 10,         /* a device or backend failure */
  KESTREL_ERR_INTERNAL = 11         /* a bug in Kestrel: please report it */
} kestrel_status;

/* The enumerator's name without prefix, e.g. "ERR_FORMAT"; never NULL. */
KESTREL_API const char *kestrel_status_name(kestrel_status status);
/* The message of the last failed call on this thread ("" if none). Valid until the next call. */
KESTREL_API const char *kestrel_last_error(void);
KESTREL_API uint32_t kestrel_api_version(void); /* KESTREL_API_VERSION of the library linked */

/* ---- logging ----------------------------------------------------------------------------- */
typedef enum kestrel_log_level {
  KESTREL_LOG_DEBUG, KESTREL_LOG_INFO, KESTREL_LOG_WARN, KESTREL_LOG_ERROR, KESTREL_LOG_NONE } kestrel_log_level;
typedef void (*kestrel_log_fn)(kestrel_log_level level, const char *message, void *user);
/* Route log lines at or above min_level to fn (NULL: stderr, the default). Process-wide. */
KESTREL_API void kestrel_log_set(kestrel_log_fn fn, void *user, kestrel_log_level min_level);

/* ---- handles ----------------------------------------------------------------------------- */
typedef struct kestrel_model kestrel_model;     /* weights + vocabulary; immutable, shareable */
typedef struct kestrel_context kestrel_context; /* KV cache + scratch for one session */
typedef struct kestrel_sampler kestrel_sampler; /* a sampler chain with its own RNG state */
typedef struct kestrel_detokenizer kestrel_detokenizer; /* streaming token -> UTF-8 text */
typedef int32_t kestrel_token;

/* ---- model ------------------------------------------------------------------------------- */
/* Called during load with progress in [0, 1]; return false to cancel (KESTREL_ERR_CANCELLED). */
typedef bool (*kestrel_progress_fn)(float progress, void *user);

typedef struct kestrel_model_options {
  uint32_t struct_size;
  const char *backend;          /* "auto" (default), "cpu" or "cuda" */
  int32_t n_threads;            /* CPU threads; 0 = all physical cores */
  bool use_mmap;                /* map the file (default true); false reads it into memory */
  bool vocab_only;              /* load only the vocabulary (tokenize/detokenize; no decode) */
  kestrel_progress_fn progress; /* optional */
  void *progress_user;
} kestrel_model_options;
KESTREL_API void kestrel_model_options_init(kestrel_model_options *opts);
KESTREL_API kestrel_status kestrel_model_load(const char *path, const kestrel_model_options *opts,
                                              kestrel_model **out_model);
KESTREL_API void kestrel_model_free(kestrel_model *model);
/* JSON: architecture, hyper-parameters, vocabulary, tensor types and sizes, memory needed. */
KESTREL_API kestrel_status kestrel_model_describe(const kestrel_model *model, char *buf, size_t cap, size_t *len);
KESTREL_API int32_t kestrel_model_n_vocab(const kestrel_model *model);
KESTREL_API int32_t kestrel_model_n_ctx_train(const kestrel_model *model);
KESTREL_API kestrel_token kestrel_model_token_bos(const kestrel_model *model); /* -1 if none */
KESTREL_API kestrel_token kestrel_model_token_eos(const kestrel_model *model); /* -1 if none */
KESTREL_API bool kestrel_model_token_is_eog(const kestrel_model *model, kestrel_token token); /* EOS, EOT, ... */

/* ---- tokenizer --------------------------------------------------------------------------- */
/* add_special: add BOS/EOS as the vocabulary asks. parse_special: match control-token text. */
KESTREL_API kestrel_status kestrel_tokenize(const kestrel_model *model, const char *text, size_t text_len,
                                            bool add_special, bool parse_special, kestrel_token *tokens, size_t cap,
                                            size_t *n_tokens);
/* Whole-sequence detokenization (special tokens rendered if render_special). */
KESTREL_API kestrel_status kestrel_detokenize(const kestrel_model *model, const kestrel_token *tokens, size_t n_tokens,
                                              bool render_special, char *buf, size_t cap, size_t *len);
/* A token's raw bytes (byte tokens: their byte, "▁": a space, control tokens: "" unless render_special). */
KESTREL_API kestrel_status kestrel_token_to_piece(const kestrel_model *model, kestrel_token token,
                                                  bool render_special, char *buf, size_t cap, size_t *len);
/* Streaming: push tokens one at a time, receive only complete UTF-8 sequences. */
KESTREL_API kestrel_status kestrel_detokenizer_new(const kestrel_model *model, bool render_special,
                                                   kestrel_detokenizer **out);
KESTREL_API void kestrel_detokenizer_free(kestrel_detokenizer *detok);
/* Writes the text that became complete; *len = bytes written (or needed). On KESTREL_ERR_BUFFER_TOO_SMALL the
 * text stays pending and comes first from the next push/flush; token -1 pushes nothing and returns only the
 * pending text; other ids outside the vocabulary: KESTREL_ERR_OUT_OF_RANGE. A refused call takes no token. */
KESTREL_API kestrel_status kestrel_detokenizer_push(kestrel_detokenizer *detok, kestrel_token token,
                                                    char *buf, size_t cap, size_t *len);
/* Emits what is left (invalid trailing bytes as U+FFFD) and resets. */
KESTREL_API kestrel_status kestrel_detokenizer_flush(kestrel_detokenizer *detok, char *buf, size_t cap, size_t *len);

/* ---- chat templates ---------------------------------------------------------------------- */
/* Renders messages (JSON [{"role", "content", ...}]) into a prompt as HF's apply_chat_template(tokenize=False). */
typedef struct kestrel_chat_options {
  uint32_t struct_size;
  const char *template_source;    /* NULL: the model's tokenizer.chat_template (or the fallback) */
  const char *tools_json;         /* NULL or a JSON array of tools */
  const char *extra_context_json; /* NULL or a JSON object of extra template variables */
  const char *bos_token, *eos_token; /* NULL: the model's BOS/EOS text (undefined without a model) */
  bool add_generation_prompt;
} kestrel_chat_options;
KESTREL_API void kestrel_chat_options_init(kestrel_chat_options *opts);
/* model may be NULL when template_source is set. Bad JSON: KESTREL_ERR_INVALID_ARGUMENT naming it; a template syntax
 * error: KESTREL_ERR_FORMAT; a render error: KESTREL_ERR_INVALID_ARGUMENT ("chat template: line L, column C: ..."). */
KESTREL_API kestrel_status kestrel_chat_format(const kestrel_model *model, const char *messages_json,
                                               const kestrel_chat_options *opts, char *buf, size_t cap, size_t *len);
/* The prompt tokens of a rendered chat: kestrel_tokenize with add_special and parse_special, one
 * BOS dropped when two lead (the template wrote BOS and the vocabulary added one too). */
KESTREL_API kestrel_status kestrel_chat_tokenize(const kestrel_model *model, const char *text, size_t text_len,
                                                 kestrel_token *tokens, size_t cap, size_t *n_tokens);

/* ---- chat replies (API 7): content, reasoning and tool calls, by the template's family ----- */
/* chat: the prompt's chat options (template, tools_json); prompt: the rendered prompt; tool_choice:
 * NULL/"auto", "none", "required" or a function's name. Tool schemas a grammar cannot enforce
 * (required, named): KESTREL_ERR_UNSUPPORTED naming tool and keyword. Families: docs/TOOLS.md. */
typedef struct kestrel_reply_parser kestrel_reply_parser;
#define KESTREL_REPLY_PARALLEL_TOOLS 1u   /* more than one call per reply */
#define KESTREL_REPLY_REASONING_INLINE 2u /* reasoning stays in content, tags included */
KESTREL_API kestrel_status kestrel_reply_parser_new(const kestrel_model *model, const kestrel_chat_options *chat,
                                                    const char *prompt, const char *tool_choice, uint32_t flags,
                                                    kestrel_reply_parser **out);
/* The GBNF the generation must follow ("" when unconstrained): required and named tool_choice. */
KESTREL_API kestrel_status kestrel_reply_parser_grammar(const kestrel_reply_parser *p, char *buf, size_t cap,
                                                        size_t *len);
/* Adds generated text (final: the reply is whole); writes the change as JSON {"content", "reasoning_content",
 * "tool_calls": [{"index", "id", "type", "function": {"name", "arguments"}}]} (non-empty members only).
 * Too small a buffer keeps the delta: call again with no text to take it. */
KESTREL_API kestrel_status kestrel_reply_parser_push(kestrel_reply_parser *p, const char *text, size_t text_len,
                                                     bool final, char *buf, size_t cap, size_t *len);
KESTREL_API void kestrel_reply_parser_free(kestrel_reply_parser *p);
/* A hand-written decode loop's detok shows p's family's marker tokens, as a request carrying p does. */
KESTREL_API kestrel_status kestrel_reply_parser_show_markers(const kestrel_reply_parser *p, kestrel_detokenizer *d);

/* ---- context ----------------------------------------------------------------------------- */
/* The KV cache's element type (API 5). F8_E4M3: one E4M3 byte, no scale, saturating at +-448. Q8_0, Q4_0 (API 9):
 * each token's row in blocks of 32 values and an F16 scale (34 and 18 bytes); the row must be whole blocks. */
typedef enum kestrel_kv_type {
  KESTREL_KV_F16 = 0, KESTREL_KV_F32 = 1, KESTREL_KV_F8_E4M3 = 2, KESTREL_KV_Q8_0 = 3, KESTREL_KV_Q4_0 = 4
} kestrel_kv_type;
typedef struct kestrel_context_options {
  uint32_t struct_size;
  uint32_t n_ctx;     /* KV cache size in tokens; 0 = the model's training context */
  uint32_t n_batch;   /* most tokens per decode call (default 512) */
  uint32_t n_seq_max; /* most distinct sequence ids (default 1) */
  int32_t n_threads;  /* 0 = the model's setting */
  int32_t kv_type;    /* K's kestrel_kv_type (API 5), V's too unless kv_type_v says; default KESTREL_KV_F16 */
  int32_t kv_type_v;  /* V's kestrel_kv_type (API 9); -1 (default): kv_type */
} kestrel_context_options;
KESTREL_API void kestrel_context_options_init(kestrel_context_options *opts);
KESTREL_API kestrel_status kestrel_context_new(const kestrel_model *model, const kestrel_context_options *opts,
                                               kestrel_context **out_ctx);
KESTREL_API void kestrel_context_free(kestrel_context *ctx);
KESTREL_API uint32_t kestrel_context_n_ctx(const kestrel_context *ctx);
/* The backend the context runs on ("cpu", "cuda", "ref"); valid while ctx lives. */
KESTREL_API const char *kestrel_context_backend(const kestrel_context *ctx);
/* Per-op profiling: while on, decode runs one op at a time and records, per op kind, calls, seconds, bytes read
 * (weights, KV cache) and FLOPs. kestrel_context_profile writes them as a JSON array, slowest first ({"op", "calls",
 * "seconds", "bytes", "flops"}); reset starts the totals over once written (not on BUFFER_TOO_SMALL or sizing). */
KESTREL_API kestrel_status kestrel_context_set_profiling(kestrel_context *ctx, bool on);
KESTREL_API kestrel_status kestrel_context_profile(kestrel_context *ctx, bool reset, char *buf, size_t cap, size_t *n);

/* A batch of tokens, possibly of several sequences. Arrays are owned by the caller. */
typedef struct kestrel_batch {
  int32_t n_tokens;
  const kestrel_token *tokens; /* [n_tokens] */
  const int32_t *positions;    /* [n_tokens]; NULL = continue each sequence from its last pos */
  const int32_t *seq_ids;      /* [n_tokens]; NULL = all sequence 0 */
  const bool *logits;          /* [n_tokens]; NULL = logits for the last token only */
} kestrel_batch;

/* Runs the model over the batch, appending to the KV cache. */
KESTREL_API kestrel_status kestrel_decode(kestrel_context *ctx, const kestrel_batch *batch);
/* Logits of batch row i of the last decode (i < 0 counts from the end); valid until the next decode on ctx. */
KESTREL_API kestrel_status kestrel_get_logits(kestrel_context *ctx, int32_t i, const float **logits, int32_t *n_vocab);

/* KV cache sequence operations; p1 < 0: to the end. Recurrent (SSM) layers: whole sequences only, else UNSUPPORTED. */
KESTREL_API kestrel_status kestrel_kv_seq_remove(kestrel_context *ctx, int32_t seq, int32_t p0, int32_t p1);
KESTREL_API kestrel_status kestrel_kv_seq_copy(kestrel_context *ctx, int32_t src, int32_t dst, int32_t p0, int32_t p1);
KESTREL_API kestrel_status kestrel_kv_seq_keep(kestrel_context *ctx, int32_t seq);
KESTREL_API int32_t kestrel_kv_seq_pos_max(const kestrel_context *ctx, int32_t seq); /* largest position; -1: none */
KESTREL_API void kestrel_kv_clear(kestrel_context *ctx);

/* ---- sampling ---------------------------------------------------------------------------- */
typedef struct kestrel_sampler_options {
  uint32_t struct_size;
  float temperature;       /* <= 0: greedy (default 0.8) */
  int32_t top_k;           /* <= 0: off (default 40) */
  float top_p;             /* >= 1: off (default 0.95) */
  float min_p;             /* <= 0: off (default 0.05) */
  float repeat_penalty;    /* 1: off (default) */
  float presence_penalty;  /* 0: off (default) */
  float frequency_penalty; /* 0: off (default) */
  int32_t penalty_last_n;  /* tokens the penalties look back over (default 64) */
  uint64_t seed;           /* the same seed reproduces the same draws */
  /* Added to the logits of these tokens before sampling (-INFINITY bans one); copied. */
  const kestrel_token *logit_bias_tokens;
  const float *logit_bias_values;
  int32_t n_logit_bias;
} kestrel_sampler_options;
KESTREL_API void kestrel_sampler_options_init(kestrel_sampler_options *opts);
KESTREL_API kestrel_status kestrel_sampler_new(const kestrel_sampler_options *opts, kestrel_sampler **out);
KESTREL_API void kestrel_sampler_free(kestrel_sampler *sampler);
/* Picks a token from logits (not modified) and records it for the penalties. */
KESTREL_API kestrel_status kestrel_sampler_sample(kestrel_sampler *sampler, const float *logits,
                                                  int32_t n_vocab, kestrel_token *out);
/* Records a token (e.g. of the prompt) for the penalties without sampling. */
KESTREL_API void kestrel_sampler_accept(kestrel_sampler *sampler, kestrel_token token);
KESTREL_API void kestrel_sampler_reset(kestrel_sampler *sampler);
/* API 7, a hand-written loop's constrained decoding: from the next sample on, only text a GBNF grammar or JSON Schema
 * allows (as kestrel_generate_options'), or reply's grammar and markers; all NULL: none. reset keeps its state. */
KESTREL_API kestrel_status kestrel_sampler_set_grammar(kestrel_sampler *sampler, const kestrel_model *model,
                                                       const char *grammar, const char *json_schema,
                                                       const kestrel_reply_parser *reply);
/* API 7: log-probabilities (log-softmax) of a logits row, e.g. kestrel_request.on_logits': *token_logprob for
 * token (-1: none), the k most likely into top (k <= 0 or top NULL: none), most likely first, ties by id. */
typedef struct kestrel_token_logprob { kestrel_token token; float logprob; } kestrel_token_logprob;
KESTREL_API kestrel_status kestrel_logprobs(const float *logits, int32_t n_vocab, kestrel_token token,
                                            float *token_logprob, kestrel_token_logprob *top, int32_t k);

/* ---- speculative decoding ---------------------------------------------------------------- */
/* A drafter proposes tokens, the model scores them all in one pass and keeps what it would have sampled: the same
 * output as without under greedy sampling, the same distribution otherwise (rejection), often several per pass. */
typedef enum kestrel_spec_mode {
  KESTREL_SPEC_NONE = 0,  /* one token per pass (default) */
  KESTREL_SPEC_DRAFT = 1, /* a smaller model with the same vocabulary drafts */
  KESTREL_SPEC_NGRAM = 2  /* prompt lookup: what followed the last n tokens earlier in the text */
} kestrel_spec_mode;

typedef struct kestrel_spec_options {
  uint32_t struct_size;
  kestrel_spec_mode mode;
  int32_t k_max;     /* most tokens drafted per pass (default 8); the length adapts below it */
  int32_t ngram_min; /* NGRAM: shortest match tried (default 1) */
  int32_t ngram_max; /* NGRAM: longest match, tried first (default 3) */
} kestrel_spec_options;

typedef struct kestrel_spec_stats {
  uint32_t struct_size;
  int32_t n_steps;    /* model passes that verified a draft */
  int32_t n_drafted;  /* tokens proposed */
  int32_t n_accepted; /* of those, kept */
} kestrel_spec_stats;
KESTREL_API void kestrel_spec_options_init(kestrel_spec_options *opts);

/* ---- generate: tokenize, decode, sample, stream ------------------------------------------ */
/* Called per generated token with its newly completed UTF-8 text (may be empty); false stops generating. */
typedef bool (*kestrel_token_fn)(kestrel_token token, const char *piece, size_t piece_len, void *user);

typedef struct kestrel_generate_options {
  uint32_t struct_size;
  int32_t max_tokens;                     /* default 128 */
  bool add_special;                       /* add BOS etc. to the prompt (default true) */
  bool parse_special;                     /* match special-token text in the prompt (false) */
  bool stop_at_eog;                       /* stop at end-of-generation tokens (default true) */
  const kestrel_sampler_options *sampling; /* NULL: defaults */
  kestrel_token_fn on_token;              /* optional */
  void *user;
  const kestrel_spec_options *speculative; /* NULL: none */
  kestrel_context *draft;                  /* SPEC_DRAFT: a context of the draft model (cleared) */
  kestrel_spec_stats *spec_stats;          /* optional: what speculation did */
  const char *const *stop_strings; /* text ends before the first match (held back until sure) */
  int32_t n_stop_strings;
  /* API 6, docs/GRAMMAR.md: only text a GBNF grammar (rule "root") or a JSON Schema allows; at most one
   * (NULL: none). What cannot compile or be enforced fails the call, naming it. */
  const char *grammar, *json_schema;
} kestrel_generate_options;

KESTREL_API void kestrel_generate_options_init(kestrel_generate_options *opts);
/* Clears ctx's cache, runs the prompt and generates; *n_generated (optional) gets the count. After the last
 * token, on_token may be called once more with token -1 and the text the detokenizer held back (U+FFFD). */
KESTREL_API kestrel_status kestrel_generate(kestrel_context *ctx, const char *prompt,
                                            const kestrel_generate_options *opts, int32_t *n_generated);

/* ---- embeddings (API 7) ------------------------------------------------------------------ */
/* n_inputs token lists (concatenated in tokens, lengths[i] each) -> out: n_inputs rows of n_embd floats (*n_out
 * floats, written or needed): the states after the output norm, pooled (MODEL: the GGUF's {arch}.pooling_type,
 * else LAST; an int32_t) and with normalize of unit length. Uses ctx's KV cache (cleared), inputs in its sequences. */
typedef enum kestrel_pooling {
  KESTREL_POOLING_MODEL, KESTREL_POOLING_MEAN, KESTREL_POOLING_CLS, KESTREL_POOLING_LAST } kestrel_pooling;
KESTREL_API kestrel_status kestrel_embed(kestrel_context *ctx, const kestrel_token *tokens, const int32_t *lengths,
                                         int32_t n_inputs, int32_t pooling, bool normalize, float *out,
                                         size_t cap, size_t *n_out);

/* ---- engine: many requests, continuous batching ------------------------------------------ */
/* An engine owns a context whose KV cache (paged, with a prefix cache) is shared by up to n_parallel running
 * requests; a worker thread decodes them together, one batch per step (the next token of each running request plus
 * prompt chunks, at most n_batch tokens). Every engine function may be called from any thread. Callbacks run on the
 * worker thread, one at a time; they may call kestrel_cancel, never kestrel_engine_free. */
typedef struct kestrel_engine kestrel_engine;

typedef struct kestrel_engine_options {
  uint32_t struct_size;
  uint32_t n_ctx;      /* KV cells shared by all requests; 0: min(model's context, 4096) */
  uint32_t n_parallel; /* requests decoding at once (default 4, at most 64) */
  uint32_t n_batch;    /* tokens per step (default 256) */
  int32_t n_threads;   /* 0: the model's setting */
  const kestrel_model *draft_model;        /* drafts for SPEC_DRAFT requests; outlives the engine */
  const kestrel_spec_options *speculative; /* the requests' default (NULL: none); copied */
  int32_t kv_type;                         /* K's kestrel_kv_type (API 5); default F16, the draft's too */
  int32_t kv_type_v;                       /* V's (API 9); -1 (default): kv_type */
} kestrel_engine_options;

typedef enum kestrel_finish_reason {
  KESTREL_FINISH_NONE = 0,
  KESTREL_FINISH_STOP = 1,      /* end-of-generation token, a stop token or a stop string */
  KESTREL_FINISH_LENGTH = 2,    /* max_tokens, or the context is full */
  KESTREL_FINISH_CANCELLED = 3, /* kestrel_cancel, a callback returned false, or engine freed */
  KESTREL_FINISH_ERROR = 4      /* see status and kestrel_last_error() of kestrel_wait */
} kestrel_finish_reason;

typedef struct kestrel_request_result {
  uint32_t struct_size;
  kestrel_finish_reason finish;
  kestrel_status status; /* for KESTREL_FINISH_ERROR */
  int32_t n_prompt;      /* prompt tokens */
  int32_t n_cached;      /* of those, found in the prefix cache (not recomputed) */
  int32_t n_generated;
  int32_t n_drafted, n_accepted; /* speculative decoding: tokens drafted for it; of those, kept */
  int32_t stop_string; /* API 7: the index of the stop string that ended it; -1: none */
  float queue_s;       /* API 8: seconds from kestrel_submit to its first place in a batch */
} kestrel_request_result;

typedef void (*kestrel_logits_fn)(const float *logits, int32_t n_vocab, void *user);
typedef void (*kestrel_done_fn)(const kestrel_request_result *result, void *user);

typedef struct kestrel_request {
  uint32_t struct_size;
  const kestrel_token *prompt; /* copied by kestrel_submit */
  int32_t n_prompt;
  int32_t max_tokens;                      /* default 128 */
  const kestrel_sampler_options *sampling; /* NULL: defaults */
  bool stop_at_eog;                        /* default true */
  const kestrel_token *stop_tokens;
  int32_t n_stop_tokens;
  const char *const *stop_strings; /* text ends before the first match; copied */
  int32_t n_stop_strings;
  kestrel_token_fn on_token;   /* text per token (stop strings held back; -1: the rest, at the end); false cancels */
  kestrel_logits_fn on_logits; /* the logits each token is sampled from */
  kestrel_done_fn on_done;     /* once, at the end; then the request is forgotten (no wait) */
  void *user;
  const kestrel_spec_options *speculative; /* NULL: the engine's default */
  const char *grammar, *json_schema; /* API 6: as kestrel_generate_options' (compiled here) */
  const kestrel_reply_parser *reply; /* API 7: its family's marker tokens shown, its grammar enforced */
} kestrel_request;

KESTREL_API void kestrel_engine_options_init(kestrel_engine_options *opts);
KESTREL_API kestrel_status kestrel_engine_new(const kestrel_model *model, const kestrel_engine_options *opts,
                                              kestrel_engine **out);
KESTREL_API void kestrel_engine_free(kestrel_engine *engine); /* cancels all, joins; the model must outlive it */
KESTREL_API void kestrel_request_init(kestrel_request *req);
/* Queues a request; *id names it. Bad input (empty prompt, ids out of range, too long, bad options) fails here. */
KESTREL_API kestrel_status kestrel_submit(kestrel_engine *engine, const kestrel_request *req, uint64_t *id);
/* KESTREL_ERR_OUT_OF_RANGE when the request is unknown or already finished. */
KESTREL_API kestrel_status kestrel_cancel(kestrel_engine *engine, uint64_t id);
/* Blocks until the request finishes, fills *result (optional) and forgets the request. */
KESTREL_API kestrel_status kestrel_wait(kestrel_engine *engine, uint64_t id, kestrel_request_result *result);
KESTREL_API kestrel_status kestrel_engine_generate(kestrel_engine *engine, const kestrel_request *req,
                                                   kestrel_request_result *result); /* submit + wait */
/* JSON: requests (total, waiting, running, finished, preempted), tokens, KV blocks, the prefix-cache hit rate. */
KESTREL_API kestrel_status kestrel_engine_stats(const kestrel_engine *engine, char *buf, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* KESTREL_H */
