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

// How a stream's events are written: OpenAI's chunks (openai_stream_format) or Anthropic's
// events (anthropic_reply.h). Each call returns the events to send ("" for none); m.index names
// the choice.
class StreamFormat {
 public:
  virtual ~StreamFormat() = default;
  virtual std::string start(const ReplyMeta& m) = 0;  // per choice, before its text
  // What text added: content, reasoning_content, tool_calls (a completion's text: content).
  virtual std::string delta(const ReplyMeta& m, const json& d, const json& logprobs) = 0;
  virtual std::string finish(const ReplyMeta& m, const kestrel_request_result& r, bool called_tools) = 0;
  virtual std::string end(const ReplyMeta& m, const std::vector<kestrel_request_result>& results) = 0;
  virtual std::string error(const ApiError& e) = 0;
};
std::shared_ptr<StreamFormat> openai_stream_format(bool include_usage);

// A finished choice's whole reply: a chat's message (content, reasoning_content, tool_calls) or
// a completion's {"content": text}; its logprobs in *logprobs.
json whole_reply(Generation& g, ReplySplitter* splitter, const ReplyMeta& meta, json* logprobs);

// Waits for the end, then fills res: the completion with every choice, or a 500 if generation
// failed.
void reply_whole(const Choices& c, const ReplyMeta& meta, http::Response& res);

// Sets res.stream to the SSE loop, its events written by `format`. `keep` is held until the
// stream is over (or dropped unrun), so a draining server can wait for it.
void reply_streamed(Choices c, const ReplyMeta& meta, std::shared_ptr<StreamFormat> format, std::shared_ptr<void> keep,
                    http::Response& res);

}  // namespace kestrel::server
