// kestrel eval: runs a token prompt and prints, in the schema of the llama.cpp reference files
// (kestrel-llamacpp-reference/1), the top-K logits at every prompt position, the full logits at
// the last one, and a greedy continuation with its top-K per step. How anyone checks Kestrel
// against another engine.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common.h"

namespace kestrel::cli {
namespace {

std::vector<kestrel_token> parse_ids(const std::string& s) {
  std::vector<kestrel_token> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || v < INT32_MIN || v > INT32_MAX) throw UsageError("--tokens: '" + item + "' is not a token id");
    ids.push_back(static_cast<kestrel_token>(v));
  }
  if (ids.empty()) throw UsageError("--tokens: no token ids");
  return ids;
}

// The k largest logits as [id, logit], ties broken by the lower id.
nlohmann::json top_k(const float* logits, int32_t n, int k) {
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  nlohmann::json out = nlohmann::json::array();
  for (int i = 0; i < k; ++i) out.push_back({idx[i], logits[idx[i]]});
  return out;
}

}  // namespace

Opts eval_options() {
  return model_options() +
         Opts{{"--tokens", "ID,ID,...", "the prompt's token ids (required)"},
              {"-n,--n-predict", "N", "greedy tokens to generate after the prompt (default 32)"},
              {"--top", "K", "logits shown per position, the K largest (default 10)"},
              ctx_option("context size in tokens (default 0: the model's training context)")} +
         cache_options();
}

int cmd_eval(const Args& a) {
  const std::vector<kestrel_token> prompt = parse_ids(a.required("--tokens"));
  const int n_predict = static_cast<int>(a.integer("--n-predict", 32));
  const int k = static_cast<int>(a.integer("--top", 10));
  if (n_predict < 0 || k <= 0) throw UsageError("--n-predict must be >= 0 and --top > 0");
  const KvTypes kv_types = kv_types_from_args(a);
  ModelPtr model = load_model_from_args(a);

  kestrel_context_options co;
  kestrel_context_options_init(&co);
  kv_types.apply(co);
  co.n_ctx = static_cast<uint32_t>(a.integer("--ctx-size", 0));
  ContextPtr ctx = new_context(model.get(), &co);

  const int32_t P = static_cast<int32_t>(prompt.size());
  std::vector<uint8_t> want(P, 1);  // bool array for the C batch
  kestrel_batch batch{P, prompt.data(), nullptr, nullptr, reinterpret_cast<const bool*>(want.data())};
  check(kestrel_decode(ctx.get(), &batch));

  nlohmann::json prompt_top = nlohmann::json::array();
  const float* logits = nullptr;
  int32_t n_vocab = 0;
  for (int32_t i = 0; i < P; ++i) {
    check(kestrel_get_logits(ctx.get(), i, &logits, &n_vocab));
    prompt_top.push_back(top_k(logits, n_vocab, k));
  }
  std::vector<float> last(logits, logits + n_vocab);

  nlohmann::json greedy = nlohmann::json::array(), greedy_top = nlohmann::json::array();
  int first_eog = -1;
  for (int step = 0; step < n_predict; ++step) {
    check(kestrel_get_logits(ctx.get(), -1, &logits, &n_vocab));
    const kestrel_token t = static_cast<kestrel_token>(std::max_element(logits, logits + n_vocab) - logits);
    greedy.push_back(t);
    greedy_top.push_back(top_k(logits, n_vocab, k));
    if (first_eog < 0 && kestrel_model_token_is_eog(model.get(), t)) first_eog = step;
    if (step + 1 < n_predict) {
      kestrel_batch one{1, &t, nullptr, nullptr, nullptr};
      check(kestrel_decode(ctx.get(), &one));
    }
  }
  nlohmann::json out = {
      {"schema", "kestrel-llamacpp-reference/1"},
      {"engine", "kestrel"},
      {"model_path", a.required("--model")},
      {"n_vocab", n_vocab},
      {"prompt_tokens", prompt},
      {"prompt_top10", prompt_top},
      {"last_logits", last},
      {"n_gen", n_predict},
      {"greedy_tokens", greedy},
      {"greedy_first_eog", first_eog},
      {"greedy_top10", greedy_top},
  };
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace kestrel::cli
