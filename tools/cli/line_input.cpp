#include "line_input.h"

#include <editline/readline.h>
#include <langinfo.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kestrel::cli {
namespace {

const std::atomic<bool>* g_interrupted = nullptr;

// One byte from stdin, waiting with SIGINT unblocked only inside ppoll(); -1 at the end of input
// or on Ctrl-C.
int read_byte() {
  sigset_t block, open;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  pthread_sigmask(SIG_BLOCK, &block, &open);
  sigdelset(&open, SIGINT);
  int result = -1;
  for (;;) {
    if (g_interrupted && g_interrupted->load()) break;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (ppoll(&p, 1, nullptr, &open) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    unsigned char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n == 1) result = c;
    break;
  }
  pthread_sigmask(SIG_UNBLOCK, &block, nullptr);
  return result;
}

// libedit's key reader: a whole UTF-8 character as its code point (libedit keeps wide characters).
int getc_utf8(FILE*) {
  const int c = read_byte();
  if (c < 0x80) return c;  // ASCII, or -1
  const int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  int cp = c & (0x3F >> extra);
  for (int i = 0; i < extra; ++i) {
    const int n = read_byte();
    if (n < 0) return -1;
    cp = (cp << 6) | (n & 0x3F);
  }
  return extra ? cp : 0xFFFD;
}

// libedit turns its wide characters back into bytes through the locale: make that UTF-8.
void use_utf8_ctype() {
  const char* l = std::setlocale(LC_CTYPE, "");
  if (!l || std::strcmp(nl_langinfo(CODESET), "UTF-8") != 0) std::setlocale(LC_CTYPE, "C.UTF-8");
}

}  // namespace

LineInput::LineInput(bool terminal, const std::atomic<bool>& interrupted) : terminal_(terminal) {
  g_interrupted = &interrupted;
  if (!terminal_) return;
  use_utf8_ctype();
  rl_catch_signals = 0;  // Ctrl-C is ours (read_byte)
  rl_getc_function = getc_utf8;
  rl_readline_name = "kestrel";
  using_history();
  stifle_history(1000);
  if (const char* p = std::getenv("KESTREL_HISTORY")) history_path_ = p;
  else if (const char* home = std::getenv("HOME")) history_path_ = std::string(home) + "/.kestrel_history";
  if (!history_path_.empty()) read_history(history_path_.c_str());
}

LineInput::~LineInput() {
  if (terminal_ && !history_path_.empty()) write_history(history_path_.c_str());
}

std::optional<std::string> LineInput::read(const char* prompt) {
  if (terminal_) {
    char* line = readline(prompt);
    if (!line) return std::nullopt;
    std::string s(line);
    std::free(line);
    return s;
  }
  std::string line;
  for (;;) {
    const int c = read_byte();
    if (c < 0) return line.empty() ? std::nullopt : std::optional<std::string>(line);
    if (c == '\n') return line;
    line.push_back(static_cast<char>(c));
  }
}

void LineInput::remember(const std::string& entry) {
  if (terminal_ && !entry.empty()) add_history(entry.c_str());
}

}  // namespace kestrel::cli
