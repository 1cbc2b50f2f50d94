#include "core/status.h"

namespace kestrel {

std::string Status::to_string() const {
  return std::string(kestrel_status_name(code_)) + (message_.empty() ? "" : ": " + message_);
}

}  // namespace kestrel
