//! Engines: many requests at once with continuous batching over a paged KV cache.

use std::ptr::{self, NonNull};

use kestrel_sys as sys;

use crate::buffer::read_string;
use crate::error::{check, Error, Result};
use crate::model::Model;
use crate::options::{EngineOptions, GenerateOptions};
use crate::stream::Stream;

/// An owned `kestrel_engine` handle without a lifetime; whoever holds one keeps its model alive
/// for longer (the `Model` owning it frees it first; `Engine` borrows the model).
pub(crate) struct RawEngine(NonNull<sys::kestrel_engine>);

// SAFETY: kestrel.h: "Every engine function may be called from any thread."
unsafe impl Send for RawEngine {}
unsafe impl Sync for RawEngine {}

impl RawEngine {
    pub(crate) fn new(model: &Model, options: &EngineOptions) -> Result<RawEngine> {
        let o = options.to_sys();
        let mut raw: *mut sys::kestrel_engine = ptr::null_mut();
        // SAFETY: valid model and options; raw receives the new handle.
        check(unsafe { sys::kestrel_engine_new(model.as_ptr(), &o, &mut raw) })?;
        NonNull::new(raw)
            .map(RawEngine)
            .ok_or_else(|| Error::new(sys::KESTREL_ERR_INTERNAL, "kestrel_engine_new gave NULL"))
    }

    pub(crate) fn as_ptr(&self) -> *mut sys::kestrel_engine {
        self.0.as_ptr()
    }
}

impl Drop for RawEngine {
    fn drop(&mut self) {
        // SAFETY: cancels every request and joins the worker; each request's on_done runs
        // (and frees its callback state) before this returns.
        unsafe { sys::kestrel_engine_free(self.0.as_ptr()) }
    }
}

/// An engine of its own over `model`, for callers who want to size it themselves or keep
/// several. `Model::generate`/`stream` use one the model owns instead. Send + Sync: every engine
/// function is thread-safe.
pub struct Engine<'m> {
    raw: RawEngine,
    model: &'m Model,
}

impl<'m> Engine<'m> {
    /// Starts an engine (a worker thread and a shared KV cache) over `model`.
    pub fn new(model: &'m Model, options: &EngineOptions) -> Result<Engine<'m>> {
        Ok(Engine { raw: RawEngine::new(model, options)?, model })
    }

    /// The model the engine runs.
    pub fn model(&self) -> &'m Model {
        self.model
    }

    /// The raw handle (owned by this Engine).
    pub fn as_ptr(&self) -> *mut sys::kestrel_engine {
        self.raw.as_ptr()
    }

    /// Generates a continuation of `prompt` (tokenized with BOS, control text not parsed).
    pub fn generate(&self, prompt: &str, options: &GenerateOptions) -> Result<String> {
        self.stream(prompt, options)?.collect_text()
    }

    /// Streams a continuation of `prompt`; dropping the stream cancels the request.
    pub fn stream(&self, prompt: &str, options: &GenerateOptions) -> Result<Stream<'_>> {
        let tokens = self.model.tokenize(prompt, true, false)?;
        self.stream_tokens(&tokens, options)
    }

    /// Streams a continuation of prompt tokens.
    pub fn stream_tokens(&self, tokens: &[i32], options: &GenerateOptions) -> Result<Stream<'_>> {
        // SAFETY: the stream borrows self, so the engine outlives it.
        unsafe { Stream::submit(self.raw.as_ptr(), tokens, options, std::ptr::null()) }
    }

    /// JSON: requests, tokens, KV blocks and the prefix-cache hit rate.
    pub fn stats(&self) -> Result<String> {
        read_string(1024, |buf, cap, len| unsafe { sys::kestrel_engine_stats(self.raw.as_ptr(), buf, cap, len) })
    }
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("raw", &self.raw.0).finish()
    }
}
