//! Chat replies split into content, reasoning and tool calls (`kestrel_reply_parser`): the chat
//! template's family decides the syntax (docs/TOOLS.md).

use std::ptr::{self, NonNull};

use kestrel_sys as sys;

use crate::buffer::read_string;
use crate::chat::Chat;
use crate::error::{check, Error, Result};
use crate::json::{self, Json};
use crate::model::Model;
use crate::options::c_string;
use crate::stream::FinishReason;

/// One call the model made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Its id ("call_" and 24 characters; 9 alphanumerics for Mistral's family).
    pub id: String,
    /// The function's name.
    pub name: String,
    /// The arguments as JSON text (an object), as OpenAI's `arguments`.
    pub arguments: String,
}

/// What a piece of generated text added ([`ReplyParser::push`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyDelta {
    pub content: String,
    pub reasoning: String,
    /// Calls completed by this piece, whole.
    pub tool_calls: Vec<ToolCall>,
}

/// The whole reply of [`Model::chat_reply`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatReply {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    /// How generation ended (a reply with tool calls ends at them: `Stop`).
    pub finish: FinishReason,
}

/// Which tool, if any, the reply must call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (calls are parsed when it makes them).
    Auto,
    /// No calls: call syntax stays in the content.
    None,
    /// At least one call, enforced by a grammar.
    Required,
    /// A call of this function, enforced by a grammar.
    Function(String),
}

impl ToolChoice {
    fn as_str(&self) -> &str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::None => "none",
            ToolChoice::Required => "required",
            ToolChoice::Function(name) => name,
        }
    }
}

/// A `kestrel_reply_parser`: feed it a reply's text as it is generated, get the content,
/// reasoning and tool calls it adds.
pub struct ReplyParser {
    raw: NonNull<sys::kestrel_reply_parser>,
}

// SAFETY: the parser is plain data owned by this handle; &mut self serializes pushes.
unsafe impl Send for ReplyParser {}

impl ReplyParser {
    /// A parser for the reply to `prompt` (the rendered `chat`), by the family of the chat's
    /// template (or the model's). `parallel`: more than one call per reply. A tool schema a
    /// grammar cannot enforce (Required or Function) is an `Unsupported` error naming it.
    pub fn new(model: Option<&Model>, chat: &Chat, prompt: &str, choice: &ToolChoice, parallel: bool) -> Result<ReplyParser> {
        let template = chat.template_source().map(c_string).transpose()?;
        let tools = chat.tools().map(c_string).transpose()?;
        let prompt = c_string(prompt)?;
        let choice = c_string(choice.as_str())?;
        let mut o = std::mem::MaybeUninit::<sys::kestrel_chat_options>::uninit();
        // SAFETY: the init function fills every field; the strings outlive the call.
        let o = unsafe {
            sys::kestrel_chat_options_init(o.as_mut_ptr());
            let mut o = o.assume_init();
            o.template_source = template.as_ref().map_or(ptr::null(), |c| c.as_ptr());
            o.tools_json = tools.as_ref().map_or(ptr::null(), |c| c.as_ptr());
            o
        };
        let flags = if parallel { sys::KESTREL_REPLY_PARALLEL_TOOLS } else { 0 };
        let mut raw = ptr::null_mut();
        let model_ptr = model.map_or(ptr::null(), |m| m.as_ptr());
        // SAFETY: valid pointers; raw receives the new handle.
        check(unsafe { sys::kestrel_reply_parser_new(model_ptr, &o, prompt.as_ptr(), choice.as_ptr(), flags, &mut raw) })?;
        NonNull::new(raw)
            .map(|raw| ReplyParser { raw })
            .ok_or_else(|| Error::new(sys::KESTREL_ERR_INTERNAL, "kestrel_reply_parser_new gave NULL"))
    }

    /// The raw handle (owned by this parser).
    pub fn as_ptr(&self) -> *mut sys::kestrel_reply_parser {
        self.raw.as_ptr()
    }

    /// The GBNF grammar a forced choice holds generation to ("" when none).
    pub fn grammar(&self) -> Result<String> {
        read_string(1024, |buf, cap, len| unsafe { sys::kestrel_reply_parser_grammar(self.raw.as_ptr(), buf, cap, len) })
    }

    /// Adds generated text (`is_final`: the reply is whole; then no more text) and returns what
    /// it added. Text is never taken back: what looks like the start of a call waits.
    pub fn push(&mut self, text: &str, is_final: bool) -> Result<ReplyDelta> {
        let mut len = 0usize;
        let mut buf = vec![0u8; 4096 + 2 * text.len()];
        // SAFETY: valid parser and buffers of the sizes given.
        let mut status = unsafe {
            sys::kestrel_reply_parser_push(self.raw.as_ptr(), text.as_ptr() as *const _, text.len(), is_final,
                                           buf.as_mut_ptr() as *mut _, buf.len(), &mut len)
        };
        if status == sys::KESTREL_ERR_BUFFER_TOO_SMALL {
            // The delta waits for a bigger buffer; no text with this call.
            buf = vec![0u8; len + 1];
            status = unsafe {
                sys::kestrel_reply_parser_push(self.raw.as_ptr(), ptr::null(), 0, false, buf.as_mut_ptr() as *mut _,
                                               buf.len(), &mut len)
            };
        }
        check(status)?;
        let text = std::str::from_utf8(&buf[..len]).map_err(|_| Error::new(sys::KESTREL_ERR_INTERNAL, "a delta not UTF-8"))?;
        let delta = json::parse(text).ok_or_else(|| Error::new(sys::KESTREL_ERR_INTERNAL, "a delta not JSON"))?;
        let text_of = |v: Option<&Json>| v.and_then(Json::as_str).unwrap_or("").to_string();
        let tool_calls = delta
            .get("tool_calls")
            .map_or(&[][..], Json::as_array)
            .iter()
            .map(|c| {
                let f = c.get("function");
                ToolCall {
                    id: text_of(c.get("id")),
                    name: text_of(f.and_then(|f| f.get("name"))),
                    arguments: text_of(f.and_then(|f| f.get("arguments"))),
                }
            })
            .collect();
        Ok(ReplyDelta { content: text_of(delta.get("content")), reasoning: text_of(delta.get("reasoning_content")), tool_calls })
    }
}

impl Drop for ReplyParser {
    fn drop(&mut self) {
        // SAFETY: owned handle, freed once.
        unsafe { sys::kestrel_reply_parser_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for ReplyParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyParser").field("raw", &self.raw).finish()
    }
}

impl ChatReply {
    /// Sums a streamed reply's deltas.
    pub(crate) fn add(&mut self, d: ReplyDelta) {
        self.content.push_str(&d.content);
        self.reasoning.push_str(&d.reasoning);
        self.tool_calls.extend(d.tool_calls);
    }
}
