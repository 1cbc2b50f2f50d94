// Text leaving the library is valid UTF-8: the streaming detokenizer holds a sequence that can
// still complete, replaces each maximal invalid subpart with one U+FFFD at once (the WHATWG /
// Unicode practice), and replaces an incomplete tail at flush; whole-sequence detokenization
// gives the same text. Checked against this file's own decoder (arithmetic on code point ranges,
// not the library's tables) on known cases, random byte sequences streamed as byte tokens or cut
// into random chunks, and end to end through the engine and kestrel_generate, whose pieces must
// all be valid.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "gguf/gguf.h"
#include "kestrel.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::string kFFFD = "\xef\xbf\xbd";

// Bytes a lead byte announces (0: it cannot start a sequence).
int announced(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}

// Whether s[i, i + m) can begin (or be) a valid sequence: the code points its completions can
// reach form an interval; it must meet the valid ones for its length (no overlong, no surrogate,
// nothing above U+10FFFF).
bool viable(const std::string& s, size_t i, int m) {
  const int n = announced(static_cast<uint8_t>(s[i]));
  if (n < 2 || m > n) return false;
  uint32_t lo = static_cast<uint8_t>(s[i]) & (0x7F >> n), hi = lo;
  for (int k = 1; k < n; ++k) {
    if (k < m && (static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
    const uint32_t lo_bits = k < m ? static_cast<uint8_t>(s[i + k]) & 0x3F : 0x00;
    const uint32_t hi_bits = k < m ? static_cast<uint8_t>(s[i + k]) & 0x3F : 0x3F;
    lo = lo << 6 | lo_bits;
    hi = hi << 6 | hi_bits;
  }
  const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
  const uint32_t a = std::max(lo, min_cp[n]), b = std::min<uint32_t>(hi, 0x10FFFF);
  return a <= b && !(a >= 0xD800 && b <= 0xDFFF);
}

// The reference: every maximal invalid subpart (and an incomplete tail) becomes one U+FFFD.
std::string reference(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const int n = announced(static_cast<uint8_t>(s[i]));
    if (n <= 1) {
      out += n == 1 ? std::string(1, s[i]) : kFFFD;
      ++i;
      continue;
    }
    int m = 0;
    while (m < n && i + m + 1 <= s.size() && viable(s, i, m + 1)) ++m;
    if (m == n) {
      out.append(s, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    } else {
      out += kFFFD;
      i += static_cast<size_t>(std::max(m, 1));
    }
  }
  return out;
}

bool valid(const std::string& s) { return reference(s) == s; }

std::string hex(const std::string& s) {
  static const char* d = "0123456789ABCDEF";
  std::string h;
  for (unsigned char c : s) h += std::string(h.empty() ? "" : " ") + d[c >> 4] + d[c & 15];
  return h;
}

// A vocabulary-only model and its byte tokens <0x00>..<0xFF>.
struct Vocab {
  kestrel_model* model = nullptr;
  std::vector<kestrel_token> byte_token = std::vector<kestrel_token>(256, -1);
  explicit Vocab(const std::string& rel) {
    const std::string path = kestrel::test::testdata_file(rel);
    if (path.empty()) return;
    kestrel_model_options mo;
    kestrel_model_options_init(&mo);
    mo.vocab_only = true;
    REQUIRE(kestrel_model_load(path.c_str(), &mo, &model) == KESTREL_OK);
    auto f = kestrel::gguf::File::open(path, true);
    REQUIRE(f.ok());
    auto tok = kestrel::Tokenizer::from_gguf(*f.value());
    REQUIRE(tok.ok());
    char name[8];
    for (int b = 0; b < 256; ++b) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_token[static_cast<size_t>(b)] = tok.value()->vocab().find(name);
      REQUIRE_MESSAGE(byte_token[static_cast<size_t>(b)] >= 0, name);
    }
  }
  ~Vocab() { kestrel_model_free(model); }
  std::vector<kestrel_token> tokens(const std::string& bytes) const {
    std::vector<kestrel_token> t;
    for (unsigned char c : bytes) t.push_back(byte_token[c]);
    return t;
  }
};

// Streams tokens through a kestrel_detokenizer; the pieces of each push, then the flush's.
std::vector<std::string> stream(const Vocab& v, const std::vector<kestrel_token>& tokens) {
  kestrel_detokenizer* d = nullptr;
  REQUIRE(kestrel_detokenizer_new(v.model, false, &d) == KESTREL_OK);
  std::vector<std::string> pieces;
  char buf[256];
  size_t len = 0;
  for (kestrel_token t : tokens) {
    REQUIRE(kestrel_detokenizer_push(d, t, buf, sizeof buf, &len) == KESTREL_OK);
    pieces.emplace_back(buf, len);
  }
  REQUIRE(kestrel_detokenizer_flush(d, buf, sizeof buf, &len) == KESTREL_OK);
  pieces.emplace_back(buf, len);
  kestrel_detokenizer_free(d);
  return pieces;
}

std::string whole(const Vocab& v, const std::vector<kestrel_token>& tokens) {
  std::vector<char> buf(tokens.size() * 3 + 16);
  size_t len = 0;
  REQUIRE(kestrel_detokenize(v.model, tokens.data(), tokens.size(), false, buf.data(), buf.size(), &len) == KESTREL_OK);
  return std::string(buf.data(), len);
}

std::string join(const std::vector<std::string>& pieces) {
  std::string s;
  for (const std::string& p : pieces) s += p;
  return s;
}

struct Known {
  const char* what;
  std::string bytes;
  std::vector<std::string> pieces;  // per push, then the flush
};

}  // namespace

