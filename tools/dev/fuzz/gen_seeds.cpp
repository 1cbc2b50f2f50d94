// Writes the seed corpus of every fuzz target, generated at CI time (nothing copied from test
// data): kestrel_fuzz_seeds <repo root> <corpus dir> fills <corpus dir>/<target>/.
//   fuzz_gguf             GGUF files from the library's writer: every metadata type, tensors of
//                         several types, a tokenizer vocabulary, a tiny random llama (synth.h)
//   fuzz_jinja            the template/context pairs of tests/chat/test_jinja.cpp (its R"J(...)J"
//                         strings), the fallback chat template and a few chat-template idioms
//   fuzz_tokenizer        text samples (ASCII, multi-byte UTF-8, invalid bytes, special tokens)
//                         for each vocabulary of fuzz_vocabs.h
//   fuzz_http_request     raw HTTP/1.x requests for the server's endpoints
//   fuzz_openai_request   JSON bodies for the OpenAI endpoints
//   fuzz_grammar          GBNF grammars and JSON Schemas, each with a text to match
//   fuzz_chat_reply       replies of several tool-call families
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "fuzz_vocabs.h"
#include "model/synth.h"

using namespace kestrel;

namespace {

std::string g_out;

void write_seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string dir = g_out + "/" + target;
  mkdir(g_out.c_str(), 0755);
  mkdir(dir.c_str(), 0755);
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

std::string bytes_of(const gguf::Writer& w) {
  const std::vector<uint8_t> b = w.to_bytes();
  return std::string(b.begin(), b.end());
}

void gguf_seeds() {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::make_string("llama"));
  w.set("general.name", gguf::Value::make_string("fuzz seed"));
  w.set("seed.u32", gguf::Value::make_u32(7));
  w.set("seed.i32", gguf::Value::make_i32(-7));
  w.set("seed.u64", gguf::Value::make_u64(1ull << 40));
  w.set("seed.f32", gguf::Value::make_f32(0.5f));
  w.set("seed.bool", gguf::Value::make_bool(true));
  w.set("seed.strings", gguf::Value::make_string_array({"a", "bc", ""}));
  w.set("seed.floats", gguf::Value::make_f32_array({1, 2, 3}));
  w.set("seed.ints", gguf::Value::make_i32_array({-1, 0, 1}));
  const std::vector<float> f32(64, 0.25f);
  (void)w.add_tensor("t.f32", DType::F32, {8, 8}, f32.data(), f32.size() * sizeof(float));
  const std::vector<uint8_t> q(18 * 2, 0x11);  // two Q4_0 blocks of 32
  (void)w.add_tensor("t.q4_0", DType::Q4_0, {64}, q.data(), q.size());
  write_seed("fuzz_gguf", "metadata_and_tensors.gguf", bytes_of(w));
  write_seed("fuzz_gguf", "empty.gguf", bytes_of(gguf::Writer()));
  write_seed("fuzz_gguf", "vocab_bpe.gguf", bytes_of(fuzz::byte_level_bpe_vocab()));
  write_seed("fuzz_gguf", "vocab_spm.gguf", bytes_of(fuzz::spm_vocab(false)));
  if (const ArchDef* arch = find_arch("llama"); arch && !arch->tiny.empty()) {
    SynthOptions o;
    o.weight_type = DType::Q4_0;  // ~40 KB: within the target's -max_len
    o.n_vocab = 32;
    if (auto m = synth_model(*arch, arch->tiny[0], o); m.ok()) write_seed("fuzz_gguf", "tiny_llama.gguf", bytes_of(*m));
  }
}

// The R"J(...)J" literals of a test source, in order.
std::vector<std::string> raw_strings(const std::string& src) {
  std::vector<std::string> out;
  for (size_t pos = 0; (pos = src.find("R\"J(", pos)) != std::string::npos;) {
    const size_t end = src.find(")J\"", pos + 4);
    if (end == std::string::npos) break;
    out.push_back(src.substr(pos + 4, end - pos - 4));
    pos = end + 3;
  }
  return out;
}

void jinja_seeds(const std::string& root) {
  std::ifstream in(root + "/tests/chat/test_jinja.cpp", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  // Cases are {name, R"J(template)J", R"J(context)J", R"J(expected or message)J"}.
  const std::vector<std::string> lits = raw_strings(ss.str());
  int n = 0;
  for (size_t k = 0; k + 2 < lits.size(); k += 3) write_seed("fuzz_jinja", "case_" + std::to_string(n++), lits[k] + '\0' + lits[k + 1]);
  const std::string chat = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi ✓"},
    {"role": "assistant", "content": "Hello", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "content": "42"}])";
  write_seed("fuzz_jinja", "fallback", std::string(ChatTemplate::fallback_source()) + '\0' + chat);
  const char* idioms[] = {
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}[INST] {{ m.content | trim }} [/INST]"
      "{% elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}{% endif %}{% endfor %}",
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "{% set ns = namespace(sys='') %}{% for m in messages %}{% if m.role == 'system' %}{% set ns.sys = m.content %}"
      "{% endif %}{% endfor %}{{ ns.sys }}{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}",
      "{% macro render(x) %}{% if x is mapping %}{% for k, v in x.items() %}{{ k }}={{ render(v) }};{% endfor %}"
      "{% else %}{{ x }}{% endif %}{% endmacro %}{% for m in messages %}{{ render(m) }}{% endfor %}",
      "{{ '%-10s|%5.2f|%x'|format('a', 3.14159, 255) }}{{ '{:>8}{:^5}'.format('r', 'c') }}{{ 'x'.center(9, '*') }}",
      "{% for m in messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list %}{{ loop.index }}"
      "{{ m|wordwrap(4)|indent(2, true) }}{% endfor %}{{ strftime_now('%Y-%m-%d') }}{{ raise_exception('x') if false }}",
  };
  const std::string ctx = "{\"messages\": " + chat + ", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\"}}], "
                          "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";
  for (size_t k = 0; k < sizeof idioms / sizeof *idioms; ++k) write_seed("fuzz_jinja", "idiom_" + std::to_string(k), idioms[k] + ('\0' + ctx));
}

