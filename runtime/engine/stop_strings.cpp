#include "engine/stop_strings.h"

#include <algorithm>

namespace kestrel {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) continue;
    stops_.push_back(std::move(stops[i]));
    index_.push_back(static_cast<int>(i));
  }
}

std::string StopStrings::push(std::string_view text) {
  held_ += text;
  size_t cut = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t at = held_.find(stops_[i]);
    if (at < cut) {  // the earliest match; at one place, the first listed
      cut = at;
      matched_ = index_[i];
    }
  }
  if (cut != std::string::npos) {
    std::string out = held_.substr(0, cut);
    held_.clear();
    stopped_ = true;
    return out;
  }
  size_t keep = 0;  // the longest tail of held_ that begins some stop string
  for (const std::string& s : stops_)
    for (size_t k = std::min(s.size(), held_.size() + 1); k-- > keep + 1;)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::take_held() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace kestrel
