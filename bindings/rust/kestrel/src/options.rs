//! Option builders. Their defaults are the C defaults (`kestrel_*_init`); a unit test checks.

use std::ffi::CString;
use std::os::raw::c_char;

use kestrel_sys as sys;

use crate::error::{Error, Result};

/// The KV cache's element type (`enum kestrel_kv_type`, docs/LOW_PRECISION.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KvType {
    /// IEEE half (the default).
    #[default]
    F16,
    /// 32-bit floats: twice F16's memory.
    F32,
    /// FP8 E4M3 bytes: half of F16's memory; values beyond ±448 saturate.
    F8E4M3,
    /// Each token's row in blocks of 32 int8 values and an F16 scale: 53% of F16's memory.
    Q8_0,
    /// Blocks of 32 4-bit values and an F16 scale: 28% of F16's memory.
    Q4_0,
}

impl KvType {
    pub(crate) fn to_sys(self) -> i32 {
        match self {
            KvType::F16 => sys::KESTREL_KV_F16,
            KvType::F32 => sys::KESTREL_KV_F32,
            KvType::F8E4M3 => sys::KESTREL_KV_F8_E4M3,
            KvType::Q8_0 => sys::KESTREL_KV_Q8_0,
            KvType::Q4_0 => sys::KESTREL_KV_Q4_0,
        }
    }
}

/// Sizing of an engine (`kestrel_engine_options`): the KV cells shared by all requests, the
/// requests decoded at once, the tokens per step and the cache's element type.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineOptions {
    pub(crate) n_ctx: u32,
    pub(crate) n_parallel: u32,
    pub(crate) n_batch: u32,
    pub(crate) n_threads: i32,
    pub(crate) kv_type: KvType,
    pub(crate) kv_type_v: Option<KvType>,
}

impl EngineOptions {
    /// The C defaults: n_ctx 0 (min(model's context, 4096)), n_parallel 4, n_batch 256,
    /// n_threads 0 (the model's setting).
    pub fn new() -> EngineOptions {
        EngineOptions { n_ctx: 0, n_parallel: 4, n_batch: 256, n_threads: 0, kv_type: KvType::F16, kv_type_v: None }
    }
    /// KV cells shared by all requests (0: min(model's context, 4096)).
    pub fn n_ctx(mut self, n: u32) -> Self {
        self.n_ctx = n;
        self
    }
    /// Requests decoding at once (at most 64).
    pub fn n_parallel(mut self, n: u32) -> Self {
        self.n_parallel = n;
        self
    }
    /// Tokens per step.
    pub fn n_batch(mut self, n: u32) -> Self {
        self.n_batch = n;
        self
    }
    /// CPU threads (0: the model's setting).
    pub fn n_threads(mut self, n: i32) -> Self {
        self.n_threads = n;
        self
    }
    /// The KV cache's element type: K's, and V's unless `kv_type_v` sets it.
    pub fn kv_type(mut self, t: KvType) -> Self {
        self.kv_type = t;
        self
    }
    /// V's element type (API 9).
    pub fn kv_type_v(mut self, t: KvType) -> Self {
        self.kv_type_v = Some(t);
        self
    }

    pub(crate) fn to_sys(&self) -> sys::kestrel_engine_options {
        let mut o = std::mem::MaybeUninit::<sys::kestrel_engine_options>::uninit();
        // SAFETY: the init function fills every field.
        let mut o = unsafe {
            sys::kestrel_engine_options_init(o.as_mut_ptr());
            o.assume_init()
        };
        o.n_ctx = self.n_ctx;
        o.n_parallel = self.n_parallel;
        o.n_batch = self.n_batch;
        o.n_threads = self.n_threads;
        o.kv_type = self.kv_type.to_sys();
        o.kv_type_v = self.kv_type_v.map_or(-1, KvType::to_sys);
        o
    }
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions::new()
    }
}

/// How to load a model (`kestrel_model_options`), plus the sizing of the engine that
/// `Model::generate`/`stream`/`chat` create on first use.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOptions {
    pub(crate) backend: String,
    pub(crate) n_threads: i32,
    pub(crate) use_mmap: bool,
    pub(crate) vocab_only: bool,
    pub(crate) engine: EngineOptions,
}

