// kestrel synth (placeholder until the chat-synth work lands).
#include <cstdio>

#include "args.h"

namespace kestrel::cli {

int cmd_synth(int, char**) {
  std::fprintf(stderr, "kestrel synth: not implemented yet\n");
  return 1;
}

}  // namespace kestrel::cli
