// Minimal leveled logging to stderr (or a callback set through the C API).
#pragma once
#include <cstdarg>

#include "kestrel.h"

namespace kestrel {

void log_set_callback(kestrel_log_fn fn, void* user);
void log_set_level(kestrel_log_level level);
void logf(kestrel_log_level level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

#define KS_LOG_DEBUG(...) ::kestrel::logf(KESTREL_LOG_DEBUG, __VA_ARGS__)
#define KS_LOG_INFO(...) ::kestrel::logf(KESTREL_LOG_INFO, __VA_ARGS__)
#define KS_LOG_WARN(...) ::kestrel::logf(KESTREL_LOG_WARN, __VA_ARGS__)
#define KS_LOG_ERROR(...) ::kestrel::logf(KESTREL_LOG_ERROR, __VA_ARGS__)

}  // namespace kestrel