impl ModelOptions {
    /// The C defaults: backend "auto", all physical cores, mmap on, full model.
    pub fn new() -> ModelOptions {
        ModelOptions {
            backend: "auto".to_string(),
            n_threads: 0,
            use_mmap: true,
            vocab_only: false,
            engine: EngineOptions::new(),
        }
    }
    /// "auto", "cpu" or "cuda".
    pub fn backend(mut self, name: &str) -> Self {
        self.backend = name.to_string();
        self
    }
    /// CPU threads; 0 = all physical cores.
    pub fn n_threads(mut self, n: i32) -> Self {
        self.n_threads = n;
        self
    }
    /// Map the file (true) or read it into memory (false).
    pub fn use_mmap(mut self, on: bool) -> Self {
        self.use_mmap = on;
        self
    }
    /// Load only the vocabulary (tokenize/detokenize/chat templates; no generation).
    pub fn vocab_only(mut self, on: bool) -> Self {
        self.vocab_only = on;
        self
    }
    /// KV cells of the model's engine (0: min(model's context, 4096)).
    pub fn n_ctx(mut self, n: u32) -> Self {
        self.engine.n_ctx = n;
        self
    }
    /// Requests the model's engine decodes at once.
    pub fn n_parallel(mut self, n: u32) -> Self {
        self.engine.n_parallel = n;
        self
    }
    /// Tokens per step of the model's engine.
    pub fn n_batch(mut self, n: u32) -> Self {
        self.engine.n_batch = n;
        self
    }
    /// The KV cache's element type in the model's engine.
    pub fn kv_type(mut self, t: KvType) -> Self {
        self.engine.kv_type = t;
        self
    }
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions::new()
    }
}

/// A per-session context's sizing (`kestrel_context_options`).
#[derive(Debug, Clone, PartialEq)]
pub struct ContextOptions {
    pub(crate) n_ctx: u32,
    pub(crate) n_batch: u32,
    pub(crate) n_seq_max: u32,
    pub(crate) n_threads: i32,
    pub(crate) kv_type: KvType,
    pub(crate) kv_type_v: Option<KvType>,
}

impl ContextOptions {
    /// The C defaults: n_ctx 0 (the model's training context), n_batch 512, one sequence,
    /// n_threads 0 (the model's setting), an F16 cache.
    pub fn new() -> ContextOptions {
        ContextOptions { n_ctx: 0, n_batch: 512, n_seq_max: 1, n_threads: 0, kv_type: KvType::F16, kv_type_v: None }
    }
    /// KV cache size in tokens (0: the model's training context).
    pub fn n_ctx(mut self, n: u32) -> Self {
        self.n_ctx = n;
        self
    }
    /// Most tokens per decode call.
    pub fn n_batch(mut self, n: u32) -> Self {
        self.n_batch = n;
        self
    }
    /// Most distinct sequence ids.
    pub fn n_seq_max(mut self, n: u32) -> Self {
        self.n_seq_max = n;
        self
    }
    /// CPU threads (0: the model's setting).
    pub fn n_threads(mut self, n: i32) -> Self {
        self.n_threads = n;
        self
    }
    /// The KV cache's element type: K's, and V's unless `kv_type_v` sets it.
    pub fn kv_type(mut self, t: KvType) -> Self {
        self.kv_type = t;
        self
    }
    /// V's element type (API 9).
    pub fn kv_type_v(mut self, t: KvType) -> Self {
        self.kv_type_v = Some(t);
        self
    }
}

impl Default for ContextOptions {
    fn default() -> Self {
        ContextOptions::new()
    }
}

/// Generation and sampling settings, as a builder:
/// `GenerateOptions::new().max_tokens(32).temperature(0.0).seed(7).stop(["."])`.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    pub(crate) max_tokens: i32,
    pub(crate) stop_at_eog: bool,
    pub(crate) stop: Vec<String>,
    pub(crate) temperature: f32,
    pub(crate) top_k: i32,
    pub(crate) top_p: f32,
    pub(crate) min_p: f32,
    pub(crate) repeat_penalty: f32,
    pub(crate) presence_penalty: f32,
    pub(crate) frequency_penalty: f32,
    pub(crate) penalty_last_n: i32,
    pub(crate) seed: u64,
    pub(crate) bias_tokens: Vec<i32>,
    pub(crate) bias_values: Vec<f32>,
    pub(crate) grammar: Option<String>,
    pub(crate) json_schema: Option<String>,
}

