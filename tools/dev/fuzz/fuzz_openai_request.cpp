// libFuzzer target for kestrel serve's request parsing: the raw bytes as the JSON body of every
// endpoint (chat, completions, embeddings, tokenize, detokenize, Anthropic's messages and
// count_tokens), with a fixed vocabulary size and no model,
// then the reply objects built from the same bytes as generated text. Any crash, sanitizer
// report, uncaught exception, 5xx or reply that is not valid JSON is a bug. From the repo root
// (after building libkestrel.a in build/):
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iruntime/include -Itools \
//     tools/dev/fuzz/fuzz_openai_request.cpp tools/server/openai_api.cpp tools/server/openai_request.cpp \
//     tools/server/openai_reply.cpp build/libkestrel.a -lpthread -o /tmp/fuzz_openai_request
//   /tmp/fuzz_openai_request -max_len=4096 -max_total_time=60 /tmp/openai_corpus
//
// (The library only provides kestrel_sampler_options_init here.)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/anthropic_request.h"
#include "server/openai_api.h"
#include "server/openai_reply.h"
#include "server/openai_request.h"

using namespace kestrel::server;

namespace {

bool valid_json(const std::string& text) {
  return !nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false).is_discarded();
}

// Every refusal is a client error with a message, and its body is valid JSON.
void check(const std::optional<ApiError>& e) {
  if (!e) return;
  if (e->http != 400 && e->http != 404) __builtin_trap();
  if (e->message.empty() || !valid_json(error_text(*e))) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestEnv env;
  env.n_vocab = 64;
  env.model_id = "m";
  env.n_embd = 32;
  env.limits.max_depth = 16;
  env.limits.max_messages = 8;
  GenRequest g;
  check(parse_generation_request(body, true, env, &g));
  check(parse_generation_request(body, false, env, &g));
  TokenizeRequest t;
  check(parse_tokenize_request(body, env, &t));
  DetokenizeRequest d;
  check(parse_detokenize_request(body, env, &d));
  EmbeddingsRequest em;
  check(parse_embeddings_request(body, env, &em));
  check(parse_messages_request(body, env, false, &g));
  check(parse_messages_request(body, env, true, &g));
  // The same bytes as model output: whatever they hold, the replies are valid JSON.
  const std::string text(body);
  kestrel_request_result r{};
  r.finish = KESTREL_FINISH_LENGTH;
  const ReplyMeta m{"id", 0, "m", size % 2 == 0};
  if (!valid_json(completion_text(m, text, r))) __builtin_trap();
  Utf8Holder h;
  std::string streamed = h.push(text.substr(0, size / 2));
  streamed += h.push(text.substr(size / 2));
  streamed += h.finish();
  const std::string ev = sse_text(m, streamed);
  if (!valid_json(ev.substr(6, ev.size() - 8))) __builtin_trap();
  return 0;
}
