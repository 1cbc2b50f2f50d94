// kestrel bench (placeholder until the chat-bench work lands).
#include <cstdio>

#include "args.h"

namespace kestrel::cli {

int cmd_bench(int, char**) {
  std::fprintf(stderr, "kestrel bench: not implemented yet\n");
  return 1;
}

}  // namespace kestrel::cli
