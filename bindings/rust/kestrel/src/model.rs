//! `Model`: a loaded model (weights + vocabulary), its tokenizer, and generation through an
//! engine the model creates on first use.

use std::path::Path;
use std::ptr::{self, NonNull};
use std::sync::{Mutex, MutexGuard};

use kestrel_sys as sys;

use crate::buffer::{into_string, read_bytes, read_string, read_vec};
use crate::chat::Chat;
use crate::detokenizer::Detokenizer;
use crate::engine::RawEngine;
use crate::error::{check, Error, Result};
use crate::options::{c_string, EngineOptions, GenerateOptions, ModelOptions};
use crate::reply::{ChatReply, ReplyParser, ToolChoice};
use crate::stream::{FinishReason, Stream};

/// A loaded model. Immutable after load: share it between threads (`Arc<Model>`); every
/// method takes `&self`.
///
/// `generate`, `stream` and `chat` run on an engine (continuous batching; requests from many
/// threads are decoded together) that the model creates on first use, sized by
/// [`ModelOptions`], and frees before the model itself.
pub struct Model {
    raw: NonNull<sys::kestrel_model>,
    engine: Mutex<Option<RawEngine>>,
    engine_options: EngineOptions,
}

// SAFETY: kestrel.h: "a kestrel_model is immutable after load and may be shared by any number of
// threads and contexts". The engine behind the mutex is thread-safe too.
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

impl Model {
    /// Loads a GGUF model with the default options.
    pub fn load<P: AsRef<Path>>(path: P) -> Result<Model> {
        Model::load_with(path, &ModelOptions::new())
    }

