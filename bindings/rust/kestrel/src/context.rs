//! `Context`: a KV cache + scratch for one session, for your own decode loop.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

use kestrel_sys as sys;

use crate::buffer::{into_string, read_string};
use crate::error::{check, Error, Result};
use crate::model::Model;
use crate::options::{c_string, ContextOptions, GenerateOptions, KvType};

/// A batch of tokens for [`Context::decode`], possibly of several sequences. Every array given
/// must have one entry per token.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    tokens: &'a [i32],
    positions: Option<&'a [i32]>,
    seq_ids: Option<&'a [i32]>,
    logits: Option<&'a [bool]>,
}

impl<'a> Batch<'a> {
    /// Tokens continuing sequence 0, with logits for the last one only.
    pub fn new(tokens: &'a [i32]) -> Batch<'a> {
        Batch { tokens, positions: None, seq_ids: None, logits: None }
    }
    /// Explicit positions (default: continue each sequence from its last position).
    pub fn positions(mut self, positions: &'a [i32]) -> Self {
        self.positions = Some(positions);
        self
    }
    /// Sequence id per token (default: all 0).
    pub fn seq_ids(mut self, seq_ids: &'a [i32]) -> Self {
        self.seq_ids = Some(seq_ids);
        self
    }
    /// Which rows get logits (default: the last token only).
    pub fn logits(mut self, logits: &'a [bool]) -> Self {
        self.logits = Some(logits);
        self
    }
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
    /// True without tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    fn to_sys(self) -> Result<sys::kestrel_batch> {
        let n = self.tokens.len();
        let bad = |name: &str, len: usize| Error::invalid(format!("batch: {} has {} entries for {} tokens", name, len, n));
        if let Some(p) = self.positions {
            if p.len() != n {
                return Err(bad("positions", p.len()));
            }
        }
        if let Some(s) = self.seq_ids {
            if s.len() != n {
                return Err(bad("seq_ids", s.len()));
            }
        }
        if let Some(l) = self.logits {
            if l.len() != n {
                return Err(bad("logits", l.len()));
            }
        }
        if n > i32::MAX as usize {
            return Err(Error::invalid("batch: too many tokens"));
        }
        Ok(sys::kestrel_batch {
            n_tokens: n as i32,
            tokens: self.tokens.as_ptr(),
            positions: self.positions.map_or(ptr::null(), |p| p.as_ptr()),
            seq_ids: self.seq_ids.map_or(ptr::null(), |s| s.as_ptr()),
            logits: self.logits.map_or(ptr::null(), |l| l.as_ptr()),
        })
    }
}

/// A session over a model: its own KV cache. Send but not Sync (one thread at a time); it
/// borrows the model, which outlives it.
pub struct Context<'m> {
    raw: NonNull<sys::kestrel_context>,
    _model: PhantomData<&'m Model>,
}

// SAFETY: kestrel.h: "A kestrel_context ... must be used by one thread at a time": moving it to
// another thread is fine; sharing it (Sync) is not.
unsafe impl Send for Context<'_> {}

impl<'m> Context<'m> {
    /// Creates a context over `model`.
    pub fn new(model: &'m Model, options: &ContextOptions) -> Result<Context<'m>> {
        let mut o = std::mem::MaybeUninit::<sys::kestrel_context_options>::uninit();
        let mut raw: *mut sys::kestrel_context = ptr::null_mut();
        // SAFETY: the init function fills every field; raw receives the new handle.
        let status = unsafe {
            sys::kestrel_context_options_init(o.as_mut_ptr());
            let mut o = o.assume_init();
            o.n_ctx = options.n_ctx;
            o.n_batch = options.n_batch;
            o.n_seq_max = options.n_seq_max;
            o.n_threads = options.n_threads;
            o.kv_type = options.kv_type.to_sys();
            o.kv_type_v = options.kv_type_v.map_or(-1, KvType::to_sys);
            sys::kestrel_context_new(model.as_ptr(), &o, &mut raw)
        };
        check(status)?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(sys::KESTREL_ERR_INTERNAL, "kestrel_context_new gave NULL"))?;
        Ok(Context { raw, _model: PhantomData })
    }

