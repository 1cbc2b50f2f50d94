// Tokenizer throughput: tokenizes ~1 MB of deterministic mixed text (English, code, CJK, emoji,
// digits, whitespace runs) with the vocabulary of a GGUF file, prints MB/s and token counts, and
// checks linearity by timing 0.25, 0.5 and 1 MB. Not a test.
//
//   kestrel_bench_tokenizer VOCAB.gguf [--nfc] [--mb N]
//     --nfc   set tokenizer.kestrel.normalizer = "nfc" (rebuilds the GGUF metadata in memory)
//     --mb N  size of the largest text in MB (default 1)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace kestrel;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Deterministic mixed text of at least `bytes` bytes (cut at a UTF-8 boundary).
std::string mixed_text(size_t bytes) {
  static const char* const kWords[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer",
                                       "inference", "runtime", "Kestrel", "isn't", "they're", "we'll", "HTTP", "GPU",
                                       "naïve", "café", "Straße", "über", "résumé", "coöperate", "Ελληνικά", "русский"};
  static const char* const kCode[] = {
      "for (int i = 0; i < n; ++i) {\n    sum += v[i] * w[i];\n}\n",
      "def forward(self, x):\n\treturn self.proj(torch.relu(x)) + 1e-6\n",
      "{\"id\": 42, \"name\": \"kestrel\", \"tags\": [\"a\", \"b\"], \"ok\": true}\n",
      "#include <vector>\nstd::vector<float> logits(32000, -INFINITY);\n",
  };
  static const char* const kCjk[] = {"我想在苹果公司工作，", "今天天气很好。", "日本語のテキストも含む。",
                                     "한국어 문장입니다. ", "機械学習と自然言語処理"};
  static const char* const kEmoji[] = {"😀", "🚀🚀", "👨\u200d👩\u200d👧", "🏳️\u200d🌈", "👍🏽", "✅", "🦙"};
  static const char* const kSpace[] = {"  ", "\n\n", "\t\t", "    \n", " \t \n", "\r\n", "          "};
  uint64_t s = 0x9E3779B97F4A7C15ull;
  auto rnd = [&](uint64_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (s >> 33) % n;
  };
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    switch (rnd(10)) {
      case 0: case 1: case 2: case 3:  // an English-ish sentence
        for (int w = 0, n = 4 + static_cast<int>(rnd(12)); w < n; ++w) {
          if (w) out += ' ';
          out += kWords[rnd(sizeof kWords / sizeof *kWords)];
        }
        out += rnd(3) ? ". " : "! ";
        break;
      case 4: out += kCode[rnd(sizeof kCode / sizeof *kCode)]; break;
      case 5: out += kCjk[rnd(sizeof kCjk / sizeof *kCjk)]; break;
      case 6: out += kEmoji[rnd(sizeof kEmoji / sizeof *kEmoji)], out += ' '; break;
      case 7: out += std::to_string(rnd(1000000000)) + " " + std::to_string(rnd(100)) + "." + std::to_string(rnd(1000)) + " "; break;
      case 8: out += kSpace[rnd(sizeof kSpace / sizeof *kSpace)]; break;
      default: out += "Cafe\xcc\x81 a\xcc\x8a "; break;  // decomposed accents (NFC work)
    }
  }
  size_t cut = bytes;
  while (cut > 0 && (static_cast<uint8_t>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf [--nfc] [--mb N]\n", argv[0]);
    return 2;
  }
  bool nfc = false;
  double mb = 1.0;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--nfc")) nfc = true;
    else if (!std::strcmp(argv[i], "--mb") && i + 1 < argc) mb = std::atof(argv[++i]);
  }
  double t0 = now_s();
  auto f = gguf::File::open(argv[1]);
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<gguf::File> file = std::move(f.value());
  if (nfc) {
    gguf::Writer w;
    for (const gguf::KeyValue& kv : file->metadata()) w.set(kv.key, kv.value);
    w.set("tokenizer.kestrel.normalizer", gguf::Value::make_string("nfc"));
    auto g = gguf::File::from_bytes(w.to_bytes(), argv[1]);
    if (!g.ok()) return 1;
    file = std::move(g.value());
  }
  auto tok = Tokenizer::from_gguf(*file);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  const double load_s = now_s() - t0;
  const TokenizerInfo& info = tok.value()->info();
  std::printf("vocab %s: model=%s algorithm=%s pre=%s (%s) normalizer=%s n_vocab=%d merges=%zu; load %.2f s\n",
              argv[1], info.model.c_str(), info.algorithm.c_str(), info.pre.c_str(), info.pre_source.c_str(),
              info.normalizer.empty() ? "none" : info.normalizer.c_str(), tok.value()->n_vocab(), info.n_merges, load_s);
  const std::string full = mixed_text(static_cast<size_t>(mb * 1024 * 1024));
  double t_small = 0, t_big = 0;
  for (double frac : {0.25, 0.5, 1.0}) {
    std::string text = full.substr(0, static_cast<size_t>(full.size() * frac));
    while (!text.empty() && (static_cast<uint8_t>(text.back()) & 0xC0) == 0x80) text.pop_back();
    double best = 1e9;
    size_t n_tokens = 0;
    for (int rep = 0; rep < 3; ++rep) {
      const double a = now_s();
      auto ids = tok.value()->tokenize(text, false, false);
      const double dt = now_s() - a;
      if (!ids.ok()) {
        std::fprintf(stderr, "%s\n", ids.status().to_string().c_str());
        return 1;
      }
      best = std::min(best, dt);
      n_tokens = ids->size();
      if (rep == 0 && frac == 1.0) {
        const bool same = tok.value()->detokenize(ids.value(), false) == text;
        std::printf("  round trip of %.2f MB: %s\n", text.size() / 1048576.0,
                    same                                   ? "exact"
                    : nfc                                  ? "differs (expected: NFC composes the decomposed accents)"
                    : info.algorithm == "wpm"              ? "differs (expected: WordPiece lowercases, strips accents)"
                                                           : "DIFFERS");
      }
    }
    if (frac == 0.25) t_small = best;
    if (frac == 1.0) t_big = best;
    std::printf("  %.2f MB: %8zu tokens, %7.1f ms, %6.2f MB/s, %.2f bytes/token\n", text.size() / 1048576.0, n_tokens,
                best * 1e3, text.size() / 1048576.0 / best, static_cast<double>(text.size()) / n_tokens);
  }
  std::printf("  linearity: t(1)/t(0.25) = %.2f (4.0 is linear)\n", t_big / t_small);
  return 0;
}