void tokenizer_seeds() {
  const char* texts[] = {"Hello world", "the thing in the ring", " leading and  double  spaces ", "tabs\tand\nnewlines\r\n",
                         "café é ü ß", "日本語のテキスト", "emoji 😀👍🏽 mixed", "\xe2\x96\x81marker\xe2\x96\x81inside",
                         "invalid \xff\xfe bytes \xc3", "<|endoftext|> and <tool> tokens", "1234567890 !?.,;:",
                         "ab ab aab abb", "\x00\x01 control"};
  int n = 0;
  for (int selector : {0, 1, 2, 4, 5, 6})
    for (const char* t : texts) write_seed("fuzz_tokenizer", "text_" + std::to_string(n++), std::string(1, static_cast<char>(selector)) + t);
}

void server_seeds() {
  const char* bodies[] = {
      R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0.7})",
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]}], "stream": true, "stream_options": {"include_usage": true}})",
      R"({"messages": [{"role": "user", "content": "weather?"}], "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}], "tool_choice": "auto"})",
      R"({"model": "m", "prompt": "Once upon a time", "max_tokens": 16, "stop": ["\n", "."], "seed": 42, "logit_bias": {"5": -100}})",
      R"({"prompt": ["a", "b"], "n": 1, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": 0.5})",
      R"({"content": "tokenize this", "add_special": true, "with_pieces": true})",
      R"({"tokens": [1, 2, 3]})",
      R"({"model": "m", "max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}], "system": "Be brief."})",
      R"({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "2"}]}], "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "any"}, "stop_sequences": ["x"], "thinking": {"type": "enabled", "budget_tokens": 1024}})",
      R"({"model": "m", "input": ["a", "b"], "encoding_format": "base64", "dimensions": 8})",
      R"({"input": [[1, 2, 3], [4]]})",
      R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 3, "n": 2, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f"}}]})",
  };
  int n = 0;
  for (const char* b : bodies) write_seed("fuzz_openai_request", "body_" + std::to_string(n++), b);
  const char* paths[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/tokenize", "/detokenize"};
  n = 0;
  for (const char* p : paths) {
    const std::string body = bodies[n % (sizeof bodies / sizeof *bodies)];
    write_seed("fuzz_http_request", "post_" + std::to_string(n++),
               std::string("POST ") + p + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " +
                   std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  write_seed("fuzz_http_request", "get_health", "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n");
  write_seed("fuzz_http_request", "get_models_http10", "GET /v1/models HTTP/1.0\r\n\r\n");
  write_seed("fuzz_http_request", "chunked",
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"pro\r\n0\r\n\r\n");
  write_seed("fuzz_http_request", "pipelined",
             "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

void grammar_seeds() {
  const char* gbnf[] = {
      "root ::= \"{\" ws pair (\",\" ws pair)* \"}\"\npair ::= [a-z]+ ws \":\" ws (\"true\" | \"false\")\nws ::= [ \\t\\n]{0,8}",
      "root ::= ( \"ab\" | [c-e]+ ){1,3} \"x\"? [^\\u00e9-\\u00ff] .",
      "root ::= x{3,40}\nx ::= \"\\x41\" | [\\u0800-\\U0010FFFF]",
      "root ::= [a-z ]{2,9} \"!\" ([a-z]{1,3} \" \"?){0,2}",  // counts near their ends, multi-byte tokens
  };
  const char* texts[] = {"{a: true, bb: false}", "abcdex!", "AAA\xe0\xa0\x80" "A", " the ing!the in"};
  for (int k = 0; k < 4; ++k) write_seed("fuzz_grammar", "gbnf_" + std::to_string(k), std::string(1, '\0') + gbnf[k] + '\0' + texts[k]);
  const char* schemas[] = {
      R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": 40}, "b": {"type": "array", "items": {"enum": [1, "x"]}, "maxItems": 3}}, "required": ["a"], "additionalProperties": false})",
      R"({"$defs": {"n": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}]}}, "$ref": "#/$defs/n"})",
      R"({"type": ["integer", "boolean"], "minimum": 0})",
  };
  const char* values[] = {R"({"a": "hello", "b": [1, "x"]})", R"({"next": {"next": null}})", "42"};
  for (int k = 0; k < 3; ++k) write_seed("fuzz_grammar", "schema_" + std::to_string(k), std::string(1, '\1') + schemas[k] + '\0' + values[k]);
}

// Replies of several families: the first byte picks the family (chat_syntaxes() order).
void chat_reply_seeds() {
  const char* replies[] = {
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",  // harmony row: content
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|>",
      "ok<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": [1]}\n```<｜tool▁call▁end｜>",
      "<｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜>",
      "<think>x</think><tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
      "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>b</arg_value>\n</tool_call>",
  };
  for (int k = 0; k < 6; ++k)
    write_seed("fuzz_chat_reply", "reply_" + std::to_string(k), std::string(1, static_cast<char>(k)) + replies[k]);
  write_seed("fuzz_chat_reply", "harmony",
             std::string(1, '\0') + "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary "
             "to=functions.f <|constrain|>json<|message|>{}<|call|>");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <repo root> <corpus dir>\n", argv[0]);
    return 2;
  }
  g_out = argv[2];
  gguf_seeds();
  jinja_seeds(argv[1]);
  tokenizer_seeds();
  server_seeds();
  grammar_seeds();
  chat_reply_seeds();
  return 0;
}
