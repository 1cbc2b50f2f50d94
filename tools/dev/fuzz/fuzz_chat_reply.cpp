// libFuzzer target: a model's reply split into content, reasoning and tool calls
// (chat/chat_reply.h). The first byte picks the family (and whether the prompt opened reasoning,
// and reasoning inline); the rest is the reply. The whole parse is checked against the streamed
// one: the text parsed as partial at every split point, each parse extending the one before
// (nothing shown is taken back), the deltas adding up to the whole.
//
// A bug is: a crash or sanitizer report, a leak, a timeout, or a streamed parse that takes back
// what it showed or does not add up to the whole.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chat/chat_reply.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 2048) return 0;
  const auto& families = kestrel::chat_syntaxes();
  const kestrel::ChatSyntax& syntax = families[data[0] % families.size()];
  kestrel::ReplyOptions o;
  o.reasoning_open = (data[0] / families.size()) % 2;
  o.reasoning_inline = (data[0] / families.size() / 2) % 2;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const kestrel::ChatReply whole = kestrel::parse_reply(syntax, text, o);
  o.partial = true;
  kestrel::ChatReply before, sum;
  for (size_t n = 0; n <= text.size(); ++n) {
    if (n == text.size()) o.partial = false;
    const kestrel::ChatReply now = kestrel::parse_reply(syntax, text.substr(0, n), o);
    if (now.content.compare(0, before.content.size(), before.content) != 0) __builtin_trap();
    if (now.reasoning.compare(0, before.reasoning.size(), before.reasoning) != 0) __builtin_trap();
    if (now.tool_calls.size() < before.tool_calls.size()) __builtin_trap();
    for (size_t i = 0; i < before.tool_calls.size(); ++i)
      if (!(now.tool_calls[i] == before.tool_calls[i])) __builtin_trap();
    const kestrel::ChatReply d = kestrel::reply_delta(before, now);
    sum.content += d.content;
    sum.reasoning += d.reasoning;
    sum.tool_calls.insert(sum.tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
    before = now;
  }
  if (!(sum == whole)) __builtin_trap();
  return 0;
}
