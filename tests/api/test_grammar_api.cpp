// Constrained decoding through the C API (kestrel_generate_options / kestrel_request: grammar,
// json_schema): whatever the model would have said, the text is JSON valid under the schema and
// ends where the schema's value ends; greedy decoding with n-gram speculation gives the same text
// as without (drafts are checked against the grammar); bad grammars and schemas fail the call
// with a message naming the problem.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "kestrel.h"

namespace {

const char* kSchema = R"({"type": "object", "properties": {
  "mood": {"enum": ["happy", "sad"]},
  "count": {"type": "integer", "minimum": 0},
  "friends": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2}},
  "required": ["mood", "count", "friends"], "additionalProperties": false})";

// The schema's constraints, checked on the parsed reply.
void check_valid(const std::string& text) {
  CAPTURE(text);
  const nlohmann::json j = nlohmann::json::parse(text);  // throws (fails the test) if not JSON
  REQUIRE(j.is_object());
  CHECK(j.size() == 3);
  CHECK((j["mood"] == "happy" || j["mood"] == "sad"));
  CHECK((j["count"].is_number_integer() && j["count"].get<int64_t>() >= 0));
  REQUIRE(j["friends"].is_array());
  CHECK(j["friends"].size() <= 2);
  for (const auto& f : j["friends"]) {
    REQUIRE(f.is_string());
    size_t cps = 0;
    for (const char c : f.get<std::string>()) cps += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    CHECK(cps <= 8);
  }
}

struct Stories {
  kestrel_model* model = nullptr;
  kestrel_context* ctx = nullptr;
  Stories() {
    const std::string path = kestrel::test::testdata_file("models/stories260K-f32.gguf");
    if (path.empty()) return;
    REQUIRE(kestrel_model_load(path.c_str(), nullptr, &model) == KESTREL_OK);
    kestrel_context_options co;
    kestrel_context_options_init(&co);
    co.n_ctx = 512;
    REQUIRE(kestrel_context_new(model, &co, &ctx) == KESTREL_OK);
  }
  ~Stories() {
    kestrel_context_free(ctx);
    kestrel_model_free(model);
  }
};

struct Out {
  std::string text;
  int32_t n = 0;
  kestrel_status st = KESTREL_OK;
};

Out generate(kestrel_context* ctx, float temperature, uint64_t seed, const char* grammar, const char* schema,
             const kestrel_spec_options* spec = nullptr) {
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = temperature;
  so.seed = seed;
  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = 480;
  go.sampling = &so;
  go.grammar = grammar;
  go.json_schema = schema;
  go.speculative = spec;
  Out o;
  go.user = &o.text;
  go.on_token = [](kestrel_token, const char* p, size_t n, void* u) {
    static_cast<std::string*>(u)->append(p, n);
    return true;
  };
  o.st = kestrel_generate(ctx, "Once upon a time", &go, &o.n);
  return o;
}

}  // namespace

TEST_CASE("kestrel_generate with a JSON schema: the reply is valid JSON under it, and ends there") {
  Stories s;
  if (!s.ctx) return;
  for (const auto& [temp, seed] : std::vector<std::pair<float, uint64_t>>{{0.0f, 0}, {0.8f, 1}, {1.2f, 2}, {1.5f, 3}}) {
    CAPTURE(temp);
    const Out o = generate(s.ctx, temp, seed, nullptr, kSchema);
    REQUIRE(o.st == KESTREL_OK);
    CHECK(o.n < 480);  // ended by the end-of-generation token the grammar allowed
    check_valid(o.text);
  }
  // A GBNF grammar directly.
  const Out g = generate(s.ctx, 0.9f, 4, "root ::= \"The \" ( \"cat\" | \"dog\" ) \" ran \" [0-9]{1,3} \" times.\"", nullptr);
  REQUIRE(g.st == KESTREL_OK);
  CAPTURE(g.text);
  CHECK((g.text.rfind("The cat ran ", 0) == 0 || g.text.rfind("The dog ran ", 0) == 0));
  CHECK(g.text.size() >= 20);
  CHECK(g.text.substr(g.text.size() - 7) == " times.");
}

TEST_CASE("kestrel_generate with a grammar: n-gram speculation gives the same greedy text") {
  Stories s;
  if (!s.ctx) return;
  const Out plain = generate(s.ctx, 0.0f, 0, nullptr, kSchema);
  kestrel_spec_options spec;
  kestrel_spec_options_init(&spec);
  spec.mode = KESTREL_SPEC_NGRAM;
  const Out fast = generate(s.ctx, 0.0f, 0, nullptr, kSchema, &spec);
  REQUIRE(plain.st == KESTREL_OK);
  REQUIRE(fast.st == KESTREL_OK);
  CHECK(fast.text == plain.text);
}

