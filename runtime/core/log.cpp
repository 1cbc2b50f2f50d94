#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace kestrel {
namespace {
std::mutex g_mu;
kestrel_log_fn g_fn = nullptr;
void* g_user = nullptr;
std::atomic<int> g_level{KESTREL_LOG_INFO};
const char* level_name(kestrel_log_level l) {
  switch (l) {
    case KESTREL_LOG_DEBUG: return "debug";
    case KESTREL_LOG_INFO: return "info";
    case KESTREL_LOG_WARN: return "warn";
    case KESTREL_LOG_ERROR: return "error";
    default: return "";
  }
}
}  // namespace

void log_set_callback(kestrel_log_fn fn, void* user) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_fn = fn;
  g_user = user;
}

void log_set_level(kestrel_log_level level) { g_level.store(level); }

void logf(kestrel_log_level level, const char* fmt, ...) {
  if (level < g_level.load()) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_fn) g_fn(level, buf, g_user);
  else std::fprintf(stderr, "kestrel: %s: %s\n", level_name(level), buf);
}

}  // namespace kestrel
