// The C API's contract: status codes plus messages for bad input, never a crash; options
// versioning; buffers; decode/logits/KV sequence operations.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "gguf/gguf.h"
#include "kestrel.h"

namespace {

std::string stories() { return kestrel::test::testdata_file("models/stories260K-f32.gguf"); }

std::string write_temp(const std::vector<uint8_t>& bytes, const char* name) {
  std::string path = std::string("/tmp/kestrel_api_") + name + ".gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

struct Loaded {
  kestrel_model* model = nullptr;
  kestrel_context* ctx = nullptr;
  explicit Loaded(uint32_t n_ctx = 64) {
    const std::string path = stories();
    if (path.empty()) return;
    REQUIRE(kestrel_model_load(path.c_str(), nullptr, &model) == KESTREL_OK);
    kestrel_context_options co;
    kestrel_context_options_init(&co);
    co.n_ctx = n_ctx;
    co.n_seq_max = 2;
    REQUIRE(kestrel_context_new(model, &co, &ctx) == KESTREL_OK);
  }
  ~Loaded() {
    kestrel_context_free(ctx);
    kestrel_model_free(model);
  }
};

}  // namespace

TEST_CASE("version and status names") {
  CHECK(kestrel_api_version() == KESTREL_API_VERSION);
  CHECK(std::string(kestrel_status_name(KESTREL_ERR_FORMAT)) == "ERR_FORMAT");
  CHECK(std::string(kestrel_status_name(static_cast<kestrel_status>(999))) == "ERR_UNKNOWN");
}

TEST_CASE("load errors carry a status and a message") {
  kestrel_model* m = reinterpret_cast<kestrel_model*>(0x1);
  CHECK(kestrel_model_load("/nonexistent/model.gguf", nullptr, &m) == KESTREL_ERR_IO);
  CHECK(m == nullptr);
  CHECK(std::string(kestrel_last_error()).find("/nonexistent/model.gguf") != std::string::npos);
  CHECK(kestrel_model_load(nullptr, nullptr, &m) == KESTREL_ERR_INVALID_ARGUMENT);

  const std::vector<uint8_t> junk = {'G', 'G', 'U', 'X', 3, 0, 0, 0};
  CHECK(kestrel_model_load(write_temp(junk, "junk").c_str(), nullptr, &m) == KESTREL_ERR_FORMAT);

  kestrel::gguf::Writer w;
  w.set("general.architecture", kestrel::gguf::Value::make_string("nonexistent-arch"));
  CHECK(kestrel_model_load(write_temp(w.to_bytes(), "arch").c_str(), nullptr, &m) == KESTREL_ERR_UNSUPPORTED);
  CHECK(std::string(kestrel_last_error()).find("nonexistent-arch") != std::string::npos);

  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.struct_size = 0;
  CHECK(kestrel_model_load("x.gguf", &mo, &m) == KESTREL_ERR_INVALID_ARGUMENT);
  kestrel_model_options_init(&mo);
  mo.backend = "no-such-backend";
  const std::string path = stories();
  if (!path.empty()) CHECK(kestrel_model_load(path.c_str(), &mo, &m) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("no-such-backend") != std::string::npos);
}

TEST_CASE("decode validates tokens, sequences and context size") {
  Loaded l(16);
  if (!l.ctx) return;
  const kestrel_token bad[] = {1, 600};
  kestrel_batch b{2, bad, nullptr, nullptr, nullptr};
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_ERR_OUT_OF_RANGE);
  CHECK(std::string(kestrel_last_error()).find("600") != std::string::npos);
  const kestrel_token neg[] = {-1};
  b = {1, neg, nullptr, nullptr, nullptr};
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_ERR_OUT_OF_RANGE);
  const kestrel_token ok[] = {1};
  const int32_t seq[] = {5};
  b = {1, ok, nullptr, seq, nullptr};
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_ERR_OUT_OF_RANGE);
  b = {0, ok, nullptr, nullptr, nullptr};
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_decode(l.ctx, nullptr) == KESTREL_ERR_INVALID_ARGUMENT);

  std::vector<kestrel_token> many(17, 300);
  b = {17, many.data(), nullptr, nullptr, nullptr};
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_ERR_CONTEXT_FULL);
  CHECK(kestrel_kv_seq_pos_max(l.ctx, 0) == -1);  // nothing cached after a rejected batch
  b = {16, many.data(), nullptr, nullptr, nullptr};
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_OK);
  b = {1, ok, nullptr, nullptr, nullptr};
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_ERR_CONTEXT_FULL);
  CHECK(kestrel_kv_seq_remove(l.ctx, 0, 8, -1) == KESTREL_OK);
  CHECK(kestrel_kv_seq_pos_max(l.ctx, 0) == 7);
  CHECK(kestrel_decode(l.ctx, &b) == KESTREL_OK);
  CHECK(kestrel_kv_seq_pos_max(l.ctx, 0) == 8);
}

