//! Every function of kestrel.h, in the header's order.

use std::os::raw::{c_char, c_void};

use crate::types::*;

extern "C" {
    // ---- status, version, logging ----
    pub fn kestrel_status_name(status: kestrel_status) -> *const c_char;
    pub fn kestrel_last_error() -> *const c_char;
    pub fn kestrel_api_version() -> u32;
    pub fn kestrel_log_set(func: kestrel_log_fn, user: *mut c_void, min_level: kestrel_log_level);

    // ---- model ----
    pub fn kestrel_model_options_init(opts: *mut kestrel_model_options);
    pub fn kestrel_model_load(
        path: *const c_char,
        opts: *const kestrel_model_options,
        out_model: *mut *mut kestrel_model,
    ) -> kestrel_status;
    pub fn kestrel_model_free(model: *mut kestrel_model);
    pub fn kestrel_model_describe(
        model: *const kestrel_model,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_model_n_vocab(model: *const kestrel_model) -> i32;
    pub fn kestrel_model_n_ctx_train(model: *const kestrel_model) -> i32;
    pub fn kestrel_model_token_bos(model: *const kestrel_model) -> kestrel_token;
    pub fn kestrel_model_token_eos(model: *const kestrel_model) -> kestrel_token;
    pub fn kestrel_model_token_is_eog(model: *const kestrel_model, token: kestrel_token) -> bool;

    // ---- tokenizer ----
    pub fn kestrel_tokenize(
        model: *const kestrel_model,
        text: *const c_char,
        text_len: usize,
        add_special: bool,
        parse_special: bool,
        tokens: *mut kestrel_token,
        cap: usize,
        n_tokens: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_detokenize(
        model: *const kestrel_model,
        tokens: *const kestrel_token,
        n_tokens: usize,
        render_special: bool,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_token_to_piece(
        model: *const kestrel_model,
        token: kestrel_token,
        render_special: bool,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_detokenizer_new(
        model: *const kestrel_model,
        render_special: bool,
        out: *mut *mut kestrel_detokenizer,
    ) -> kestrel_status;
    pub fn kestrel_detokenizer_free(detok: *mut kestrel_detokenizer);
    pub fn kestrel_detokenizer_push(
        detok: *mut kestrel_detokenizer,
        token: kestrel_token,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_detokenizer_flush(
        detok: *mut kestrel_detokenizer,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;

    // ---- chat templates ----
    pub fn kestrel_chat_options_init(opts: *mut kestrel_chat_options);
    pub fn kestrel_chat_format(
        model: *const kestrel_model,
        messages_json: *const c_char,
        opts: *const kestrel_chat_options,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_chat_tokenize(
        model: *const kestrel_model,
        text: *const c_char,
        text_len: usize,
        tokens: *mut kestrel_token,
        cap: usize,
        n_tokens: *mut usize,
    ) -> kestrel_status;

    // ---- chat replies (API 7) ----
    pub fn kestrel_reply_parser_new(
        model: *const kestrel_model,
        chat: *const kestrel_chat_options,
        prompt: *const c_char,
        tool_choice: *const c_char,
        flags: u32,
        out: *mut *mut kestrel_reply_parser,
    ) -> kestrel_status;
    pub fn kestrel_reply_parser_grammar(
        p: *const kestrel_reply_parser,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_reply_parser_push(
        p: *mut kestrel_reply_parser,
        text: *const c_char,
        text_len: usize,
        is_final: bool,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_reply_parser_free(p: *mut kestrel_reply_parser);
    pub fn kestrel_reply_parser_show_markers(p: *const kestrel_reply_parser, d: *mut kestrel_detokenizer) -> kestrel_status;

    // ---- context ----
    pub fn kestrel_context_options_init(opts: *mut kestrel_context_options);
    pub fn kestrel_context_new(
        model: *const kestrel_model,
        opts: *const kestrel_context_options,
        out_ctx: *mut *mut kestrel_context,
    ) -> kestrel_status;
    pub fn kestrel_context_free(ctx: *mut kestrel_context);
    pub fn kestrel_context_n_ctx(ctx: *const kestrel_context) -> u32;
    pub fn kestrel_context_backend(ctx: *const kestrel_context) -> *const c_char;
    pub fn kestrel_context_set_profiling(ctx: *mut kestrel_context, on: bool) -> kestrel_status;
    pub fn kestrel_context_profile(
        ctx: *mut kestrel_context,
        reset: bool,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_decode(ctx: *mut kestrel_context, batch: *const kestrel_batch) -> kestrel_status;
    pub fn kestrel_get_logits(
        ctx: *mut kestrel_context,
        i: i32,
        logits: *mut *const f32,
        n_vocab: *mut i32,
    ) -> kestrel_status;
    pub fn kestrel_kv_seq_remove(ctx: *mut kestrel_context, seq: i32, p0: i32, p1: i32) -> kestrel_status;
    pub fn kestrel_kv_seq_copy(ctx: *mut kestrel_context, src: i32, dst: i32, p0: i32, p1: i32) -> kestrel_status;
    pub fn kestrel_kv_seq_keep(ctx: *mut kestrel_context, seq: i32) -> kestrel_status;
    pub fn kestrel_kv_seq_pos_max(ctx: *const kestrel_context, seq: i32) -> i32;
    pub fn kestrel_kv_clear(ctx: *mut kestrel_context);
    pub fn kestrel_embed(
        ctx: *mut kestrel_context,
        tokens: *const kestrel_token,
        lengths: *const i32,
        n_inputs: i32,
        pooling: i32, // a kestrel_pooling
        normalize: bool,
        out: *mut f32,
        cap: usize,
        n_out: *mut usize,
    ) -> kestrel_status;
    pub fn kestrel_logprobs(
        logits: *const f32,
        n_vocab: i32,
        token: kestrel_token,
        token_logprob: *mut f32,
        top: *mut kestrel_token_logprob,
        k: i32,
    ) -> kestrel_status;

    // ---- sampling ----
    pub fn kestrel_sampler_options_init(opts: *mut kestrel_sampler_options);
    pub fn kestrel_sampler_new(opts: *const kestrel_sampler_options, out: *mut *mut kestrel_sampler) -> kestrel_status;
    pub fn kestrel_sampler_free(sampler: *mut kestrel_sampler);
    pub fn kestrel_sampler_sample(
        sampler: *mut kestrel_sampler,
        logits: *const f32,
        n_vocab: i32,
        out: *mut kestrel_token,
    ) -> kestrel_status;
    pub fn kestrel_sampler_accept(sampler: *mut kestrel_sampler, token: kestrel_token);
    pub fn kestrel_sampler_reset(sampler: *mut kestrel_sampler);
    pub fn kestrel_sampler_set_grammar(
        sampler: *mut kestrel_sampler,
        model: *const kestrel_model,
        grammar: *const c_char,
        json_schema: *const c_char,
        reply: *const kestrel_reply_parser,
    ) -> kestrel_status;

    // ---- speculative decoding ----
    pub fn kestrel_spec_options_init(opts: *mut kestrel_spec_options);

    // ---- generate ----
    pub fn kestrel_generate_options_init(opts: *mut kestrel_generate_options);
    pub fn kestrel_generate(
        ctx: *mut kestrel_context,
        prompt: *const c_char,
        opts: *const kestrel_generate_options,
        n_generated: *mut i32,
    ) -> kestrel_status;

    // ---- engine ----
    pub fn kestrel_engine_options_init(opts: *mut kestrel_engine_options);
    pub fn kestrel_engine_new(
        model: *const kestrel_model,
        opts: *const kestrel_engine_options,
        out: *mut *mut kestrel_engine,
    ) -> kestrel_status;
    pub fn kestrel_engine_free(engine: *mut kestrel_engine);
    pub fn kestrel_request_init(req: *mut kestrel_request);
    pub fn kestrel_submit(engine: *mut kestrel_engine, req: *const kestrel_request, id: *mut u64) -> kestrel_status;
    pub fn kestrel_cancel(engine: *mut kestrel_engine, id: u64) -> kestrel_status;
    pub fn kestrel_wait(engine: *mut kestrel_engine, id: u64, result: *mut kestrel_request_result) -> kestrel_status;
    pub fn kestrel_engine_generate(
        engine: *mut kestrel_engine,
        req: *const kestrel_request,
        result: *mut kestrel_request_result,
    ) -> kestrel_status;
    pub fn kestrel_engine_stats(
        engine: *const kestrel_engine,
        buf: *mut c_char,
        cap: usize,
        len: *mut usize,
    ) -> kestrel_status;
}