impl GenerateOptions {
    /// The C defaults: 128 tokens, stop at end-of-generation tokens, temperature 0.8, top_k 40,
    /// top_p 0.95, min_p 0.05, no penalties (last 64 tokens), seed 0, no stop strings.
    pub fn new() -> GenerateOptions {
        GenerateOptions {
            max_tokens: 128,
            stop_at_eog: true,
            stop: Vec::new(),
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
            bias_tokens: Vec::new(),
            bias_values: Vec::new(),
            grammar: None,
            json_schema: None,
        }
    }
    /// Most tokens to generate.
    pub fn max_tokens(mut self, n: i32) -> Self {
        self.max_tokens = n;
        self
    }
    /// Stop at end-of-generation tokens (EOS, EOT, ...).
    pub fn stop_at_eog(mut self, on: bool) -> Self {
        self.stop_at_eog = on;
        self
    }
    /// Stop strings: the text ends before the first match (replaces earlier ones).
    pub fn stop<I, S>(mut self, strings: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.stop = strings.into_iter().map(Into::into).collect();
        self
    }
    /// Temperature; <= 0 is greedy.
    pub fn temperature(mut self, t: f32) -> Self {
        self.temperature = t;
        self
    }
    /// Top-k; <= 0 is off.
    pub fn top_k(mut self, k: i32) -> Self {
        self.top_k = k;
        self
    }
    /// Top-p (nucleus); >= 1 is off.
    pub fn top_p(mut self, p: f32) -> Self {
        self.top_p = p;
        self
    }
    /// Min-p; <= 0 is off.
    pub fn min_p(mut self, p: f32) -> Self {
        self.min_p = p;
        self
    }
    /// Repetition penalty; 1 is off.
    pub fn repeat_penalty(mut self, v: f32) -> Self {
        self.repeat_penalty = v;
        self
    }
    /// Presence penalty; 0 is off.
    pub fn presence_penalty(mut self, v: f32) -> Self {
        self.presence_penalty = v;
        self
    }
    /// Frequency penalty; 0 is off.
    pub fn frequency_penalty(mut self, v: f32) -> Self {
        self.frequency_penalty = v;
        self
    }
    /// Tokens the penalties look back over.
    pub fn penalty_last_n(mut self, n: i32) -> Self {
        self.penalty_last_n = n;
        self
    }
    /// RNG seed; the same seed reproduces the same draws.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Adds `bias` to the logit of `token` before sampling (`f32::NEG_INFINITY` bans it).
    pub fn logit_bias(mut self, token: i32, bias: f32) -> Self {
        self.bias_tokens.push(token);
        self.bias_values.push(bias);
        self
    }

    /// Only text this GBNF grammar (rule `root`; docs/GRAMMAR.md) allows. At most one of grammar
    /// and JSON Schema; what cannot compile or be enforced fails the request, naming it.
    pub fn grammar(mut self, gbnf: &str) -> Self {
        self.grammar = Some(gbnf.to_string());
        self
    }
    /// Only JSON valid under this JSON Schema (a keyword it cannot enforce fails the request).
    pub fn json_schema(mut self, schema: &str) -> Self {
        self.json_schema = Some(schema.to_string());
        self
    }

    /// The sampler options; the logit-bias pointers borrow `self`.
    pub(crate) fn sampler_options(&self) -> sys::kestrel_sampler_options {
        let mut o = std::mem::MaybeUninit::<sys::kestrel_sampler_options>::uninit();
        // SAFETY: the init function fills every field.
        let mut o = unsafe {
            sys::kestrel_sampler_options_init(o.as_mut_ptr());
            o.assume_init()
        };
        o.temperature = self.temperature;
        o.top_k = self.top_k;
        o.top_p = self.top_p;
        o.min_p = self.min_p;
        o.repeat_penalty = self.repeat_penalty;
        o.presence_penalty = self.presence_penalty;
        o.frequency_penalty = self.frequency_penalty;
        o.penalty_last_n = self.penalty_last_n;
        o.seed = self.seed;
        if !self.bias_tokens.is_empty() {
            o.logit_bias_tokens = self.bias_tokens.as_ptr();
            o.logit_bias_values = self.bias_values.as_ptr();
            o.n_logit_bias = self.bias_tokens.len() as i32;
        }
        o
    }