TEST_CASE("kestrel_submit with a JSON schema, beside unconstrained requests") {
  Stories s;
  if (!s.model) return;
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.n_ctx = 2048;
  kestrel_engine* e = nullptr;
  REQUIRE(kestrel_engine_new(s.model, &eo, &e) == KESTREL_OK);
  const std::vector<kestrel_token> prompt = {1, 400, 30, 200};
  std::vector<std::string> texts(3);
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < texts.size(); ++i) {
    kestrel_sampler_options so;
    kestrel_sampler_options_init(&so);
    so.seed = i;
    kestrel_request r;
    kestrel_request_init(&r);
    r.prompt = prompt.data();
    r.n_prompt = static_cast<int32_t>(prompt.size());
    r.max_tokens = 480;
    r.sampling = &so;
    r.json_schema = i == 1 ? nullptr : kSchema;
    r.user = &texts[i];
    r.on_token = [](kestrel_token, const char* p, size_t n, void* u) {
      static_cast<std::string*>(u)->append(p, n);
      return true;
    };
    uint64_t id = 0;
    REQUIRE(kestrel_submit(e, &r, &id) == KESTREL_OK);
    ids.push_back(id);
  }
  for (uint64_t id : ids) CHECK(kestrel_wait(e, id, nullptr) == KESTREL_OK);
  check_valid(texts[0]);
  check_valid(texts[2]);
  kestrel_request bad;
  kestrel_request_init(&bad);
  bad.prompt = prompt.data();
  bad.n_prompt = 1;
  bad.json_schema = R"({"type": "string", "pattern": "^a+$"})";
  uint64_t id = 0;
  CHECK(kestrel_submit(e, &bad, &id) == KESTREL_ERR_UNSUPPORTED);
  CHECK(std::string(kestrel_last_error()).find("'pattern'") != std::string::npos);
  kestrel_engine_free(e);
}

TEST_CASE("kestrel_generate: bad grammars and schemas fail the call by name") {
  Stories s;
  if (!s.ctx) return;
  Out o = generate(s.ctx, 0.0f, 0, "root ::= foo", nullptr);
  CHECK(o.st == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("undefined rule 'foo'") != std::string::npos);
  o = generate(s.ctx, 0.0f, 0, nullptr, R"({"type": "object", "properties": {"a": {"type": "integer", "maximum": 3}}})");
  CHECK(o.st == KESTREL_ERR_UNSUPPORTED);
  CHECK(std::string(kestrel_last_error()).find("'maximum'") != std::string::npos);
  o = generate(s.ctx, 0.0f, 0, "root ::= \"a\"", kSchema);
  CHECK(o.st == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("both set") != std::string::npos);
  CHECK(o.text.empty());
}

namespace {
// A hand-written decode loop (as `kestrel chat` runs): decode, sample under the sampler's grammar,
// detokenize; stops at end-of-generation or after max tokens. Returns the text.
std::string loop(Stories& s, kestrel_sampler* sampler, kestrel_detokenizer* d, const std::string& prompt, int max) {
  std::vector<kestrel_token> toks(prompt.size() + 8);
  size_t n = 0;
  REQUIRE(kestrel_tokenize(s.model, prompt.data(), prompt.size(), true, true, toks.data(), toks.size(), &n) == KESTREL_OK);
  toks.resize(n);
  kestrel_kv_clear(s.ctx);
  std::string text;
  char buf[256];
  size_t len = 0;
  for (int i = 0; i < max; ++i) {
    kestrel_batch b{};
    b.n_tokens = static_cast<int32_t>(toks.size());
    b.tokens = toks.data();
    REQUIRE(kestrel_decode(s.ctx, &b) == KESTREL_OK);
    const float* logits = nullptr;
    int32_t n_vocab = 0;
    REQUIRE(kestrel_get_logits(s.ctx, -1, &logits, &n_vocab) == KESTREL_OK);
    kestrel_token t = -1;
    REQUIRE_MESSAGE(kestrel_sampler_sample(sampler, logits, n_vocab, &t) == KESTREL_OK, kestrel_last_error());
    if (kestrel_model_token_is_eog(s.model, t)) break;
    REQUIRE(kestrel_detokenizer_push(d, t, buf, sizeof buf, &len) == KESTREL_OK);
    text.append(buf, len);
    toks.assign(1, t);
  }
  REQUIRE(kestrel_detokenizer_flush(d, buf, sizeof buf, &len) == KESTREL_OK);
  return text + std::string(buf, len);
}
}  // namespace

