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
  bool include_usage = false;
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
  auto send = [&](const std::string& data) {
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
    if (!c.splitter) {
      if (!text.empty() && !send(sse_text(m, text, take_logprobs()))) return false;
    } else {
      const json d = c.splitter->push(text, final);
      if (!d.empty() && !send(sse_delta(m, d, take_logprobs()))) return false;
    }
    if (final && !c.logprobs.empty())
      return send(m.chat ? sse_delta(m, json::object(), take_logprobs()) : sse_text(m, "", take_logprobs()));
    return true;
  };
  for (Stream& c : s.choices)
    if (c.meta.chat && !send(sse_role(c.meta))) return;
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
        send(sse_error(status_error(500, "generation failed")));
        return cancel_all();
      }
      if (!send_text(c, c.utf8.finish(), true)) return;
      const bool called = c.splitter && c.splitter->called_tools();
      if (!send(called ? sse_finish(c.meta, "tool_calls") : sse_finish(c.meta, c.g->result.finish))) return;
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
  if (s.include_usage) {
    std::vector<kestrel_request_result> results;
    for (Stream& c : s.choices) results.push_back(c.g->result);
    if (!send(sse_usage(s.meta, usage_json(results)))) return;
  }
  send(std::string(kSseDone));
}

// One choice's whole reply (it has finished).
json whole_choice(Generation& g, ReplySplitter* splitter, const ReplyMeta& meta) {
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    for (const auto& p : g.pieces) text += p;
    logprobs.assign(g.logprobs.begin(), g.logprobs.end());
  }
  size_t offset = 0;
  const json lp = logprobs_json(meta, g.model, logprobs, &offset);
  if (!splitter) return completion_choice(meta, text, finish_reason_text(g.result.finish), lp);
  const json message = splitter->push(text, true);
  return chat_choice(meta, message, splitter->called_tools() ? "tool_calls" : finish_reason_text(g.result.finish), lp);
}

}  // namespace

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
    choices.push_back(whole_choice(g, c.splitters.empty() ? nullptr : c.splitters[i].get(), m));
    results.push_back(g.result);
  }
  res.status = 200;
  res.body = reply_text(meta, std::move(choices), usage_json(results));
}

void reply_streamed(Choices c, const ReplyMeta& meta, bool include_usage, std::shared_ptr<void> keep,
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
  state->include_usage = include_usage;
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
