//! Chat templates and chat generation.

mod common;

use common::*;
use kestrel::{Chat, GenerateOptions, Status};

const TEMPLATE: &str = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}\
{% if add_generation_prompt %}[assistant]{% endif %}";

fn greedy(n: i32) -> GenerateOptions {
    GenerateOptions::new().max_tokens(n).temperature(0.0)
}

#[test]
fn renders_with_a_template() {
    let model = require!(stories());
    let chat = Chat::new().system("Be kind.").user("Hi \"there\"!").template(TEMPLATE);
    assert_eq!(chat.messages().len(), 2);
    assert_eq!(model.chat_template(&chat, true).unwrap(), "<s>[system] Be kind.\n[user] Hi \"there\"!\n[assistant]");
    assert_eq!(model.chat_template(&chat, false).unwrap(), "<s>[system] Be kind.\n[user] Hi \"there\"!\n");
    // Without a model, bos_token comes from the chat (or is undefined: "").
    assert_eq!(chat.clone().bos_token("<B>").render(None, false).unwrap(), "<B>[system] Be kind.\n[user] Hi \"there\"!\n");
    let extra = Chat::new().user("x").template("{{ greeting }} {{ messages[0].content }}").extra_context_json("{\"greeting\": \"hello\"}");
    assert_eq!(extra.render(None, false).unwrap(), "hello x");
}

#[test]
fn fallback_template_without_one_in_the_model() {
    let model = require!(stories());
    let chat = Chat::new().user("Hi!");
    assert_eq!(model.chat_template(&chat, true).unwrap(), "<|user|>\nHi!\n<|assistant|>\n");
}

#[test]
fn template_errors_name_the_place() {
    let model = require!(stories());
    let err = model.chat_template(&Chat::new().user("x").template("{% for %}"), true).unwrap_err();
    assert_eq!(err.status(), Status::Format, "{}", err);
    assert!(err.message().contains("chat template: line 1"), "{}", err);
    let raise = Chat::new().user("x").template("{{ raise_exception('System role not supported') }}");
    let err = model.chat_template(&raise, true).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{}", err);
    assert!(err.message().contains("System role not supported"), "{}", err);
    let err = Chat::new().user("x").tools_json("not json").template("x").render(None, true).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument, "{}", err);
}

#[test]
fn chat_generates_from_the_rendered_prompt() {
    let path = require!(stories_path());
    let model = require!(stories());
    let chat = Chat::new().user("Tell me a story about a cat.");
    let reply = model.chat(&chat, &greedy(24)).unwrap();
    assert!(!reply.is_empty());
    // The fallback prompt writes no BOS: tokenizing adds one, as `kestrel run --parse-special`.
    let rendered = model.chat_template(&chat, true).unwrap();
    let want = require!(cli_greedy_with(&path, &rendered, 24, &["--parse-special"]));
    assert_eq!(reply, want);
    let streamed: String = model.chat_stream(&chat, &greedy(24)).unwrap().map(|p| p.unwrap()).collect();
    assert_eq!(streamed, reply);
}

#[test]
fn a_template_writing_bos_keeps_one() {
    let model = require!(stories());
    let mut chat = Chat::new().user("Hi!").template(TEMPLATE);
    let tokens = model.chat_tokens(&chat).unwrap();
    assert_eq!(tokens[0], 1);
    assert_ne!(tokens[1], 1, "one BOS only");
    // Control text is parsed: "<s>" in the rendered prompt is the BOS token, not characters.
    assert!(!model.tokenize("<s>", false, false).unwrap().contains(&1));
    let reply = model.chat(&chat, &greedy(12)).unwrap();
    let same = model.stream_tokens(&tokens, &greedy(12)).unwrap().collect_text().unwrap();
    assert_eq!(reply, same);
    // Continue the conversation.
    chat.push("assistant", &reply);
    chat.push("user", "And then?");
    assert_eq!(chat.messages().len(), 3);
    assert!(model.chat_template(&chat, true).unwrap().contains("[assistant] "));
    assert!(model.chat(&chat, &greedy(8)).is_ok());
}
