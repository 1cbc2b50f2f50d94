// The reply to a running generation: whole (wait, then one completion object) or streamed as
// server-sent events through the HTTP layer's StreamWriter. Whatever happens to the client or
// to the code, the request ends in the engine before its reply is gone, and nothing throws out.
#pragma once
#include <memory>
#include <vector>

#include "server/generation.h"
#include "server/http/http_server.h"
#include "server/openai_reply.h"

namespace kestrel::server {

// The choices of one request (n >= 1): their generations, and for a chat their splitters
// (which turn text into content, reasoning_content and tool_calls; empty for completions).
struct Choices {
  std::vector<std::shared_ptr<Generation>> gens;
  std::vector<std::shared_ptr<ReplySplitter>> splitters;
};

// Waits for the end, then fills res: the completion with every choice, or a 500 if generation
// failed.
void reply_whole(const Choices& c, const ReplyMeta& meta, http::Response& res);

// Sets res.stream to the SSE loop (each choice's events carry its index). `keep` is held until
// the stream is over (or dropped unrun), so a draining server can wait for it.
void reply_streamed(Choices c, const ReplyMeta& meta, bool include_usage, std::shared_ptr<void> keep,
                    http::Response& res);

}  // namespace kestrel::server
