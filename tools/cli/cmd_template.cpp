// kestrel template (placeholder until the chat-template work lands).
#include <cstdio>

#include "args.h"

namespace kestrel::cli {

int cmd_template(int, char**) {
  std::fprintf(stderr, "kestrel template: not implemented yet\n");
  return 1;
}

}  // namespace kestrel::cli