TEST_CASE("logits: same result whether a prompt is decoded at once or token by token") {
  Loaded l(64);
  if (!l.ctx) return;
  const kestrel_token prompt[] = {1, 403, 407, 261, 378};
  kestrel_batch b{5, prompt, nullptr, nullptr, nullptr};
  REQUIRE(kestrel_decode(l.ctx, &b) == KESTREL_OK);
  const float* logits = nullptr;
  int32_t n_vocab = 0;
  REQUIRE(kestrel_get_logits(l.ctx, -1, &logits, &n_vocab) == KESTREL_OK);
  CHECK(n_vocab == 512);
  std::vector<float> all(logits, logits + n_vocab);
  CHECK(kestrel_get_logits(l.ctx, 0, &logits, &n_vocab) == KESTREL_ERR_INVALID_ARGUMENT);  // not requested
  CHECK(kestrel_get_logits(l.ctx, 7, &logits, &n_vocab) == KESTREL_ERR_OUT_OF_RANGE);

  // Sequence 1, one token at a time.
  for (int i = 0; i < 5; ++i) {
    const int32_t seq = 1;
    kestrel_batch one{1, &prompt[i], nullptr, &seq, nullptr};
    REQUIRE(kestrel_decode(l.ctx, &one) == KESTREL_OK);
  }
  REQUIRE(kestrel_get_logits(l.ctx, -1, &logits, &n_vocab) == KESTREL_OK);
  double diff = 0;
  for (int i = 0; i < n_vocab; ++i) diff = std::max(diff, std::fabs(double(logits[i]) - all[i]));
  CHECK(diff < 1e-3);
  CHECK(kestrel_kv_seq_pos_max(l.ctx, 1) == 4);
  CHECK(kestrel_kv_seq_keep(l.ctx, 1) == KESTREL_OK);
  CHECK(kestrel_kv_seq_pos_max(l.ctx, 0) == -1);
}

TEST_CASE("tokenize, detokenize and buffers") {
  Loaded l;
  if (!l.model) return;
  const char* text = "Once upon a time";
  kestrel_token ids[16];
  size_t n = 0;
  REQUIRE(kestrel_tokenize(l.model, text, 16, true, false, ids, 16, &n) == KESTREL_OK);
  REQUIRE(n == 5);
  const kestrel_token want[] = {1, 403, 407, 261, 378};
  for (int i = 0; i < 5; ++i) CHECK(ids[i] == want[i]);
  CHECK(kestrel_tokenize(l.model, text, 16, true, false, ids, 2, &n) == KESTREL_ERR_BUFFER_TOO_SMALL);
  CHECK(n == 5);
  char buf[64];
  size_t len = 0;
  REQUIRE(kestrel_detokenize(l.model, ids + 1, 4, false, buf, sizeof buf, &len) == KESTREL_OK);
  CHECK(std::string(buf, len) == "Once upon a time");
  CHECK(kestrel_detokenize(l.model, ids + 1, 4, false, buf, 3, &len) == KESTREL_ERR_BUFFER_TOO_SMALL);
  const kestrel_token bad[] = {9999};
  CHECK(kestrel_detokenize(l.model, bad, 1, false, buf, sizeof buf, &len) == KESTREL_ERR_OUT_OF_RANGE);
  CHECK(kestrel_model_describe(l.model, nullptr, 0, &len) == KESTREL_OK);
  CHECK(len > 100);
  // Pieces: the SentencePiece "▁" is a space; control tokens only when rendered.
  std::string joined;
  for (int i = 1; i < 5; ++i) {
    REQUIRE(kestrel_token_to_piece(l.model, ids[i], false, buf, sizeof buf, &len) == KESTREL_OK);
    joined.append(buf, len);
  }
  CHECK(joined == " Once upon a time");
  REQUIRE(kestrel_token_to_piece(l.model, 1, false, buf, sizeof buf, &len) == KESTREL_OK);
  CHECK(len == 0);
  REQUIRE(kestrel_token_to_piece(l.model, 1, true, buf, sizeof buf, &len) == KESTREL_OK);
  CHECK(std::string(buf, len) == "<s>");
  CHECK(kestrel_token_to_piece(l.model, 9999, true, buf, sizeof buf, &len) == KESTREL_ERR_OUT_OF_RANGE);
}

TEST_CASE("streaming detokenizer: a short buffer keeps the text pending; token -1 drains it") {
  Loaded l;
  if (!l.model) return;
  kestrel_detokenizer* d = nullptr;
  REQUIRE(kestrel_detokenizer_new(l.model, false, &d) == KESTREL_OK);
  char buf[64];
  size_t len = 0;
  const kestrel_token once = 403;  // " Once"
  REQUIRE(kestrel_detokenizer_push(d, once, nullptr, 0, &len) == KESTREL_OK);  // sizing only
  const size_t need = len;
  CHECK(need > 2);
  CHECK(kestrel_detokenizer_push(d, -1, buf, 2, &len) == KESTREL_ERR_BUFFER_TOO_SMALL);
  CHECK(len == need);
  REQUIRE(kestrel_detokenizer_push(d, -1, buf, sizeof buf, &len) == KESTREL_OK);
  CHECK(len == need);
  CHECK(std::string(buf, len).find("Once") != std::string::npos);
  REQUIRE(kestrel_detokenizer_push(d, -1, buf, sizeof buf, &len) == KESTREL_OK);
  CHECK(len == 0);  // drained
  kestrel_detokenizer_free(d);
}

