//! `Chat`: a conversation and how to render it into a prompt (`kestrel_chat_format`).

use std::ffi::CString;
use std::ptr;

use kestrel_sys as sys;

use crate::buffer::read_string;
use crate::error::Result;
use crate::model::Model;
use crate::json;
use crate::options::c_string;
use crate::reply::{ChatReply, ToolCall};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// "system", "user", "assistant", "tool", ...
    pub role: String,
    /// The text.
    pub content: String,
    /// An assistant message's tool calls (templates see their arguments as objects).
    pub tool_calls: Vec<ToolCall>,
    /// A tool message: the id of the call it answers.
    pub tool_call_id: Option<String>,
}

/// A conversation plus the template settings to render it with.
///
/// ```no_run
/// # fn main() -> Result<(), kestrel::Error> {
/// let model = kestrel::Model::load("model.gguf")?;
/// let chat = kestrel::Chat::new().system("Be brief.").user("Hi!");
/// let reply = model.chat(&chat, &kestrel::GenerateOptions::new().max_tokens(16))?;
/// # let _ = reply; Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chat {
    messages: Vec<Message>,
    template: Option<String>,
    tools_json: Option<String>,
    extra_context_json: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl Chat {
    /// An empty conversation rendered with the model's template (or the fallback).
    pub fn new() -> Chat {
        Chat::default()
    }

    /// Appends a message with any role (builder form).
    pub fn message(mut self, role: &str, content: &str) -> Self {
        self.push(role, content);
        self
    }
    /// Appends a system message.
    pub fn system(self, content: &str) -> Self {
        self.message("system", content)
    }
    /// Appends a user message.
    pub fn user(self, content: &str) -> Self {
        self.message("user", content)
    }
    /// Appends an assistant message.
    pub fn assistant(self, content: &str) -> Self {
        self.message("assistant", content)
    }
    /// Appends a message in place (e.g. the model's reply, to continue the conversation).
    pub fn push(&mut self, role: &str, content: &str) {
        self.messages.push(Message { role: role.to_string(), content: content.to_string(), tool_calls: Vec::new(), tool_call_id: None });
    }
    /// Appends the model's reply: its content and tool calls (reasoning is left out, as most
    /// templates drop earlier turns' reasoning).
    pub fn push_reply(&mut self, reply: &ChatReply) {
        self.push("assistant", &reply.content);
        self.messages.last_mut().unwrap().tool_calls = reply.tool_calls.clone();
    }
    /// Appends a tool's result for the call with id `call_id` (builder form).
    pub fn tool_result(mut self, call_id: &str, content: &str) -> Self {
        self.push("tool", content);
        self.messages.last_mut().unwrap().tool_call_id = Some(call_id.to_string());
        self
    }
    /// The messages so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// The template set with [`Chat::template`].
    pub fn template_source(&self) -> Option<&str> {
        self.template.as_deref()
    }
    /// The tools set with [`Chat::tools_json`].
    pub fn tools(&self) -> Option<&str> {
        self.tools_json.as_deref()
    }

    /// Renders with this Jinja template instead of the model's.
    pub fn template(mut self, source: &str) -> Self {
        self.template = Some(source.to_string());
        self
    }
    /// A JSON array of tools for the template's `tools` variable.
    pub fn tools_json(mut self, json: &str) -> Self {
        self.tools_json = Some(json.to_string());
        self
    }
    /// A JSON object of extra template variables (e.g. `{"enable_thinking": false}`).
    pub fn extra_context_json(mut self, json: &str) -> Self {
        self.extra_context_json = Some(json.to_string());
        self
    }
    /// The `bos_token` text (default: the model's).
    pub fn bos_token(mut self, text: &str) -> Self {
        self.bos_token = Some(text.to_string());
        self
    }
    /// The `eos_token` text (default: the model's).
    pub fn eos_token(mut self, text: &str) -> Self {
        self.eos_token = Some(text.to_string());
        self
    }

    /// The messages as the JSON array `kestrel_chat_format` takes.
    pub fn to_json(&self) -> String {
        let mut out = String::from("[");
        for (i, m) in self.messages.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str("{\"role\": ");
            push_json_string(&mut out, &m.role);
            out.push_str(", \"content\": ");
            push_json_string(&mut out, &m.content);
            if let Some(id) = &m.tool_call_id {
                out.push_str(", \"tool_call_id\": ");
                push_json_string(&mut out, id);
            }
            if !m.tool_calls.is_empty() {
                out.push_str(", \"tool_calls\": [");
                for (j, c) in m.tool_calls.iter().enumerate() {
                    out.push_str(if j > 0 { ", {\"id\": " } else { "{\"id\": " });
                    push_json_string(&mut out, &c.id);
                    out.push_str(", \"type\": \"function\", \"function\": {\"name\": ");
                    push_json_string(&mut out, &c.name);
                    out.push_str(", \"arguments\": ");
                    // As an object when it is JSON (templates iterate it), else as the text.
                    if json::parse(&c.arguments).is_some() {
                        out.push_str(&c.arguments);
                    } else {
                        push_json_string(&mut out, &c.arguments);
                    }
                    out.push_str("}}");
                }
                out.push(']');
            }
            out.push('}');
        }
        out.push(']');
        out
    }

    /// Renders the conversation into a prompt. `model` may be `None` when a template is set.
    pub fn render(&self, model: Option<&Model>, add_generation_prompt: bool) -> Result<String> {
        let messages = c_string(&self.to_json())?;
        let opt = |s: &Option<String>| -> Result<Option<CString>> { s.as_deref().map(c_string).transpose() };
        let template = opt(&self.template)?;
        let tools = opt(&self.tools_json)?;
        let extra = opt(&self.extra_context_json)?;
        let bos = opt(&self.bos_token)?;
        let eos = opt(&self.eos_token)?;
        let ptr_of = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |c| c.as_ptr());

        let mut o = std::mem::MaybeUninit::<sys::kestrel_chat_options>::uninit();
        // SAFETY: the init function fills every field; the strings outlive the calls.
        let o = unsafe {
            sys::kestrel_chat_options_init(o.as_mut_ptr());
            let mut o = o.assume_init();
            o.template_source = ptr_of(&template);
            o.tools_json = ptr_of(&tools);
            o.extra_context_json = ptr_of(&extra);
            o.bos_token = ptr_of(&bos);
            o.eos_token = ptr_of(&eos);
            o.add_generation_prompt = add_generation_prompt;
            o
        };
        let model_ptr = model.map_or(ptr::null(), |m| m.as_ptr());
        read_string(1024, |buf, cap, len| unsafe { sys::kestrel_chat_format(model_ptr, messages.as_ptr(), &o, buf, cap, len) })
    }
}

