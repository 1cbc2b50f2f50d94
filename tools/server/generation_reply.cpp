#include "server/generation_reply.h"

#include <chrono>
#include <cstdio>
#include <exception>

namespace kestrel::server {
namespace {

void log_failure(const Generation& g) {
  std::fprintf(stderr, "kestrel serve: request %llu failed in the engine: %s\n",
               static_cast<unsigned long long>(g.id), kestrel_status_name(g.result.status));
}

// One choice while it streams: its text so far (UTF-8 held back at a cut), its logprobs not sent
// yet, its splitter.
struct Stream {
  std::shared_ptr<Generation> g;
  std::shared_ptr<ReplySplitter> splitter;
  ReplyMeta meta;
  Utf8Holder utf8;
  std::vector<TokenLogprobs> logprobs;
  size_t text_offset = 0;
  bool finished = false;
};

// Owned by the stream callback: if the callback is dropped without running to its end (the
// server stopped, the head could not be sent), the requests are cancelled instead of generating
// for no one.
struct StreamState {
  std::vector<Stream> choices;
  ReplyMeta meta;
  std::shared_ptr<StreamFormat> format;
  std::shared_ptr<void> keep;
  ~StreamState() {
    for (Stream& c : choices)
      if (!c.g->is_done()) c.g->cancel();
  }
};

// Takes what choice c's generation has produced; true when it had something (or finished).
bool take(Stream& c, std::deque<std::string>* got, bool* done) {
  Generation& g = *c.g;
  std::lock_guard<std::mutex> lock(g.mu);
  got->swap(g.pieces);
  for (TokenLogprobs& t : g.logprobs) c.logprobs.push_back(std::move(t));
  g.logprobs.clear();
  *done = g.done;
  return !got->empty() || *done;
}

// The SSE events of one reply. Returns when the reply is complete or the client is gone.
void stream_events(StreamState& s, http::StreamWriter& w) {
  auto cancel_all = [&] {
    for (Stream& c : s.choices) c.g->cancel();  // the next token callback stops each request
  };
  StreamFormat& f = *s.format;
  auto send = [&](const std::string& data) {
    if (data.empty()) return true;
    bool gone = false;
    for (Stream& c : s.choices) gone = gone || c.g->client_gone;
    if (gone || !w.write(data)) {
      cancel_all();
      return false;
    }
    return true;
  };
  // Text as it comes: split into content, reasoning and tool-call deltas for a chat; logprobs of
  // the tokens taken so far go with the next event (at the end, in one of their own).
  auto send_text = [&](Stream& c, const std::string& text, bool final) {
    const ReplyMeta& m = c.meta;
    auto take_logprobs = [&] {
      json j = logprobs_json(m, c.g->model, c.logprobs, &c.text_offset);
      c.logprobs.clear();
      return j;
    };
    const json d = c.splitter ? c.splitter->push(text, final) : text.empty() ? json::object() : json{{"content", text}};
    if (!d.empty() && !send(f.delta(m, d, take_logprobs()))) return false;
    if (final && !c.logprobs.empty()) return send(f.delta(m, json::object(), take_logprobs()));
    return true;
  };
  for (Stream& c : s.choices)
    if (!send(f.start(c.meta))) return;
  size_t open = s.choices.size();
  while (open > 0) {
    bool any = false;
    for (Stream& c : s.choices) {
      if (c.finished) continue;
      std::deque<std::string> got;
      bool done = false;
      if (!take(c, &got, &done)) continue;
      any = true;
      for (const auto& p : got) {
        const std::string text = c.utf8.push(p);
        if (!text.empty() && !send_text(c, text, false)) return;
      }
      if (!done) continue;
      c.finished = true;
      --open;
      if (c.g->result.finish == KESTREL_FINISH_ERROR) {
        log_failure(*c.g);
        send(f.error(status_error(500, "generation failed")));
        return cancel_all();
      }
      if (!send_text(c, c.utf8.finish(), true)) return;
      if (!send(f.finish(c.meta, c.g->result, c.splitter && c.splitter->called_tools()))) return;
    }
    if (open == 0 || any) continue;
    // Nothing new: wait on the first open choice (briefly when others may move first), then
    // notice a client that hung up.
    for (Stream& c : s.choices) {
      if (c.finished) continue;
      Generation& g = *c.g;
      std::unique_lock<std::mutex> lock(g.mu);
      g.cv.wait_for(lock, std::chrono::milliseconds(open == 1 ? 200 : 10), [&] { return g.done || !g.pieces.empty(); });
      break;
    }
    if (!w.alive()) return cancel_all();
  }
  std::vector<kestrel_request_result> results;
  for (Stream& c : s.choices) results.push_back(c.g->result);
  send(f.end(s.meta, results));
}

// OpenAI's chunks: the role first, deltas (a completion's text as itself), the finish reason,
// the usage when asked, [DONE].
class OpenAiFormat final : public StreamFormat {
 public:
  explicit OpenAiFormat(bool include_usage) : include_usage_(include_usage) {}
  std::string start(const ReplyMeta& m) override { return m.chat ? sse_role(m) : ""; }
  std::string delta(const ReplyMeta& m, const json& d, const json& logprobs) override {
    return m.chat ? sse_delta(m, d, logprobs) : sse_text(m, d.value("content", ""), logprobs);
  }
  std::string finish(const ReplyMeta& m, const kestrel_request_result& r, bool called_tools) override {
    return called_tools ? sse_finish(m, "tool_calls") : sse_finish(m, r.finish);
  }
  std::string end(const ReplyMeta& m, const std::vector<kestrel_request_result>& results) override {
    return (include_usage_ ? sse_usage(m, usage_json(results)) : "") + std::string(kSseDone);
  }
  std::string error(const ApiError& e) override { return sse_error(e); }

