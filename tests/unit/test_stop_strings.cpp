// StopStrings (engine/stop_strings.h) over text pushed piece by piece: the text ends before the
// earliest match, a tail that could still become a stop string waits, and matched() names the
// stop string by its index in the list given (empty ones dropped, the first listed on a tie).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/stop_strings.h"

using kestrel::StopStrings;

namespace {

// Pushes text one byte at a time; what was shown, and the stop string's index.
std::pair<std::string, int> run(const std::vector<std::string>& stops, const std::string& text) {
  StopStrings s(stops);
  std::string shown;
  for (char c : text) {
    shown += s.push(std::string(1, c));
    if (s.stopped()) break;
  }
  if (!s.stopped()) shown += s.take_held();
  return {shown, s.matched()};
}

}  // namespace

TEST_CASE("stop strings: the earliest match wins and is named by its index") {
  CHECK(run({"", "end", "nd"}, "the end of it") == std::pair<std::string, int>{"the ", 1});
  CHECK(run({"nd", "", "end"}, "the end of it") == std::pair<std::string, int>{"the ", 2});  // starts earlier
  CHECK(run({"x", "ab"}, "zzabx") == std::pair<std::string, int>{"zz", 1});
  CHECK(run({"ab", "ab"}, "ab") == std::pair<std::string, int>{"", 0});  // a tie: the first listed
  CHECK(run({"abc"}, "xxab") == std::pair<std::string, int>{"xxab", -1});  // never matched: the held tail shows
  StopStrings none;
  CHECK(none.push("hello") == "hello");
  CHECK(none.matched() == -1);
}
