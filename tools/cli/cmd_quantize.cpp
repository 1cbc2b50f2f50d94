// kestrel quantize (placeholder until the chat-quantize work lands).
#include <cstdio>

#include "args.h"

namespace kestrel::cli {

int cmd_quantize(int, char**) {
  std::fprintf(stderr, "kestrel quantize: not implemented yet\n");
  return 1;
}

}  // namespace kestrel::cli