    /// The raw handle (owned by this Context).
    pub fn as_ptr(&self) -> *mut sys::kestrel_context {
        self.raw.as_ptr()
    }

    /// KV cache size in tokens.
    pub fn n_ctx(&self) -> u32 {
        unsafe { sys::kestrel_context_n_ctx(self.as_ptr()) }
    }

    /// The backend the context runs on ("cpu", "cuda", "ref").
    pub fn backend(&self) -> String {
        // SAFETY: a static-lifetime-while-ctx-lives string, copied at once.
        unsafe {
            let p = sys::kestrel_context_backend(self.as_ptr());
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    /// Runs the model over the batch, appending to the KV cache.
    pub fn decode(&mut self, batch: &Batch<'_>) -> Result<()> {
        let b = batch.to_sys()?;
        check(unsafe { sys::kestrel_decode(self.as_ptr(), &b) })
    }

    /// Logits of batch row `i` of the last decode (`i < 0` counts from the end); valid until
    /// the next decode, which the borrow enforces.
    pub fn logits(&self, i: i32) -> Result<&[f32]> {
        let mut p: *const f32 = ptr::null();
        let mut n: i32 = 0;
        check(unsafe { sys::kestrel_get_logits(self.as_ptr(), i, &mut p, &mut n) })?;
        if p.is_null() || n <= 0 {
            return Err(Error::new(sys::KESTREL_ERR_INTERNAL, "kestrel_get_logits gave no logits"));
        }
        // SAFETY: n floats owned by ctx, unchanged until the next decode (needs &mut self).
        Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
    }

    /// Removes positions [p0, p1) of `seq` (p1 < 0: to the end).
    pub fn kv_seq_remove(&mut self, seq: i32, p0: i32, p1: i32) -> Result<()> {
        check(unsafe { sys::kestrel_kv_seq_remove(self.as_ptr(), seq, p0, p1) })
    }

    /// Copies positions [p0, p1) of `src` to `dst` (shares blocks; cheap).
    pub fn kv_seq_copy(&mut self, src: i32, dst: i32, p0: i32, p1: i32) -> Result<()> {
        check(unsafe { sys::kestrel_kv_seq_copy(self.as_ptr(), src, dst, p0, p1) })
    }

    /// Keeps only `seq`.
    pub fn kv_seq_keep(&mut self, seq: i32) -> Result<()> {
        check(unsafe { sys::kestrel_kv_seq_keep(self.as_ptr(), seq) })
    }

    /// Largest position cached for `seq`, `None` if none.
    pub fn kv_seq_pos_max(&self, seq: i32) -> Option<i32> {
        let p = unsafe { sys::kestrel_kv_seq_pos_max(self.as_ptr(), seq) };
        if p < 0 {
            None
        } else {
            Some(p)
        }
    }

    /// Embeds each input (token ids): one vector of n_embd floats per input, its tokens' final
    /// states after the output norm pooled (`sys::KESTREL_POOLING_*`; MODEL: the GGUF's pooling
    /// type, else the last token) and, with `normalize`, of unit length. Clears the KV cache.
    pub fn embed(&mut self, inputs: &[&[i32]], pooling: sys::kestrel_pooling, normalize: bool) -> Result<Vec<Vec<f32>>> {
        let tokens: Vec<i32> = inputs.iter().flat_map(|t| t.iter().copied()).collect();
        let lengths = inputs
            .iter()
            .map(|t| i32::try_from(t.len()).map_err(|_| Error::new(sys::KESTREL_ERR_INVALID_ARGUMENT, "an input is too long")))
            .collect::<Result<Vec<i32>>>()?;
        let n = i32::try_from(inputs.len()).map_err(|_| Error::new(sys::KESTREL_ERR_INVALID_ARGUMENT, "too many inputs"))?;
        let mut need = 0usize;
        let st = unsafe {
            sys::kestrel_embed(self.as_ptr(), tokens.as_ptr(), lengths.as_ptr(), n, pooling, normalize, ptr::null_mut(), 0, &mut need)
        };
        if st != sys::KESTREL_ERR_BUFFER_TOO_SMALL {
            check(st)?;
        }
        let mut out = vec![0f32; need];
        check(unsafe {
            sys::kestrel_embed(self.as_ptr(), tokens.as_ptr(), lengths.as_ptr(), n, pooling, normalize, out.as_mut_ptr(), out.len(), &mut need)
        })?;
        let width = if inputs.is_empty() { 0 } else { out.len() / inputs.len() };
        Ok(out.chunks(width.max(1)).map(|c| c.to_vec()).collect())
    }

    /// Empties the KV cache (and its prefix cache).
    pub fn kv_clear(&mut self) {
        unsafe { sys::kestrel_kv_clear(self.as_ptr()) }
    }

    /// Turns per-op profiling on or off.
    pub fn set_profiling(&mut self, on: bool) -> Result<()> {
        check(unsafe { sys::kestrel_context_set_profiling(self.as_ptr(), on) })
    }

    /// The profile as JSON (slowest op first); `reset` starts the totals over.
    pub fn profile(&mut self, reset: bool) -> Result<String> {
        // Size first without resetting, so a retry cannot lose the totals.
        let mut len = 0usize;
        let status = unsafe { sys::kestrel_context_profile(self.as_ptr(), false, ptr::null_mut(), 0, &mut len) };
        if status != sys::KESTREL_ERR_BUFFER_TOO_SMALL {
            check(status)?;
        }
        read_string(len + 1, |buf, cap, out| unsafe { sys::kestrel_context_profile(self.as_ptr(), reset, buf, cap, out) })
    }

    /// `kestrel_generate`: clears the cache, runs `prompt` (BOS added, control text not parsed)
    /// and returns the continuation. The same tokens as `Model::generate` for the same options.
    pub fn generate(&mut self, prompt: &str, options: &GenerateOptions) -> Result<String> {
        let prompt = c_string(prompt)?;
        let stop = options.stop_strings()?;
        let sampling = options.sampler_options();
        let mut text: Vec<u8> = Vec::new();
        let mut o = std::mem::MaybeUninit::<sys::kestrel_generate_options>::uninit();
        // SAFETY: the init function fills every field; everything pointed to outlives the call,
        // and the callback runs on this thread during it.
        let status = unsafe {
            sys::kestrel_generate_options_init(o.as_mut_ptr());
            let mut o = o.assume_init();
            o.max_tokens = options.max_tokens;
            o.stop_at_eog = options.stop_at_eog;
            o.sampling = &sampling;
            o.stop_strings = stop.as_ptr();
            o.n_stop_strings = stop.len();
            o.on_token = Some(collect_piece);
            o.user = &mut text as *mut Vec<u8> as *mut c_void;
            sys::kestrel_generate(self.as_ptr(), prompt.as_ptr(), &o, ptr::null_mut())
        };
        check(status)?;
        Ok(into_string(text))
    }
}

unsafe extern "C" fn collect_piece(_token: i32, piece: *const c_char, len: usize, user: *mut c_void) -> bool {
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: user is the Vec<u8> of Context::generate; piece has len bytes.
        let text = &mut *(user as *mut Vec<u8>);
        if len > 0 {
            text.extend_from_slice(std::slice::from_raw_parts(piece as *const u8, len));
        }
        true
    }))
    .unwrap_or(false)
}

impl Drop for Context<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle came from kestrel_context_new.
        unsafe { sys::kestrel_context_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("raw", &self.raw).field("n_ctx", &self.n_ctx()).finish()
    }
}
