//! Types of kestrel.h: enum types as `i32` plus constants (C enums here are 4 bytes; an
//! unknown value from a newer library stays a plain integer), `#[repr(C)]` structs, opaque
//! handles and callback pointers.

use std::os::raw::{c_char, c_void};

/// `KESTREL_API_VERSION` of the header these declarations mirror.
pub const KESTREL_API_VERSION: u32 = 9;

/// A token id.
pub type kestrel_token = i32;

/// `enum kestrel_status`.
pub type kestrel_status = i32;
pub const KESTREL_OK: kestrel_status = 0;
pub const KESTREL_ERR_INVALID_ARGUMENT: kestrel_status = 1;
pub const KESTREL_ERR_IO: kestrel_status = 2;
pub const KESTREL_ERR_FORMAT: kestrel_status = 3;
pub const KESTREL_ERR_UNSUPPORTED: kestrel_status = 4;
pub const KESTREL_ERR_OUT_OF_MEMORY: kestrel_status = 5;
pub const KESTREL_ERR_OUT_OF_RANGE: kestrel_status = 6;
pub const KESTREL_ERR_CONTEXT_FULL: kestrel_status = 7;
pub const KESTREL_ERR_BUFFER_TOO_SMALL: kestrel_status = 8;
pub const KESTREL_ERR_CANCELLED: kestrel_status = 9;
pub const KESTREL_ERR_BACKEND: kestrel_status = 10;
pub const KESTREL_ERR_INTERNAL: kestrel_status = 11;

/// `enum kestrel_log_level`.
pub type kestrel_log_level = i32;
pub const KESTREL_LOG_DEBUG: kestrel_log_level = 0;
pub const KESTREL_LOG_INFO: kestrel_log_level = 1;
pub const KESTREL_LOG_WARN: kestrel_log_level = 2;
pub const KESTREL_LOG_ERROR: kestrel_log_level = 3;
pub const KESTREL_LOG_NONE: kestrel_log_level = 4;

/// `kestrel_reply_parser_new` flags (API version 7).
pub const KESTREL_REPLY_PARALLEL_TOOLS: u32 = 1;
pub const KESTREL_REPLY_REASONING_INLINE: u32 = 2;

/// `enum kestrel_kv_type`: the KV cache's element type (API version 5; Q8_0, Q4_0: 9).
pub type kestrel_kv_type = i32;
pub const KESTREL_KV_F16: kestrel_kv_type = 0;
pub const KESTREL_KV_F32: kestrel_kv_type = 1;
pub const KESTREL_KV_F8_E4M3: kestrel_kv_type = 2;
pub const KESTREL_KV_Q8_0: kestrel_kv_type = 3;
pub const KESTREL_KV_Q4_0: kestrel_kv_type = 4;

/// `enum kestrel_pooling` (API version 7).
pub type kestrel_pooling = i32;
pub const KESTREL_POOLING_MODEL: kestrel_pooling = 0;
pub const KESTREL_POOLING_MEAN: kestrel_pooling = 1;
pub const KESTREL_POOLING_CLS: kestrel_pooling = 2;
pub const KESTREL_POOLING_LAST: kestrel_pooling = 3;

/// `enum kestrel_spec_mode`.
pub type kestrel_spec_mode = i32;
pub const KESTREL_SPEC_NONE: kestrel_spec_mode = 0;
pub const KESTREL_SPEC_DRAFT: kestrel_spec_mode = 1;
pub const KESTREL_SPEC_NGRAM: kestrel_spec_mode = 2;

/// `enum kestrel_finish_reason`.
pub type kestrel_finish_reason = i32;
pub const KESTREL_FINISH_NONE: kestrel_finish_reason = 0;
pub const KESTREL_FINISH_STOP: kestrel_finish_reason = 1;
pub const KESTREL_FINISH_LENGTH: kestrel_finish_reason = 2;
pub const KESTREL_FINISH_CANCELLED: kestrel_finish_reason = 3;
pub const KESTREL_FINISH_ERROR: kestrel_finish_reason = 4;

/// Declares an opaque handle type (only ever used behind a pointer).
macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            // Not Send, not Sync, not Unpin: the C side decides what is safe.
            _marker: std::marker::PhantomData<(*mut u8, std::marker::PhantomPinned)>,
        }
    )*};
}

opaque! {
    /// Weights + vocabulary; immutable after load, shareable between threads.
    kestrel_model;
    /// KV cache + scratch for one session; one thread at a time.
    kestrel_context;
    /// A sampler chain with its own RNG state; one thread at a time.
    kestrel_sampler;
    /// Streaming token -> UTF-8 text; one thread at a time.
    kestrel_detokenizer;
    /// Many requests with continuous batching; every function thread-safe.
    kestrel_engine;
    /// A chat reply's family: content, reasoning and tool calls (API version 7).
    kestrel_reply_parser;
}

/// `kestrel_log_fn`.
pub type kestrel_log_fn =
    Option<unsafe extern "C" fn(level: kestrel_log_level, message: *const c_char, user: *mut c_void)>;
