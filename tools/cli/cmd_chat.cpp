// kestrel chat (placeholder until the chat-template work lands).
#include <cstdio>

#include "args.h"

namespace kestrel::cli {

int cmd_chat(int, char**) {
  std::fprintf(stderr, "kestrel chat: not implemented yet\n");
  return 1;
}

}  // namespace kestrel::cli
