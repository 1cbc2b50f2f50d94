#include "chat_session.h"

#include <algorithm>
#include <chrono>

namespace kestrel::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Adds text to a reply parser and returns what changed ({"content", "reasoning_content", "tool_calls"}).
nlohmann::ordered_json push(kestrel_reply_parser* p, std::string_view text, bool final) {
  std::string buf(4096 + 2 * text.size(), '\0');
  size_t len = 0;
  kestrel_status st = kestrel_reply_parser_push(p, text.data(), text.size(), final, buf.data(), buf.size(), &len);
  if (st == KESTREL_ERR_BUFFER_TOO_SMALL) {  // the delta waits for a bigger buffer
    buf.assign(len + 1, '\0');
    st = kestrel_reply_parser_push(p, nullptr, 0, false, buf.data(), buf.size(), &len);
  }
  check(st);
  return nlohmann::ordered_json::parse(buf.substr(0, len));
}

}  // namespace

ChatSession::ChatSession(kestrel_model* model, kestrel_context* ctx, const kestrel_sampler_options& sampling,
                         std::string template_source, int32_t max_reply_tokens, ChatTools tools)
    : model_(model),
      ctx_(ctx),
      sampler_(new_sampler(&sampling)),
      template_source_(std::move(template_source)),
      max_reply_tokens_(max_reply_tokens),
      tools_(std::move(tools)) {
  if (!tools_.tools_json.empty()) make_parser("");  // bad tools, or a choice no grammar can force, fail now
}

ReplyParserPtr ChatSession::make_parser(const std::string& prompt) const {
  kestrel_chat_options o;
  kestrel_chat_options_init(&o);
  o.template_source = template_source_.empty() ? nullptr : template_source_.c_str();
  o.tools_json = tools_.tools_json.c_str();
  kestrel_reply_parser* p = nullptr;
  check(kestrel_reply_parser_new(model_, &o, prompt.c_str(), tools_.tool_choice.c_str(), KESTREL_REPLY_PARALLEL_TOOLS,
                                 &p));
  return ReplyParserPtr(p);
}

void ChatSession::set_system(std::string text) { system_ = std::move(text); }

void ChatSession::reset() {
  messages_ = nlohmann::ordered_json::array();
  cached_.clear();
  open_calls_ = nlohmann::ordered_json::array();
  kestrel_kv_clear(ctx_);
  kestrel_sampler_reset(sampler_.get());
}

nlohmann::ordered_json ChatSession::conversation() const {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  if (!system_.empty()) all.push_back({{"role", "system"}, {"content", system_}});
  for (const auto& m : messages_) all.push_back(m);
  return all;
}

void ChatSession::load(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) throw Error(KESTREL_ERR_INVALID_ARGUMENT, "a conversation is a JSON array of messages");
  std::string system;
  nlohmann::ordered_json rest = nlohmann::ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const std::string where = "message " + std::to_string(i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw Error(KESTREL_ERR_INVALID_ARGUMENT, where + ": an object with a \"role\" string is expected");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw Error(KESTREL_ERR_INVALID_ARGUMENT, where + ": unknown role '" + role + "'");
    if (role == "system" && i == 0 && m.value("content", nlohmann::ordered_json()).is_string()) {
      system = m["content"].get<std::string>();
      continue;
    }
    rest.push_back(m);
  }
  std::swap(system_, system);
  std::swap(messages_, rest);
  try {
    render();  // a conversation the template cannot render fails here, not at the next message
  } catch (...) {
    std::swap(system_, system);
    std::swap(messages_, rest);
    throw;
  }
  open_calls_ = nlohmann::ordered_json::array();
}

void ChatSession::set_sampling(const kestrel_sampler_options& sampling) { sampler_ = new_sampler(&sampling); }

std::string ChatSession::render() const {
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  if (!system_.empty()) all.push_back({{"role", "system"}, {"content", system_}});
  for (const auto& m : messages_) all.push_back(m);
  kestrel_chat_options o;
  kestrel_chat_options_init(&o);
  o.template_source = template_source_.empty() ? nullptr : template_source_.c_str();
  o.add_generation_prompt = true;
  o.tools_json = tools_.tools_json.empty() ? nullptr : tools_.tools_json.c_str();
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
    const kestrel_status st = kestrel_kv_seq_remove(ctx_, 0, static_cast<int32_t>(common), -1);
    if (st == KESTREL_ERR_UNSUPPORTED) {
      // Recurrent (SSM) layers keep no per-token history to cut back to: the turn starts over.
      check(kestrel_kv_seq_remove(ctx_, 0, 0, -1));
      common = 0;
    } else {
      check(st);
    }
    cached_.resize(common);
  }
  return static_cast<int32_t>(common);
}