TEST_CASE("sampler options are validated; a seed reproduces a run") {
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.top_p = -1.0f;
  kestrel_sampler* s = nullptr;
  CHECK(kestrel_sampler_new(&so, &s) == KESTREL_ERR_INVALID_ARGUMENT);
  Loaded l;
  if (!l.ctx) return;
  auto run = [&](uint64_t seed) {
    kestrel_sampler_options o;
    kestrel_sampler_options_init(&o);
    o.seed = seed;
    o.temperature = 1.0f;
    kestrel_generate_options go;
    kestrel_generate_options_init(&go);
    go.max_tokens = 24;
    go.sampling = &o;
    std::string out;
    go.user = &out;
    go.on_token = [](kestrel_token, const char* p, size_t n, void* u) {
      static_cast<std::string*>(u)->append(p, n);
      return true;
    };
    REQUIRE(kestrel_generate(l.ctx, "Once upon a time", &go, nullptr) == KESTREL_OK);
    return out;
  };
  const std::string a = run(42), b = run(42), c = run(43);
  CHECK(a == b);
  CHECK(a != c);
}

TEST_CASE("kestrel_generate: stop strings end the text before the first match") {
  Loaded l;
  if (!l.ctx) return;
  auto run = [&](std::vector<const char*> stops) {
    kestrel_sampler_options o;
    kestrel_sampler_options_init(&o);
    o.temperature = 0.0f;
    kestrel_generate_options go;
    kestrel_generate_options_init(&go);
    go.max_tokens = 48;
    go.sampling = &o;
    go.stop_strings = stops.data();
    go.n_stop_strings = static_cast<int32_t>(stops.size());
    std::vector<std::string> got;
    go.user = &got;
    go.on_token = [](kestrel_token, const char* p, size_t n, void* u) {
      static_cast<std::vector<std::string>*>(u)->emplace_back(p, n);
      return true;
    };
    REQUIRE(kestrel_generate(l.ctx, "Once upon a time", &go, nullptr) == KESTREL_OK);
    std::string out;
    for (const std::string& p : got) out += p;
    return out;
  };
  const std::string full = run({});
  REQUIRE(full.size() > 60);
  CHECK(run({"no such text"}) == full);  // held-back tails come out at the end
  // A stop string from the middle of the text: everything before its first occurrence.
  const std::string stop = full.substr(30, 7);
  CHECK(run({stop.c_str()}) == full.substr(0, full.find(stop)));
  CHECK(run({"zzz", stop.c_str()}) == full.substr(0, full.find(stop)));
  // A stop string whose first character appears early but which never completes: nothing is lost.
  const std::string near = full.substr(10, 3) + "#";
  CHECK(run({near.c_str()}) == full);
  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.n_stop_strings = 1;
  CHECK(kestrel_generate(l.ctx, "Once", &go, nullptr) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("stop_strings") != std::string::npos);
}

TEST_CASE("per-op profiling: totals by op kind, reset, buffer size") {
  Loaded l;
  if (!l.ctx) return;
  char buf[8192];
  size_t len = 0;
  REQUIRE(kestrel_context_profile(l.ctx, false, buf, sizeof buf, &len) == KESTREL_OK);
  CHECK(std::string(buf, len) == "[]");  // nothing recorded while profiling is off
  REQUIRE(kestrel_context_set_profiling(l.ctx, true) == KESTREL_OK);
  const kestrel_token toks[] = {1, 403, 407};
  kestrel_batch b{3, toks, nullptr, nullptr, nullptr};
  REQUIRE(kestrel_decode(l.ctx, &b) == KESTREL_OK);
  CHECK(kestrel_context_profile(l.ctx, false, buf, 4, &len) == KESTREL_ERR_BUFFER_TOO_SMALL);
  REQUIRE(kestrel_context_profile(l.ctx, true, buf, sizeof buf, &len) == KESTREL_OK);
  const std::string json(buf, len);
  CHECK(json.find("\"op\":\"matmul f32\"") != std::string::npos);
  CHECK(json.find("\"op\":\"attention\"") != std::string::npos);
  REQUIRE(kestrel_context_profile(l.ctx, false, buf, sizeof buf, &len) == KESTREL_OK);
  CHECK(std::string(buf, len) == "[]");  // reset
  CHECK(kestrel_context_set_profiling(nullptr, true) == KESTREL_ERR_INVALID_ARGUMENT);
}