TEST_CASE("a hand-written loop: kestrel_sampler_set_grammar keeps the sampler to a schema, then lets go") {
  Stories s;
  if (!s.model) return;
  for (uint64_t seed : {1u, 2u, 3u}) {
    CAPTURE(seed);
    kestrel_sampler_options so;
    kestrel_sampler_options_init(&so);
    so.temperature = 1.0f;
    so.seed = seed;
    kestrel_sampler* sampler = nullptr;
    REQUIRE(kestrel_sampler_new(&so, &sampler) == KESTREL_OK);
    kestrel_detokenizer* d = nullptr;
    REQUIRE(kestrel_detokenizer_new(s.model, false, &d) == KESTREL_OK);
    REQUIRE_MESSAGE(kestrel_sampler_set_grammar(sampler, s.model, nullptr, kSchema, nullptr) == KESTREL_OK,
                    kestrel_last_error());
    check_valid(loop(s, sampler, d, "Once upon a time", 200));
    // Removed: the same sampler samples freely (the stories model writes prose, not JSON).
    REQUIRE(kestrel_sampler_set_grammar(sampler, s.model, nullptr, nullptr, nullptr) == KESTREL_OK);
    const std::string free_text = loop(s, sampler, d, "Once upon a time", 24);
    CHECK_FALSE(nlohmann::json::accept(free_text));
    kestrel_detokenizer_free(d);
    kestrel_sampler_free(sampler);
  }
}

TEST_CASE("a hand-written loop with a reply parser forcing a call: the text parses into a valid tool call") {
  Stories s;
  if (!s.model) return;
  const char* tmpl = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                     "{% if tools %}<tools>{{ tools | tojson }}</tools>{% endif %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
  const char* tools = R"([{"type": "function", "function": {"name": "count_sheep", "parameters": {"type": "object",
    "properties": {"n": {"type": "integer", "minimum": 1}, "color": {"enum": ["white", "black"]}},
    "required": ["n", "color"]}}}])";
  kestrel_chat_options co;
  kestrel_chat_options_init(&co);
  co.template_source = tmpl;
  co.tools_json = tools;
  const std::string prompt = "<|im_start|>user\nHow many sheep?<|im_end|>\n<|im_start|>assistant\n";
  for (const char* choice : {"required", "count_sheep"}) {
    CAPTURE(choice);
    kestrel_reply_parser* p = nullptr;
    REQUIRE(kestrel_reply_parser_new(s.model, &co, prompt.c_str(), choice, 0, &p) == KESTREL_OK);
    kestrel_sampler_options so;
    kestrel_sampler_options_init(&so);
    so.temperature = 1.0f;
    so.seed = 7;
    kestrel_sampler* sampler = nullptr;
    REQUIRE(kestrel_sampler_new(&so, &sampler) == KESTREL_OK);
    kestrel_detokenizer* d = nullptr;
    REQUIRE(kestrel_detokenizer_new(s.model, false, &d) == KESTREL_OK);
    REQUIRE(kestrel_reply_parser_show_markers(p, d) == KESTREL_OK);
    REQUIRE_MESSAGE(kestrel_sampler_set_grammar(sampler, s.model, nullptr, nullptr, p) == KESTREL_OK, kestrel_last_error());
    const std::string text = loop(s, sampler, d, prompt, 300);
    CAPTURE(text);
    char buf[4096];
    size_t len = 0;
    REQUIRE(kestrel_reply_parser_push(p, text.data(), text.size(), true, buf, sizeof buf, &len) == KESTREL_OK);
    const nlohmann::json delta = nlohmann::json::parse(std::string(buf, len));
    REQUIRE(delta.contains("tool_calls"));
    REQUIRE(delta["tool_calls"].size() == 1);
    CHECK(delta["tool_calls"][0]["function"]["name"] == "count_sheep");
    const auto args = nlohmann::json::parse(delta["tool_calls"][0]["function"]["arguments"].get<std::string>());
    CHECK((args["n"].is_number_integer() && args["n"].get<int64_t>() >= 1));
    CHECK((args["color"] == "white" || args["color"] == "black"));
    kestrel_detokenizer_free(d);
    kestrel_sampler_free(sampler);
    kestrel_reply_parser_free(p);
  }
}
