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