 private:
  bool include_usage_;
};

}  // namespace

std::shared_ptr<StreamFormat> openai_stream_format(bool include_usage) {
  return std::make_shared<OpenAiFormat>(include_usage);
}

json whole_reply(Generation& g, ReplySplitter* splitter, const ReplyMeta& meta, json* lp) {
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    for (const auto& p : g.pieces) text += p;
    logprobs.assign(g.logprobs.begin(), g.logprobs.end());
  }
  size_t offset = 0;
  *lp = logprobs_json(meta, g.model, logprobs, &offset);
  return splitter ? splitter->push(text, true) : json{{"content", text}};
}

void reply_whole(const Choices& c, const ReplyMeta& meta, http::Response& res) {
  for (const auto& g : c.gens) g->wait_done();
  json choices = json::array();
  std::vector<kestrel_request_result> results;
  for (size_t i = 0; i < c.gens.size(); ++i) {
    Generation& g = *c.gens[i];
    if (g.result.finish == KESTREL_FINISH_ERROR) {
      log_failure(g);
      res.status = 500;
      res.body = error_text(status_error(500, "generation failed"));
      return;
    }
    ReplyMeta m = meta;
    m.index = static_cast<int>(i);
    ReplySplitter* splitter = c.splitters.empty() ? nullptr : c.splitters[i].get();
    json lp;
    const json reply = whole_reply(g, splitter, m, &lp);
    const char* finish = splitter && splitter->called_tools() ? "tool_calls" : finish_reason_text(g.result.finish);
    choices.push_back(splitter ? chat_choice(m, reply, finish, lp)
                               : completion_choice(m, reply.value("content", ""), finish, lp));
    results.push_back(g.result);
  }
  res.status = 200;
  res.body = reply_text(meta, std::move(choices), usage_json(results));
}

void reply_streamed(Choices c, const ReplyMeta& meta, std::shared_ptr<StreamFormat> format, std::shared_ptr<void> keep,
                    http::Response& res) {
  auto state = std::make_shared<StreamState>();
  for (size_t i = 0; i < c.gens.size(); ++i) {
    Stream st;
    st.g = c.gens[i];
    st.splitter = c.splitters.empty() ? nullptr : c.splitters[i];
    st.meta = meta;
    st.meta.index = static_cast<int>(i);
    state->choices.push_back(std::move(st));
  }
  state->meta = meta;
  state->format = std::move(format);
  state->keep = std::move(keep);
  res.status = 200;
  res.content_type = "text/event-stream";
  res.headers.emplace_back("Cache-Control", "no-cache");
  res.stream = [state](http::StreamWriter& w) {
    try {
      stream_events(*state, w);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel serve: internal error in a stream: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "kestrel serve: internal error in a stream\n");
    }
    // The requests end in the engine before the stream does (a drain waits for them).
    for (Stream& c : state->choices) {
      if (!c.g->is_done()) c.g->cancel();
      c.g->wait_done();
    }
  };
}

}  // namespace kestrel::server