/// Appends `s` as a JSON string literal.
fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes() {
        let chat = Chat::new().user("a\"b\\c\nd\u{1}é");
        assert_eq!(chat.to_json(), "[{\"role\": \"user\", \"content\": \"a\\\"b\\\\c\\nd\\u0001é\"}]");
    }

    #[test]
    fn tool_calls_and_results() {
        let mut chat = Chat::new().user("w?");
        let call = ToolCall { id: "c1".into(), name: "f".into(), arguments: "{\"a\": 1}".into() };
        let bad = ToolCall { id: "c2".into(), name: "g".into(), arguments: "{oops".into() };
        chat.push_reply(&ChatReply {
            content: "x".into(),
            reasoning: "hidden".into(),
            tool_calls: vec![call, bad],
            finish: crate::FinishReason::Stop,
        });
        let chat = chat.tool_result("c1", "sunny");
        assert_eq!(
            chat.to_json(),
            "[{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": \
             [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}, \
             {\"id\": \"c2\", \"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": \"{oops\"}}]}, \
             {\"role\": \"tool\", \"content\": \"sunny\", \"tool_call_id\": \"c1\"}]"
        );
    }

    #[test]
    fn render_without_model() {
        let chat = Chat::new().user("Hi").template("{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
        assert_eq!(chat.render(None, false).unwrap(), "[user]Hi");
    }
}