    /// Loads a GGUF model.
    pub fn load_with<P: AsRef<Path>>(path: P, options: &ModelOptions) -> Result<Model> {
        let path = path_c_string(path.as_ref())?;
        let backend = c_string(&options.backend)?;
        let mut o = std::mem::MaybeUninit::<sys::kestrel_model_options>::uninit();
        // SAFETY: the init function fills every field; the strings outlive the load call.
        let mut raw: *mut sys::kestrel_model = ptr::null_mut();
        let status = unsafe {
            sys::kestrel_model_options_init(o.as_mut_ptr());
            let mut o = o.assume_init();
            o.backend = backend.as_ptr();
            o.n_threads = options.n_threads;
            o.use_mmap = options.use_mmap;
            o.vocab_only = options.vocab_only;
            sys::kestrel_model_load(path.as_ptr(), &o, &mut raw)
        };
        check(status)?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::new(sys::KESTREL_ERR_INTERNAL, "kestrel_model_load gave NULL"))?;
        Ok(Model { raw, engine: Mutex::new(None), engine_options: options.engine.clone() })
    }

    /// The raw handle (owned by this Model).
    pub fn as_ptr(&self) -> *const sys::kestrel_model {
        self.raw.as_ptr()
    }

    /// JSON: architecture, hyper-parameters, vocabulary, tensor types and sizes, memory needed.
    pub fn describe(&self) -> Result<String> {
        read_string(4096, |buf, cap, len| unsafe { sys::kestrel_model_describe(self.as_ptr(), buf, cap, len) })
    }

    /// Vocabulary size.
    pub fn n_vocab(&self) -> i32 {
        unsafe { sys::kestrel_model_n_vocab(self.as_ptr()) }
    }

    /// The context length the model was trained with.
    pub fn n_ctx_train(&self) -> i32 {
        unsafe { sys::kestrel_model_n_ctx_train(self.as_ptr()) }
    }

    /// The BOS token, if the vocabulary has one.
    pub fn token_bos(&self) -> Option<i32> {
        some_token(unsafe { sys::kestrel_model_token_bos(self.as_ptr()) })
    }

    /// The EOS token, if the vocabulary has one.
    pub fn token_eos(&self) -> Option<i32> {
        some_token(unsafe { sys::kestrel_model_token_eos(self.as_ptr()) })
    }

    /// True for end-of-generation tokens (EOS, EOT, ...).
    pub fn token_is_eog(&self, token: i32) -> bool {
        unsafe { sys::kestrel_model_token_is_eog(self.as_ptr(), token) }
    }

    /// Text to token ids. `add_special`: BOS/EOS as the vocabulary asks; `parse_special`:
    /// control-token text becomes control tokens.
    pub fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Result<Vec<i32>> {
        read_vec(text.len() + 4, |buf, cap, len| unsafe {
            sys::kestrel_tokenize(
                self.as_ptr(),
                text.as_ptr() as *const _,
                text.len(),
                add_special,
                parse_special,
                buf,
                cap,
                len,
            )
        })
    }

    /// Token ids to text (special tokens rendered if `render_special`); invalid UTF-8 becomes
    /// U+FFFD, see [`Model::detokenize_bytes`] for the raw bytes.
    pub fn detokenize(&self, tokens: &[i32], render_special: bool) -> Result<String> {
        self.detokenize_bytes(tokens, render_special).map(into_string)
    }

    /// Token ids to the bytes they stand for.
    pub fn detokenize_bytes(&self, tokens: &[i32], render_special: bool) -> Result<Vec<u8>> {
        read_bytes(tokens.len() * 8 + 16, |buf, cap, len| unsafe {
            sys::kestrel_detokenize(self.as_ptr(), tokens.as_ptr(), tokens.len(), render_special, buf, cap, len)
        })
    }

    /// The bytes of one token as the vocabulary stores them.
    pub fn token_to_piece(&self, token: i32, render_special: bool) -> Result<Vec<u8>> {
        read_bytes(32, |buf, cap, len| unsafe {
            sys::kestrel_token_to_piece(self.as_ptr(), token, render_special, buf, cap, len)
        })
    }

    /// A streaming detokenizer (token in, complete UTF-8 text out).
    pub fn detokenizer(&self, render_special: bool) -> Result<Detokenizer<'_>> {
        Detokenizer::new(self, render_special)
    }

    /// Renders a conversation with the chat's template (or the model's, or the fallback).
    pub fn chat_template(&self, chat: &Chat, add_generation_prompt: bool) -> Result<String> {
        chat.render(Some(self), add_generation_prompt)
    }

    /// Generates a continuation of `prompt` (the prompt is not repeated), like `kestrel run`.
    pub fn generate(&self, prompt: &str, options: &GenerateOptions) -> Result<String> {
        self.stream(prompt, options)?.collect_text()
    }

    /// Streams a continuation of `prompt` piece by piece; dropping the stream cancels it.
    pub fn stream(&self, prompt: &str, options: &GenerateOptions) -> Result<Stream<'_>> {
        let tokens = self.tokenize(prompt, true, false)?;
        self.stream_tokens(&tokens, options)
    }

    /// Streams a continuation of prompt tokens.
    pub fn stream_tokens(&self, tokens: &[i32], options: &GenerateOptions) -> Result<Stream<'_>> {
        let engine = self.engine()?;
        // SAFETY: the engine lives until the model drops, and the stream borrows the model.
        unsafe { Stream::submit(engine, tokens, options, std::ptr::null()) }
    }

    /// The assistant's reply to a conversation (rendered with a generation prompt).
    pub fn chat(&self, chat: &Chat, options: &GenerateOptions) -> Result<String> {
        self.chat_stream(chat, options)?.collect_text()
    }

    /// Streams the assistant's reply to a conversation.
    pub fn chat_stream(&self, chat: &Chat, options: &GenerateOptions) -> Result<Stream<'_>> {
        let tokens = self.chat_tokens(chat)?;
        self.stream_tokens(&tokens, options)
    }

    /// The assistant's reply to a conversation with tools (`chat.tools_json`), split by the
    /// template's family into content, reasoning and tool calls; `choice` Required or Function
    /// holds generation to the family's call grammar (the model cannot answer in prose).
    pub fn chat_reply(&self, chat: &Chat, choice: &ToolChoice, options: &GenerateOptions) -> Result<ChatReply> {
        let prompt = chat.render(Some(self), true)?;
        let mut parser = ReplyParser::new(Some(self), chat, &prompt, choice, true)?;
        let tokens = self.chat_tokenize(&prompt)?;
        let engine = self.engine()?;
        // SAFETY: the engine lives until the model drops and the stream borrows the model; the
        // parser is only read during the submit.
        let mut stream: Stream<'_> = unsafe { Stream::submit(engine, &tokens, options, parser.as_ptr()) }?;
        let mut reply = ChatReply { content: String::new(), reasoning: String::new(), tool_calls: Vec::new(), finish: FinishReason::Other(0) };
        for piece in stream.by_ref() {
            reply.add(parser.push(&piece?, false)?);
        }
        reply.add(parser.push("", true)?);
        reply.finish = stream.result().map_or(FinishReason::Other(0), |r| r.finish);
        Ok(reply)
    }

    /// The prompt tokens of a conversation: rendered with a generation prompt, then
    /// [`Model::chat_tokenize`]d.
    pub fn chat_tokens(&self, chat: &Chat) -> Result<Vec<i32>> {
        self.chat_tokenize(&chat.render(Some(self), true)?)
    }

    /// The tokens of a rendered chat prompt: control-token text parsed, BOS added as the
    /// vocabulary asks, and one BOS kept when the template wrote its own too (as `kestrel chat`
    /// does).
    pub fn chat_tokenize(&self, prompt: &str) -> Result<Vec<i32>> {
        read_vec(prompt.len() + 4, |buf, cap, len| unsafe {
            sys::kestrel_chat_tokenize(self.as_ptr(), prompt.as_ptr() as *const _, prompt.len(), buf, cap, len)
        })
    }

    /// The model's engine, created on first use.
    fn engine(&self) -> Result<*mut sys::kestrel_engine> {
        let mut slot = self.engine_slot();
        if let Some(engine) = slot.as_ref() {
            return Ok(engine.as_ptr());
        }
        let engine = RawEngine::new(self, &self.engine_options)?;
        let ptr = engine.as_ptr();
        *slot = Some(engine);
        Ok(ptr)
    }

    fn engine_slot(&self) -> MutexGuard<'_, Option<RawEngine>> {
        // A panic elsewhere cannot leave the Option half-written: ignore poisoning.
        match self.engine.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        // The engine first: it cancels its requests and joins its worker; the model must
        // outlive it.
        let engine = self.engine_slot().take();
        drop(engine);
        // SAFETY: the handle came from kestrel_model_load and nothing borrows it any more.
        unsafe { sys::kestrel_model_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model").field("raw", &self.raw).field("n_vocab", &self.n_vocab()).finish()
    }
}

fn some_token(t: i32) -> Option<i32> {
    if t < 0 {
        None
    } else {
        Some(t)
    }
}

#[cfg(unix)]
fn path_c_string(path: &Path) -> Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::invalid(format!("path contains a NUL byte: {:?}", path)))
}

#[cfg(not(unix))]
fn path_c_string(path: &Path) -> Result<std::ffi::CString> {
    match path.to_str() {
        Some(s) => c_string(s),
        None => Err(Error::invalid(format!("path is not valid UTF-8: {:?}", path))),
    }
}
