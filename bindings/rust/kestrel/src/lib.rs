//! Safe Rust API of Kestrel, an embeddable LLM inference runtime (over `kestrel-sys`).
//!
//! ```no_run
//! use kestrel::{GenerateOptions, Model};
//!
//! fn main() -> Result<(), kestrel::Error> {
//!     let model = Model::load("stories260K-f32.gguf")?;
//!     let greedy = GenerateOptions::new().max_tokens(32).temperature(0.0);
//!     println!("{}", model.generate("Once upon a time", &greedy)?);
//!     for piece in model.stream("The little dog", &GenerateOptions::new().max_tokens(24).seed(7))? {
//!         print!("{}", piece?);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! - [`Model`]: load, describe, tokenize/detokenize, chat templates, and `generate` / `stream` /
//!   `chat` on an engine the model creates on first use. `Send + Sync`: share it with `Arc`.
//! - [`Stream`]: an iterator of text pieces; dropping it early cancels the request.
//! - [`Chat`]: a conversation rendered with the model's (or a given) chat template.
//! - [`Model::chat_reply`], [`ReplyParser`]: tool calls and reasoning, by the template's family.
//! - [`Engine`]: an engine of your own (continuous batching; `Send + Sync`).
//! - [`Context`], [`Batch`], [`Sampler`], [`Detokenizer`]: your own decode loop (`Send`, one
//!   thread at a time).
//! - [`Error`]: the status code, its name and the library's message.

mod buffer;
mod chat;
mod context;
mod detokenizer;
mod engine;
mod error;
mod json;
mod model;
mod options;
mod reply;
mod sampler;
mod stream;

pub use chat::{Chat, Message};
pub use context::{Batch, Context};
pub use detokenizer::Detokenizer;
pub use engine::Engine;
pub use error::{status_name, Error, Result, Status};
pub use model::Model;
pub use options::{ContextOptions, EngineOptions, GenerateOptions, KvType, ModelOptions};
pub use reply::{ChatReply, ReplyDelta, ReplyParser, ToolCall, ToolChoice};
pub use sampler::Sampler;
pub use stream::{FinishReason, RequestResult, Stream};

/// The raw declarations this crate is built on.
pub use kestrel_sys as sys;

/// `KESTREL_API_VERSION` of the library actually linked.
pub fn api_version() -> u32 {
    unsafe { sys::kestrel_api_version() }
}

/// Log levels for [`set_log_level`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Everything.
    Debug,
    /// Informational and up.
    Info,
    /// Warnings and errors.
    Warn,
    /// Errors only.
    Error,
    /// Nothing.
    None,
}

/// Prints the library's log lines at or above `min_level` to stderr (process-wide).
pub fn set_log_level(min_level: LogLevel) {
    let level = match min_level {
        LogLevel::Debug => sys::KESTREL_LOG_DEBUG,
        LogLevel::Info => sys::KESTREL_LOG_INFO,
        LogLevel::Warn => sys::KESTREL_LOG_WARN,
        LogLevel::Error => sys::KESTREL_LOG_ERROR,
        LogLevel::None => sys::KESTREL_LOG_NONE,
    };
    unsafe { sys::kestrel_log_set(None, std::ptr::null_mut(), level) }
}
