#include "demo_model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

// The GGUF's bytes, placed in .rodata by the assembler (KESTREL_DEMO_MODEL_FILE: its path, a
// string literal set by CMake, which also rebuilds this file when the model changes).
asm(".section .rodata\n"
    ".balign 64\n"
    ".globl kestrel_demo_gguf_begin\n"
    "kestrel_demo_gguf_begin:\n"
    ".incbin \"" KESTREL_DEMO_MODEL_FILE "\"\n"
    ".globl kestrel_demo_gguf_end\n"
    "kestrel_demo_gguf_end:\n"
    ".previous\n");
extern "C" const unsigned char kestrel_demo_gguf_begin[], kestrel_demo_gguf_end[];

namespace kestrel::cli {

ModelPtr load_demo_model(const kestrel_model_options* opts) {
  // kestrel_model_load takes a path: give it an anonymous in-memory file holding the bytes.
  const int fd = memfd_create(kDemoModelName, MFD_CLOEXEC);
  if (fd < 0) throw Error(KESTREL_ERR_IO, std::string("demo model: memfd_create: ") + std::strerror(errno));
  const unsigned char* p = kestrel_demo_gguf_begin;
  while (p < kestrel_demo_gguf_end) {
    const ssize_t n = ::write(fd, p, static_cast<size_t>(kestrel_demo_gguf_end - p));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw Error(KESTREL_ERR_IO, std::string("demo model: write: ") + std::strerror(errno));
    }
    p += n;
  }
  try {
    ModelPtr m = load_model("/proc/self/fd/" + std::to_string(fd), opts);
    ::close(fd);  // the mapping keeps the memory
    return m;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace kestrel::cli