/// `kestrel_progress_fn`: return false to cancel the load.
pub type kestrel_progress_fn = Option<unsafe extern "C" fn(progress: f32, user: *mut c_void) -> bool>;
/// `kestrel_token_fn`: return false to stop generating.
pub type kestrel_token_fn = Option<
    unsafe extern "C" fn(token: kestrel_token, piece: *const c_char, piece_len: usize, user: *mut c_void) -> bool,
>;
/// `kestrel_logits_fn`.
pub type kestrel_logits_fn = Option<unsafe extern "C" fn(logits: *const f32, n_vocab: i32, user: *mut c_void)>;
/// `kestrel_done_fn`.
pub type kestrel_done_fn = Option<unsafe extern "C" fn(result: *const kestrel_request_result, user: *mut c_void)>;

/// `struct kestrel_model_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_model_options {
    pub struct_size: u32,
    pub backend: *const c_char,
    pub n_threads: i32,
    pub use_mmap: bool,
    pub vocab_only: bool,
    pub progress: kestrel_progress_fn,
    pub progress_user: *mut c_void,
}

/// `struct kestrel_chat_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_chat_options {
    pub struct_size: u32,
    pub template_source: *const c_char,
    pub tools_json: *const c_char,
    pub extra_context_json: *const c_char,
    pub bos_token: *const c_char,
    pub eos_token: *const c_char,
    pub add_generation_prompt: bool,
}

/// `struct kestrel_context_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_context_options {
    pub struct_size: u32,
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_seq_max: u32,
    pub n_threads: i32,
    pub kv_type: i32,   // a kestrel_kv_type: K's, and V's unless kv_type_v
    pub kv_type_v: i32, // API 9; -1: kv_type
}

/// `struct kestrel_batch`: arrays are owned by the caller.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_batch {
    pub n_tokens: i32,
    pub tokens: *const kestrel_token,
    pub positions: *const i32,
    pub seq_ids: *const i32,
    pub logits: *const bool,
}

/// `struct kestrel_sampler_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_sampler_options {
    pub struct_size: u32,
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub penalty_last_n: i32,
    pub seed: u64,
    pub logit_bias_tokens: *const kestrel_token,
    pub logit_bias_values: *const f32,
    pub n_logit_bias: i32,
}

/// `struct kestrel_spec_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_spec_options {
    pub struct_size: u32,
    pub mode: kestrel_spec_mode,
    pub k_max: i32,
    pub ngram_min: i32,
    pub ngram_max: i32,
}

/// `struct kestrel_token_logprob` (API version 7).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kestrel_token_logprob {
    pub token: kestrel_token,
    pub logprob: f32,
}

/// `struct kestrel_spec_stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kestrel_spec_stats {
    pub struct_size: u32,
    pub n_steps: i32,
    pub n_drafted: i32,
    pub n_accepted: i32,
}

/// `struct kestrel_generate_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_generate_options {
    pub struct_size: u32,
    pub max_tokens: i32,
    pub add_special: bool,
    pub parse_special: bool,
    pub stop_at_eog: bool,
    pub sampling: *const kestrel_sampler_options,
    pub on_token: kestrel_token_fn,
    pub user: *mut c_void,
    pub speculative: *const kestrel_spec_options,
    pub draft: *mut kestrel_context,
    pub spec_stats: *mut kestrel_spec_stats,
    pub stop_strings: *const *const c_char,
    pub n_stop_strings: i32,
    pub grammar: *const c_char, // API 6
    pub json_schema: *const c_char,
}

/// `struct kestrel_engine_options`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_engine_options {
    pub struct_size: u32,
    pub n_ctx: u32,
    pub n_parallel: u32,
    pub n_batch: u32,
    pub n_threads: i32,
    pub draft_model: *const kestrel_model,
    pub speculative: *const kestrel_spec_options,
    pub kv_type: i32,   // a kestrel_kv_type: K's, and V's unless kv_type_v
    pub kv_type_v: i32, // API 9; -1: kv_type
}

/// `struct kestrel_request_result`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct kestrel_request_result {
    pub struct_size: u32,
    pub finish: kestrel_finish_reason,
    pub status: kestrel_status,
    pub n_prompt: i32,
    pub n_cached: i32,
    pub n_generated: i32,
    pub n_drafted: i32,
    pub n_accepted: i32,
    pub stop_string: i32,
    pub queue_s: f32,
}

/// `struct kestrel_request`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct kestrel_request {
    pub struct_size: u32,
    pub prompt: *const kestrel_token,
    pub n_prompt: i32,
    pub max_tokens: i32,
    pub sampling: *const kestrel_sampler_options,
    pub stop_at_eog: bool,
    pub stop_tokens: *const kestrel_token,
    pub n_stop_tokens: i32,
    pub stop_strings: *const *const c_char,
    pub n_stop_strings: i32,
    pub on_token: kestrel_token_fn,
    pub on_logits: kestrel_logits_fn,
    pub on_done: kestrel_done_fn,
    pub user: *mut c_void,
    pub speculative: *const kestrel_spec_options,
    pub grammar: *const c_char, // API 6
    pub json_schema: *const c_char,
    pub reply: *const kestrel_reply_parser, // API 7
}