TEST_CASE("UTF-8 rule: the reference decoder agrees with the Unicode examples") {
  CHECK(reference("a\xc3\xa9z") == "a\xc3\xa9z");
  CHECK(reference("\xf0\x9f\x99\x82") == "\xf0\x9f\x99\x82");
  // Unicode 15, table 3-8: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d
  CHECK(reference("\x61\xf1\x80\x80\xe1\x80\xc2\x62\x80\x63\x80\xbf\x64") ==
        "a" + kFFFD + kFFFD + kFFFD + "b" + kFFFD + "c" + kFFFD + kFFFD + "d");
  CHECK(reference("\xed\xa0\x80") == kFFFD + kFFFD + kFFFD);
  CHECK(reference("\xe0\x80\xaf") == kFFFD + kFFFD + kFFFD);
  CHECK(reference("\xf4\x90\x80\x80") == kFFFD + kFFFD + kFFFD + kFFFD);
  CHECK(reference("\xf0\x9f\x99") == kFFFD);
}

TEST_CASE("streaming detokenizer: known cases, byte token by byte token") {
  Vocab v("models/stories260K-f32.gguf");
  if (!v.model) return;
  const std::string F = kFFFD;
  const std::vector<Known> cases = {
      {"an emoji over 4 byte tokens", "\xf0\x9f\x99\x82", {"", "", "", "\xf0\x9f\x99\x82", ""}},
      {"an invalid lead byte, replaced at once", "\xff" "a", {F, "a", ""}},
      {"a lone continuation byte", "\x80" "b", {F, "b", ""}},
      {"truncated at the end: one U+FFFD at flush", "x\xe2\x82", {"x", "", "", F}},
      {"truncated, then ASCII", "\xe2\x82" "a", {"", "", F + "a", ""}},
      {"truncated, then a new lead", "\xf0\x9f\xc3\xa9", {"", "", F, "\xc3\xa9", ""}},
      {"overlong C0 AF", "\xc0\xaf", {F, F, ""}},
      {"overlong E0 80 AF", "\xe0\x80\xaf", {"", F + F, F, ""}},
      {"overlong F0 80 80 80", "\xf0\x80\x80\x80", {"", F + F, F, F, ""}},
      {"a surrogate ED A0 80", "\xed\xa0\x80", {"", F + F, F, ""}},
      {"above U+10FFFF: F4 90 80 80", "\xf4\x90\x80\x80", {"", F + F, F, F, ""}},
      {"F5 is never a lead", "\xf5", {F, ""}},
      {"the largest code point", "\xf4\x8f\xbf\xbf", {"", "", "", "\xf4\x8f\xbf\xbf", ""}},
  };
  for (const Known& k : cases) {
    INFO(std::string(k.what) << " [" << hex(k.bytes) << "]");
    const std::vector<kestrel_token> t = v.tokens(k.bytes);
    const std::vector<std::string> got = stream(v, t);
    REQUIRE(got.size() == k.pieces.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK_MESSAGE(got[i] == k.pieces[i], "piece " << i << ": [" << hex(got[i]) << "]");
    CHECK(join(got) == reference(k.bytes));
    CHECK(whole(v, t) == reference(k.bytes));
  }
}

TEST_CASE("streaming detokenizer: random bytes as tokens, streamed == whole == reference, always valid") {
  for (const char* file : {"models/stories260K-f32.gguf", "models/qwen3-f32.gguf"}) {
    Vocab v(file);
    if (!v.model) continue;
    std::mt19937 rng(1234);
    // Bytes drawn to hit every class: ASCII, valid 2-4 byte sequences (whole or cut short), and
    // bytes from the ranges around the boundaries (C0/C1, E0/ED/F0/F4 followers, F5..FF).
    auto draw = [&](std::string& s) {
      switch (rng() % 5) {
        case 0: s += static_cast<char>('A' + rng() % 26); break;
        case 1: s += static_cast<char>(0x80 + rng() % 0x80); break;
        case 2: {
          const uint8_t leads[] = {0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0, 0xF3, 0xF4, 0xF5, 0xFF};
          s += static_cast<char>(leads[rng() % sizeof leads]);
          break;
        }
        default: {
          const uint32_t tops[] = {0x7FF, 0xFFFF, 0x10FFFF};
          uint32_t cp = 0x80 + rng() % (tops[rng() % 3] - 0x7F);
          if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xE000;
          std::string e;
          if (cp < 0x800) e = {static_cast<char>(0xC0 | cp >> 6), static_cast<char>(0x80 | (cp & 0x3F))};
          else if (cp < 0x10000)
            e = {static_cast<char>(0xE0 | cp >> 12), static_cast<char>(0x80 | (cp >> 6 & 0x3F)),
                 static_cast<char>(0x80 | (cp & 0x3F))};
          else
            e = {static_cast<char>(0xF0 | cp >> 18), static_cast<char>(0x80 | (cp >> 12 & 0x3F)),
                 static_cast<char>(0x80 | (cp >> 6 & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
          s += rng() % 4 == 0 ? e.substr(0, 1 + rng() % e.size()) : e;  // sometimes cut short
        }
      }
    };
    for (int n = 0; n < 400; ++n) {
      std::string bytes = "X";  // not a space: whole-sequence detokenization drops a leading one
      const int parts = 1 + static_cast<int>(rng() % 24);
      for (int i = 0; i < parts; ++i) draw(bytes);
      INFO(std::string(file) << " [" << hex(bytes) << "]");
      const std::vector<kestrel_token> t = v.tokens(bytes);
      const std::vector<std::string> pieces = stream(v, t);
      for (const std::string& p : pieces) REQUIRE_MESSAGE(valid(p), "invalid piece [" << hex(p) << "]");
      CHECK(join(pieces) == reference(bytes));
      CHECK(whole(v, t) == reference(bytes));
    }
  }
}

TEST_CASE("utf8_repair: random bytes cut into random chunks give the whole-sequence result") {
  std::mt19937 rng(99);
  const uint8_t interesting[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2,
                                 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xFF};
  for (int n = 0; n < 3000; ++n) {
    std::string bytes;
    const size_t size = rng() % 20;
    for (size_t i = 0; i < size; ++i)
      bytes += static_cast<char>(rng() % 2 ? interesting[rng() % sizeof interesting] : rng() % 256);
    std::string streamed, pending;
    for (size_t i = 0; i < bytes.size();) {
      const size_t cut = std::min(bytes.size(), i + 1 + rng() % 5);
      pending.append(bytes, i, cut - i);
      std::string out;
      pending.erase(0, kestrel::utf8_repair(pending, /*final=*/false, out));
      REQUIRE_MESSAGE(valid(out), "[" << hex(bytes) << "]");
      CHECK(pending.size() <= 3);
      streamed += out;
      i = cut;
    }
    kestrel::utf8_repair(pending, /*final=*/true, streamed);
    INFO("[" << hex(bytes) << "]");
    CHECK(streamed == reference(bytes));
    CHECK(kestrel::utf8_repaired(bytes) == reference(bytes));
  }
}

namespace {

struct Collected {
  std::vector<std::string> pieces;
  std::vector<kestrel_token> tokens;
  kestrel_request_result result{};
};

bool collect(kestrel_token t, const char* piece, size_t len, void* user) {
  auto* c = static_cast<Collected*>(user);
  c->tokens.push_back(t);
  c->pieces.emplace_back(piece, len);
  return true;
}

struct Full {
  kestrel_model* model = nullptr;
  explicit Full(const char* rel) {
    const std::string path = kestrel::test::testdata_file(rel);
    if (path.empty()) return;
    REQUIRE(kestrel_model_load(path.c_str(), nullptr, &model) == KESTREL_OK);
  }
  ~Full() { kestrel_model_free(model); }
};

}  // namespace

TEST_CASE("engine and kestrel_generate: every piece is valid UTF-8 and the final flush reaches the caller") {
  Full m("models/stories260K-f32.gguf");
  if (!m.model) return;
  Vocab v("models/stories260K-f32.gguf");
  // A logit bias that forces the byte token F0 every step: each F0 ends the previous one as an
  // invalid subpart (U+FFFD), and the last is an incomplete tail that the flush replaces.
  const kestrel_token f0 = v.byte_token[0xF0];
  const float bias = 1000.0f;
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = 0.0f;
  so.logit_bias_tokens = &f0;
  so.logit_bias_values = &bias;
  so.n_logit_bias = 1;

  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.n_ctx = 256;
  eo.n_threads = 1;
  kestrel_engine* e = nullptr;
  REQUIRE(kestrel_engine_new(m.model, &eo, &e) == KESTREL_OK);
  const kestrel_token prompt[] = {1, 403};
  kestrel_request r;
  kestrel_request_init(&r);
  r.prompt = prompt;
  r.n_prompt = 2;
  r.max_tokens = 5;
  r.sampling = &so;
  r.on_token = collect;
  Collected c;
  r.user = &c;
  REQUIRE(kestrel_engine_generate(e, &r, &c.result) == KESTREL_OK);
  CHECK(c.result.finish == KESTREL_FINISH_LENGTH);
  for (const std::string& p : c.pieces) CHECK_MESSAGE(valid(p), "[" << hex(p) << "]");
  CHECK(join(c.pieces) == kFFFD + kFFFD + kFFFD + kFFFD + kFFFD);
  REQUIRE(!c.tokens.empty());
  CHECK(c.tokens.back() == -1);  // the flushed tail
  CHECK(c.pieces.back() == kFFFD);

  // With a stop string the text before it still comes out whole.
  const char* stops[] = {"never"};
  r.stop_strings = stops;
  r.n_stop_strings = 1;
  Collected s;
  r.user = &s;
  REQUIRE(kestrel_engine_generate(e, &r, &s.result) == KESTREL_OK);
  CHECK(join(s.pieces) == join(c.pieces));
  kestrel_engine_free(e);

  // kestrel_generate: the same rule.
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  co.n_ctx = 64;
  co.n_threads = 1;
  kestrel_context* ctx = nullptr;
  REQUIRE(kestrel_context_new(m.model, &co, &ctx) == KESTREL_OK);
  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = 5;
  go.sampling = &so;
  go.on_token = collect;
  Collected g;
  go.user = &g;
  REQUIRE(kestrel_generate(ctx, "Once", &go, nullptr) == KESTREL_OK);
  for (const std::string& p : g.pieces) CHECK_MESSAGE(valid(p), "[" << hex(p) << "]");
  CHECK(join(g.pieces) == join(c.pieces));
  kestrel_context_free(ctx);
}

TEST_CASE("engine: sampled replies at high temperature stream only valid UTF-8 (issue 18's crash)") {
  Full m("models/qwen3-f32.gguf");
  if (!m.model) return;
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.n_ctx = 1024;
  eo.n_parallel = 8;
  eo.n_threads = 2;
  kestrel_engine* e = nullptr;
  REQUIRE(kestrel_engine_new(m.model, &eo, &e) == KESTREL_OK);
  const kestrel_token prompt[] = {1, 403, 407, 261, 378};
  std::vector<Collected> out(8);
  std::vector<kestrel_sampler_options> so(out.size());
  std::vector<uint64_t> ids(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    kestrel_sampler_options_init(&so[i]);
    so[i].temperature = i % 2 ? 2.0f : 1.0f;
    so[i].top_k = 0;
    so[i].top_p = 1.0f;
    so[i].min_p = 0.0f;
    so[i].seed = 100 + i;
    kestrel_request r;
    kestrel_request_init(&r);
    r.prompt = prompt;
    r.n_prompt = 5;
    r.max_tokens = 30;
    r.stop_at_eog = false;
    r.sampling = &so[i];
    r.on_token = collect;
    r.user = &out[i];
    REQUIRE(kestrel_submit(e, &r, &ids[i]) == KESTREL_OK);
  }
  int invalid_bytes_seen = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    REQUIRE(kestrel_wait(e, ids[i], &out[i].result) == KESTREL_OK);
    for (const std::string& p : out[i].pieces) CHECK_MESSAGE(valid(p), "request " << i << ": [" << hex(p) << "]");
    invalid_bytes_seen += join(out[i].pieces).find(kFFFD) != std::string::npos;
  }
  MESSAGE(invalid_bytes_seen << " of 8 replies needed a U+FFFD");
  kestrel_engine_free(e);
}
