//! Tool calling and constrained decoding: whatever the stories model would have said, a forced
//! tool choice gives calls valid under the tool's schema, and a JSON Schema gives valid JSON.

mod common;

use common::*;
use kestrel::{Chat, ChatReply, FinishReason, GenerateOptions, ReplyParser, Status, ToolChoice};

// Hermes/Qwen's syntax: calls in <tool_call> tags, reasoning in <think> (dropped from history).
const TEMPLATE: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.split('</think>')[-1] }}{% if m.reasoning_content %}<think>{% endif %}\
{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}<|im_end|>\n{% endfor %}\
{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
const TOOLS: &str = r#"[{"type": "function", "function": {"name": "count_sheep", "parameters": {"type": "object",
  "properties": {"n": {"type": "integer", "minimum": 1}, "color": {"enum": ["white", "black"]}},
  "required": ["n", "color"]}}}]"#;

fn sampled(seed: u64) -> GenerateOptions {
    GenerateOptions::new().max_tokens(300).temperature(1.0).seed(seed)
}

// The arguments as the schema asks: {"n": integer >= 1, "color": "white"|"black"}, nothing else.
fn valid_args(args: &str) -> bool {
    let a = args.replace(' ', "");
    let n_ok = a.split("\"n\":").nth(1).map_or(false, |rest| {
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        !digits.is_empty() && digits.parse::<u64>().map_or(true, |n| n >= 1)
    });
    let color_ok = a.contains("\"color\":\"white\"") || a.contains("\"color\":\"black\"");
    n_ok && color_ok && a.matches(':').count() == 2 && a.starts_with('{') && a.ends_with('}')
}

#[test]
fn a_forced_choice_gives_calls_valid_under_the_schema() {
    let model = require!(stories());
    let chat = Chat::new().user("How many sheep?").template(TEMPLATE).tools_json(TOOLS);
    for choice in [ToolChoice::Required, ToolChoice::Function("count_sheep".into())] {
        for seed in 1..4 {
            let reply = model.chat_reply(&chat, &choice, &sampled(seed)).unwrap();
            assert!(!reply.tool_calls.is_empty(), "{:?} {}: {:?}", choice, seed, reply);
            for c in &reply.tool_calls {
                assert_eq!(c.name, "count_sheep");
                assert!(c.id.starts_with("call_") && c.id.len() == 29, "{}", c.id);
                assert!(valid_args(&c.arguments), "{}", c.arguments);
            }
            // Up to 4 calls: the last may run out of tokens (and stay content).
            assert!(matches!(reply.finish, FinishReason::Stop | FinishReason::Length), "{:?}", reply);
            // The conversation goes on with the calls and a result.
            let next = {
                let mut c = chat.clone();
                // (One call, no content: the stories model's context holds 512 tokens.)
                c.push_reply(&ChatReply { content: String::new(), tool_calls: reply.tool_calls[..1].to_vec(), ..reply.clone() });
                c.tool_result(&reply.tool_calls[0].id, "12 sheep")
            };
            let rendered = model.chat_template(&next, true).unwrap();
            assert!(rendered.contains("<tool_call>{\"name\": \"count_sheep\""), "{}", rendered);
            let after = model.chat_reply(&next, &ToolChoice::Auto, &sampled(seed).max_tokens(8));
            assert!(after.is_ok(), "{:?}", after);
        }
    }
    // Auto and None: the stories model writes prose, which stays content.
    for choice in [ToolChoice::Auto, ToolChoice::None] {
        let reply = model.chat_reply(&chat, &choice, &sampled(5).max_tokens(16)).unwrap();
        assert!(reply.tool_calls.is_empty());
        assert!(!reply.content.is_empty());
    }
}

#[test]
fn a_parser_splits_streamed_text() {
    let chat = Chat::new().template(TEMPLATE).tools_json(TOOLS);
    let mut p = ReplyParser::new(None, &chat, "<|im_start|>assistant\n", &ToolChoice::Auto, true).unwrap();
    assert_eq!(p.grammar().unwrap(), "");
    let text = "<think>sheep?</think>Counting. <tool_call>{\"name\": \"count_sheep\", \"arguments\": {\"n\": 3, \"color\": \"black\"}}</tool_call>";
    let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    let chars: Vec<char> = text.chars().collect();
    for piece in chars.chunks(3) {
        let d = p.push(&piece.iter().collect::<String>(), false).unwrap();
        content += &d.content;
        reasoning += &d.reasoning;
        calls.extend(d.tool_calls);
    }
    let d = p.push("", true).unwrap();
    content += &d.content;
    calls.extend(d.tool_calls);
    assert_eq!(reasoning, "sheep?");
    assert_eq!(content.trim(), "Counting.");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].arguments, "{\"n\":3,\"color\":\"black\"}");
    let forced = ReplyParser::new(None, &chat, "", &ToolChoice::Required, true).unwrap();
    assert!(forced.grammar().unwrap().contains("root ::="));
    let err = ReplyParser::new(None, &chat, "", &ToolChoice::Function("nope".into()), true).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{}", err);
}

#[test]
fn a_json_schema_gives_valid_json() {
    let model = require!(stories());
    let schema = r#"{"type": "object", "properties": {"mood": {"enum": ["happy", "sad"]}}, "required": ["mood"],
      "additionalProperties": false}"#;
    for seed in 1..4 {
        let text = model.generate("Once upon a time", &sampled(seed).json_schema(schema)).unwrap();
        let compact = text.replace([' ', '\n', '\t'], "");
        assert!(compact == "{\"mood\":\"happy\"}" || compact == "{\"mood\":\"sad\"}", "{}", text);
    }
    let text = model.generate("Once", &sampled(1).grammar("root ::= \"yes\" | \"no\"")).unwrap();
    assert!(text == "yes" || text == "no", "{}", text);
    let err = model.generate("Once", &sampled(1).json_schema(r#"{"type": "string", "pattern": "a+"}"#)).unwrap_err();
    assert_eq!(err.status(), Status::Unsupported, "{}", err);
}