    /// The stop strings as C strings (an interior NUL byte is an error).
    pub(crate) fn stop_strings(&self) -> Result<CStrings> {
        CStrings::new(&self.stop)
    }
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions::new()
    }
}

/// Owned C strings plus the array of pointers to them.
pub(crate) struct CStrings {
    _owned: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CStrings {
    pub(crate) fn new(strings: &[String]) -> Result<CStrings> {
        let owned = strings.iter().map(|s| c_string(s)).collect::<Result<Vec<_>>>()?;
        let ptrs = owned.iter().map(|s| s.as_ptr()).collect();
        Ok(CStrings { _owned: owned, ptrs })
    }
    /// The array (NULL when empty).
    pub(crate) fn as_ptr(&self) -> *const *const c_char {
        if self.ptrs.is_empty() {
            std::ptr::null()
        } else {
            self.ptrs.as_ptr()
        }
    }
    pub(crate) fn len(&self) -> i32 {
        self.ptrs.len() as i32
    }
}

/// A C string from Rust text; an interior NUL byte is an `InvalidArgument` error.
pub(crate) fn c_string(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::invalid(format!("string contains a NUL byte: {:?}", s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::MaybeUninit;

    #[test]
    fn defaults_match_c() {
        let s = GenerateOptions::new().sampler_options();
        let mut c = MaybeUninit::<sys::kestrel_sampler_options>::uninit();
        let c = unsafe {
            sys::kestrel_sampler_options_init(c.as_mut_ptr());
            c.assume_init()
        };
        assert_eq!(
            (s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty),
            (c.temperature, c.top_k, c.top_p, c.min_p, c.repeat_penalty)
        );
        assert_eq!(
            (s.presence_penalty, s.frequency_penalty, s.penalty_last_n, s.seed, s.n_logit_bias),
            (c.presence_penalty, c.frequency_penalty, c.penalty_last_n, c.seed, c.n_logit_bias)
        );
        let mut r = MaybeUninit::<sys::kestrel_request>::uninit();
        let r = unsafe {
            sys::kestrel_request_init(r.as_mut_ptr());
            r.assume_init()
        };
        let g = GenerateOptions::new();
        assert_eq!((g.max_tokens, g.stop_at_eog), (r.max_tokens, r.stop_at_eog));

        let mut e = MaybeUninit::<sys::kestrel_engine_options>::uninit();
        let e = unsafe {
            sys::kestrel_engine_options_init(e.as_mut_ptr());
            e.assume_init()
        };
        let ours = EngineOptions::new();
        assert_eq!((ours.n_ctx, ours.n_parallel, ours.n_batch, ours.n_threads), (e.n_ctx, e.n_parallel, e.n_batch, e.n_threads));
        assert_eq!((ours.kv_type.to_sys(), ours.to_sys().kv_type_v), (e.kv_type, e.kv_type_v));
        assert_eq!(EngineOptions::new().kv_type(KvType::F8E4M3).to_sys().kv_type, sys::KESTREL_KV_F8_E4M3);
        let q = EngineOptions::new().kv_type(KvType::Q8_0).kv_type_v(KvType::Q4_0).to_sys();
        assert_eq!((q.kv_type, q.kv_type_v), (sys::KESTREL_KV_Q8_0, sys::KESTREL_KV_Q4_0));

        let mut m = MaybeUninit::<sys::kestrel_model_options>::uninit();
        let m = unsafe {
            sys::kestrel_model_options_init(m.as_mut_ptr());
            m.assume_init()
        };
        let backend = unsafe { std::ffi::CStr::from_ptr(m.backend) }.to_str().unwrap();
        let mo = ModelOptions::new();
        assert_eq!((mo.backend.as_str(), mo.n_threads, mo.use_mmap, mo.vocab_only), (backend, m.n_threads, m.use_mmap, m.vocab_only));

        let mut co = MaybeUninit::<sys::kestrel_context_options>::uninit();
        let co = unsafe {
            sys::kestrel_context_options_init(co.as_mut_ptr());
            co.assume_init()
        };
        let ours = ContextOptions::new();
        assert_eq!((ours.n_ctx, ours.n_batch, ours.n_seq_max, ours.n_threads), (co.n_ctx, co.n_batch, co.n_seq_max, co.n_threads));
        assert_eq!(ours.kv_type.to_sys(), co.kv_type);
    }
}
