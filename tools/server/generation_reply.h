// The reply to a running generation: whole (wait, then one completion object) or streamed as
// server-sent events through the HTTP layer's StreamWriter. Whatever happens to the client or
// to the code, the request ends in the engine before its reply is gone, and nothing throws out.
#pragma once
#include <memory>

#include "server/generation.h"
#include "server/http/http_server.h"
#include "server/openai_reply.h"

namespace kestrel::server {

// Waits for the end, then fills res: the completion, or a 500 if generation failed. A chat's
// splitter (may be null) turns the text into content, reasoning_content and tool_calls.
void reply_whole(Generation& g, const ReplyMeta& meta, ReplySplitter* splitter, http::Response& res);

// Sets res.stream to the SSE loop. `keep` is held until the stream is over (or dropped unrun),
// so a draining server can wait for it.
void reply_streamed(std::shared_ptr<Generation> g, const ReplyMeta& meta, std::shared_ptr<ReplySplitter> splitter,
                    bool include_usage,
                    std::shared_ptr<void> keep, http::Response& res);

}  // namespace kestrel::server
