// The chat's input: on a terminal, libedit (line editing, the Up arrow recalls history, kept in
// ~/.kestrel_history or $KESTREL_HISTORY); on a pipe, plain lines. Either returns nullopt at the
// end of input or when Ctrl-C is pressed at the prompt (`interrupted` says which).
#pragma once
#include <atomic>
#include <optional>
#include <string>

namespace kestrel::cli {

class LineInput {
 public:
  // interrupted: set by the caller's SIGINT handler; SIGINT is delivered only while waiting for
  // a key, so a Ctrl-C just before the wait is not lost.
  LineInput(bool terminal, const std::atomic<bool>& interrupted);
  ~LineInput();
  LineInput(const LineInput&) = delete;
  LineInput& operator=(const LineInput&) = delete;
  std::optional<std::string> read(const char* prompt);
  void remember(const std::string& entry);  // add to the history (terminal only)

 private:
  bool terminal_;
  std::string history_path_;
};

}  // namespace kestrel::cli
