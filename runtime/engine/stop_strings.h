// Stop strings over streamed text: the text ends before the first match, and a tail that could
// still grow into a stop string is held back until it cannot (what the engine and
// kestrel_generate show a caller).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops = {});
  // Appends text; returns what may be shown now. After a match stopped() is true and the
  // returned text ends before the stop string (nothing held remains).
  std::string push(std::string_view text);
  bool stopped() const { return stopped_; }
  // Which stop string matched (its index in the list given), -1 before a match.
  int matched() const { return matched_; }
  // The held-back tail, when generation ends without a match.
  std::string take_held();

 private:
  std::vector<std::string> stops_;
  std::vector<int> index_;  // of each kept stop string in the list given (empty ones are dropped)
  std::string held_;
  bool stopped_ = false;
  int matched_ = -1;
};

}  // namespace kestrel
