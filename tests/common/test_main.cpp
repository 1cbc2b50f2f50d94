// doctest's main, plus one rule: a run asked to use a backend through KESTREL_BACKEND (what the
// library's "auto" then means) that cannot open it here is skipped (exit 77), not failed: the
// "_cuda" test runs on a machine without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>

#include "backends/backend.h"

int main(int argc, char** argv) {
  if (const char* b = std::getenv("KESTREL_BACKEND"); b && *b) {
    auto d = kestrel::create_device(b);
    if (!d.ok()) {
      std::fprintf(stderr, "skipped: KESTREL_BACKEND=%s: %s\n", b, d.status().message().c_str());
      return 77;
    }
  }
  doctest::Context context(argc, argv);
  return context.run();
}
