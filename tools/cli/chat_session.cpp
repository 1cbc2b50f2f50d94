#include "chat_session.h"

#include <algorithm>
#include <chrono>

namespace kestrel::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

ChatSession::ChatSession(kestrel_model* model, kestrel_context* ctx, const kestrel_sampler_options& sampling,
                         std::string template_source, int32_t max_reply_tokens)
    : model_(model),
      ctx_(ctx),
      sampler_(new_sampler(&sampling)),
      template_source_(std::move(template_source)),
      max_reply_tokens_(max_reply_tokens) {}

void ChatSession::set_system(std::string text) { system_ = std::move(text); }

void ChatSession::reset() {
  messages_ = nlohmann::ordered_json::array();
  cached_.clear();
  kestrel_kv_clear(ctx_);
  kestrel_sampler_reset(sampler_.get());
}

std::string ChatSession::render() const {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  if (!system_.empty()) all.push_back({{"role", "system"}, {"content", system_}});
  for (const auto& m : messages_) all.push_back(m);
  kestrel_chat_options o;
  kestrel_chat_options_init(&o);
  o.template_source = template_source_.empty() ? nullptr : template_source_.c_str();
  o.add_generation_prompt = true;
  // A reply (random or small models emit stray byte tokens) or a typed line may be invalid UTF-8:
  // JSON cannot carry that, so such bytes become U+FFFD in the re-rendered conversation.
  const std::string msgs = all.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  size_t len = 0;
  check(kestrel_chat_format(model_, msgs.c_str(), &o, nullptr, 0, &len));
  std::string out(len + 1, '\0');
  check(kestrel_chat_format(model_, msgs.c_str(), &o, out.data(), out.size(), &len));
  out.resize(len);
  return out;
}

int32_t ChatSession::sync_cache(const std::vector<kestrel_token>& prompt) {
  size_t common = 0;
  while (common < cached_.size() && common < prompt.size() && cached_[common] == prompt[common]) ++common;
  // At least the last prompt token is decoded again: its logits start the reply.
  if (common == prompt.size() && common > 0) --common;
  if (common < cached_.size()) {
    check(kestrel_kv_seq_remove(ctx_, 0, static_cast<int32_t>(common), -1));
    cached_.resize(common);
  }
  return static_cast<int32_t>(common);
}

ChatTurnStats ChatSession::reply(const std::string& user, const std::function<void(std::string_view)>& on_text,
                                 const std::atomic<bool>& stop) {
  ChatTurnStats st;
  const size_t n_before = messages_.size();
  messages_.push_back({{"role", "user"}, {"content", user}});
  try {
    const int32_t n_ctx = static_cast<int32_t>(kestrel_context_n_ctx(ctx_));
    // Room for a reply: the token limit, or a quarter of the context when unlimited.
    const int32_t reserve = std::min(max_reply_tokens_ > 0 ? max_reply_tokens_ : n_ctx / 4, n_ctx / 2);
    std::vector<kestrel_token> prompt = chat_tokenize(model_, render());
    // Leave out the oldest turns until the conversation fits (the new message always stays).
    while (static_cast<int32_t>(prompt.size()) + reserve > n_ctx && messages_.size() > 1) {
      messages_.erase(messages_.begin());
      ++st.dropped_messages;
      prompt = chat_tokenize(model_, render());
    }
    if (static_cast<int32_t>(prompt.size()) + 1 > n_ctx)
      throw Error(KESTREL_ERR_CONTEXT_FULL, "the message needs " + std::to_string(prompt.size()) +
                                                " tokens; the context holds " + std::to_string(n_ctx));
    st.prompt_tokens = static_cast<int32_t>(prompt.size());
    st.cached_tokens = sync_cache(prompt);
    st.new_tokens = st.prompt_tokens - st.cached_tokens;

    auto t0 = Clock::now();
    std::vector<kestrel_token> todo(prompt.begin() + st.cached_tokens, prompt.end());
    kestrel_batch b{};
    b.n_tokens = static_cast<int32_t>(todo.size());
    b.tokens = todo.data();
    check(kestrel_decode(ctx_, &b));
    cached_.insert(cached_.end(), todo.begin(), todo.end());
    st.prompt_s = seconds_since(t0);

    t0 = Clock::now();
    kestrel_detokenizer* d = nullptr;
    check(kestrel_detokenizer_new(model_, /*render_special=*/false, &d));
    DetokenizerPtr detok(d);
    std::string text;
    auto emit = [&](std::string_view s) {
      text.append(s);
      if (!s.empty()) on_text(s);
    };
    char buf[4096];
    size_t len = 0;
    for (;;) {
      if (stop.load()) {
        st.interrupted = true;
        break;
      }
      if ((max_reply_tokens_ > 0 && st.generated >= max_reply_tokens_) || static_cast<int32_t>(cached_.size()) >= n_ctx) {
        st.truncated = true;
        break;
      }
      const float* logits = nullptr;
      int32_t n_vocab = 0;
      check(kestrel_get_logits(ctx_, -1, &logits, &n_vocab));
      kestrel_token t = -1;
      check(kestrel_sampler_sample(sampler_.get(), logits, n_vocab, &t));
      if (kestrel_model_token_is_eog(model_, t)) break;
      ++st.generated;
      check(kestrel_detokenizer_push(detok.get(), t, buf, sizeof buf, &len));
      emit({buf, len});
      b = kestrel_batch{};
      b.n_tokens = 1;
      b.tokens = &t;
      check(kestrel_decode(ctx_, &b));
      cached_.push_back(t);
    }
    check(kestrel_detokenizer_flush(detok.get(), buf, sizeof buf, &len));
    emit({buf, len});
    st.gen_s = seconds_since(t0);
    messages_.push_back({{"role", "assistant"}, {"content", text}});
  } catch (...) {
    // Drop this turn's message; the cache is rebuilt from the conversation next turn.
    const size_t keep = n_before - static_cast<size_t>(st.dropped_messages);
    if (messages_.size() > keep) messages_.erase(messages_.begin() + static_cast<long>(keep), messages_.end());
    cached_.clear();
    kestrel_kv_clear(ctx_);
    throw;
  }
  return st;
}

}  // namespace kestrel::cli
