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

// Owned by the stream callback: if the callback is dropped without running to its end (the
// server stopped, the head could not be sent), the request is cancelled instead of generating
// for no one.
struct StreamState {
  std::shared_ptr<Generation> g;
  ReplyMeta meta;
  std::shared_ptr<ReplySplitter> splitter;
  bool include_usage = false;
  std::shared_ptr<void> keep;
  ~StreamState() {
    if (!g->is_done()) g->cancel();
  }
};

// The SSE events of one reply. Returns when the reply is complete or the client is gone.
void stream_events(StreamState& s, http::StreamWriter& w) {
  Generation& g = *s.g;
  const ReplyMeta& m = s.meta;
  auto send = [&](const std::string& data) {
    if (g.client_gone || !w.write(data)) {
      g.cancel();  // the next token callback stops the request too
      return false;
    }
    return true;
  };
  if (m.chat && !send(sse_role(m))) return;
  // logprobs of the tokens taken so far, sent with the next chunk.
  std::vector<TokenLogprobs> logprobs;
  size_t text_offset = 0;
  auto take_logprobs = [&] {
    json j = logprobs_json(m, g.model, logprobs, &text_offset);
    logprobs.clear();
    return j;
  };
  // Text as it comes: split into content, reasoning and tool-call deltas for a chat.
  auto send_text = [&](const std::string& text, bool final) {
    if (!s.splitter) return send(sse_text(m, text, take_logprobs()));
    const json d = s.splitter->push(text, final);
    return d.empty() || send(sse_delta(m, d, take_logprobs()));
  };
  Utf8Holder utf8;
  for (;;) {
    std::deque<std::string> got;
    bool done;
    {
      std::unique_lock<std::mutex> lock(g.mu);
      g.cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return g.done || !g.pieces.empty(); });
      got.swap(g.pieces);
      for (TokenLogprobs& t : g.logprobs) logprobs.push_back(std::move(t));
      g.logprobs.clear();
      done = g.done;
    }
    for (const auto& p : got) {
      const std::string text = utf8.push(p);
      if (!text.empty() && !send_text(text, false)) return;
    }
    if (done) break;
    if (!w.alive()) {  // nothing generated for a while: notice a client that hung up
      g.cancel();
      return;
    }
  }
  const std::string tail = utf8.finish();
  if (g.result.finish == KESTREL_FINISH_ERROR) {
    log_failure(g);
    send(sse_error(status_error(500, "generation failed")));
    return;
  }
  if ((s.splitter || !tail.empty()) && !send_text(tail, true)) return;
  if (!logprobs.empty() && !send(m.chat ? sse_delta(m, json::object(), take_logprobs()) : sse_text(m, "", take_logprobs())))
    return;
  const bool called = s.splitter && s.splitter->called_tools();
  if (!send(called ? sse_finish(m, "tool_calls") : sse_finish(m, g.result.finish))) return;
  if (s.include_usage && !send(sse_usage(m, g.result))) return;
  send(std::string(kSseDone));
}

}  // namespace

void reply_whole(Generation& g, const ReplyMeta& meta, ReplySplitter* splitter, http::Response& res) {
  g.wait_done();
  std::string text;
  std::vector<TokenLogprobs> logprobs;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    for (const auto& p : g.pieces) text += p;
    logprobs.assign(g.logprobs.begin(), g.logprobs.end());
  }
  size_t offset = 0;
  const json lp = logprobs_json(meta, g.model, logprobs, &offset);
  if (g.result.finish == KESTREL_FINISH_ERROR) {
    log_failure(g);
    res.status = 500;
    res.body = error_text(status_error(500, "generation failed"));
    return;
  }
  res.status = 200;
  if (!splitter) {
    res.body = completion_text(meta, text, g.result, lp);
    return;
  }
  const json message = splitter->push(text, true);
  res.body = chat_message_text(meta, message, splitter->called_tools() ? "tool_calls" : finish_reason_text(g.result.finish),
                               g.result, lp);
}

void reply_streamed(std::shared_ptr<Generation> g, const ReplyMeta& meta, std::shared_ptr<ReplySplitter> splitter,
                    bool include_usage, std::shared_ptr<void> keep, http::Response& res) {
  auto state = std::make_shared<StreamState>();
  state->g = std::move(g);
  state->meta = meta;
  state->splitter = std::move(splitter);
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
    // The request ends in the engine before the stream does (a drain waits for it).
    Generation& g = *state->g;
    if (!g.is_done()) g.cancel();
    g.wait_done();
  };
}

}  // namespace kestrel::server