ChatTurnStats ChatSession::reply(const std::string& user, const ChatTextFn& on_text, const std::atomic<bool>& stop) {
  const size_t n_before = messages_.size();
  messages_.push_back({{"role", "user"}, {"content", user}});
  open_calls_ = nlohmann::ordered_json::array();  // a new message leaves them unanswered
  return respond(n_before, on_text, stop);
}

std::optional<ChatTurnStats> ChatSession::tool_result(const std::string& result, const ChatTextFn& on_text,
                                                      const std::atomic<bool>& stop) {
  if (open_calls_.empty()) throw Error(KESTREL_ERR_INVALID_ARGUMENT, "no tool call is waiting for a result");
  const nlohmann::ordered_json call = open_calls_.front();
  open_calls_.erase(open_calls_.begin());
  const size_t n_before = messages_.size();
  messages_.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"name", call["function"]["name"]},
                       {"content", result}});
  if (!open_calls_.empty()) return std::nullopt;
  try {
    return respond(n_before, on_text, stop);
  } catch (...) {
    open_calls_.insert(open_calls_.begin(), call);  // its result was dropped with the turn
    throw;
  }
}

ChatTurnStats ChatSession::respond(size_t n_before, const ChatTextFn& on_text, const std::atomic<bool>& stop) {
  ChatTurnStats st;
  try {
    const int32_t n_ctx = static_cast<int32_t>(kestrel_context_n_ctx(ctx_));
    // Room for a reply: the token limit, or a quarter of the context when unlimited.
    const int32_t reserve = std::min(max_reply_tokens_ > 0 ? max_reply_tokens_ : n_ctx / 4, n_ctx / 2);
    std::string rendered = render();
    std::vector<kestrel_token> prompt = chat_tokenize(model_, rendered);
    // Leave out the oldest turns until the conversation fits (the new message always stays).
    while (static_cast<int32_t>(prompt.size()) + reserve > n_ctx && messages_.size() > 1) {
      messages_.erase(messages_.begin());
      ++st.dropped_messages;
      rendered = render();
      prompt = chat_tokenize(model_, rendered);
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
    // With tools, the reply goes through its family's parser, whose grammar (a forced call) the
    // sampler keeps to; without, the sampler is free (a grammar from an earlier turn is dropped).
    ReplyParserPtr parser;
    if (!tools_.tools_json.empty()) {
      parser = make_parser(rendered);
      check(kestrel_reply_parser_show_markers(parser.get(), detok.get()));
    }
    check(kestrel_sampler_set_grammar(sampler_.get(), model_, nullptr, nullptr, parser.get()));
    std::string text;
    auto emit = [&](std::string_view s, bool final = false) {
      if (!parser) {
        text.append(s);
        if (!s.empty()) on_text(s, false);
        return;
      }
      const nlohmann::ordered_json delta = push(parser.get(), s, final);
      if (delta.contains("reasoning_content")) on_text(delta["reasoning_content"].get<std::string>(), true);
      if (delta.contains("content")) {
        text += delta["content"].get<std::string>();
        on_text(delta["content"].get<std::string>(), false);
      }
      for (const auto& c : delta.value("tool_calls", nlohmann::ordered_json::array())) st.tool_calls.push_back(c);
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
    emit({buf, len}, /*final=*/true);
    st.gen_s = seconds_since(t0);
    nlohmann::ordered_json msg = {{"role", "assistant"}, {"content", text}};
    if (!st.tool_calls.empty()) {
      // Templates iterate earlier calls' arguments as objects (OpenAI sends them as JSON text).
      msg["tool_calls"] = st.tool_calls;
      for (auto& c : msg["tool_calls"]) {
        c.erase("index");
        auto args = nlohmann::ordered_json::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
        if (!args.is_discarded()) c["function"]["arguments"] = std::move(args);
      }
    }
    messages_.push_back(std::move(msg));
    open_calls_ = st.tool_calls;
  } catch (...) {
    // Drop this turn's messages; the cache is rebuilt from the conversation next turn.
    const size_t keep = n_before - static_cast<size_t>(st.dropped_messages);
    if (messages_.size() > keep) messages_.erase(messages_.begin() + static_cast<long>(keep), messages_.end());
    cached_.clear();
    kestrel_kv_clear(ctx_);
    throw;
  }
  return st;
}

}  // namespace kestrel::cli
