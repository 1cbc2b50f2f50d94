// Status names, the last error, the version and logging.
#include "api/guard.h"
#include "core/log.h"
#include "kestrel.h"

namespace kestrel::api {
namespace {
thread_local std::string t_last_error;
}

void set_last_error(const std::string& message) { t_last_error = message; }
const char* last_error_cstr() { return t_last_error.c_str(); }

kestrel_status fail(kestrel_status code, const std::string& message) {
  t_last_error = message;
  return code;
}

kestrel_status fail(const Status& st) { return fail(st.code(), st.message()); }

Status check_buffer(const char* fn, const void* buf, size_t cap) {
  if (buf || cap == 0) return Status::Ok();
  return Error(KESTREL_ERR_INVALID_ARGUMENT,
               std::string(fn) + ": buf is NULL but cap is " + std::to_string(cap) + " (pass cap 0 to ask for the size)");
}

kestrel_status copy_out(const char* fn, const std::string& s, char* buf, size_t cap, size_t* len) {
  const Status st = check_buffer(fn, buf, cap);
  if (!st.ok()) return fail(st);
  if (len) *len = s.size();
  if (!buf) return len ? KESTREL_OK : fail(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": no buffer and no length pointer");
  if (cap < s.size() + 1) {
    return fail(KESTREL_ERR_BUFFER_TOO_SMALL,
                std::string(fn) + ": buffer of " + std::to_string(cap) + " bytes is too small: " + std::to_string(s.size() + 1) + " needed");
  }
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return KESTREL_OK;
}

kestrel_status copy_tokens(const char* fn, const std::vector<int32_t>& ids, kestrel_token* tokens, size_t cap, size_t* n) {
  *n = ids.size();
  if (ids.size() > cap || (!tokens && !ids.empty()))
    return fail(KESTREL_ERR_BUFFER_TOO_SMALL,
                std::string(fn) + ": " + std::to_string(ids.size()) + " tokens do not fit in a buffer of " + std::to_string(cap));
  std::copy(ids.begin(), ids.end(), tokens);
  return KESTREL_OK;
}

}  // namespace kestrel::api

extern "C" {

const char* kestrel_status_name(kestrel_status status) {
  switch (status) {
    case KESTREL_OK: return "OK";
    case KESTREL_ERR_INVALID_ARGUMENT: return "ERR_INVALID_ARGUMENT";
    case KESTREL_ERR_IO: return "ERR_IO";
    case KESTREL_ERR_FORMAT: return "ERR_FORMAT";
    case KESTREL_ERR_UNSUPPORTED: return "ERR_UNSUPPORTED";
    case KESTREL_ERR_OUT_OF_MEMORY: return "ERR_OUT_OF_MEMORY";
    case KESTREL_ERR_OUT_OF_RANGE: return "ERR_OUT_OF_RANGE";
    case KESTREL_ERR_CONTEXT_FULL: return "ERR_CONTEXT_FULL";
    case KESTREL_ERR_BUFFER_TOO_SMALL: return "ERR_BUFFER_TOO_SMALL";
    case KESTREL_ERR_CANCELLED: return "ERR_CANCELLED";
    case KESTREL_ERR_BACKEND: return "ERR_BACKEND";
    case KESTREL_ERR_INTERNAL: return "ERR_INTERNAL";
  }
  return "ERR_UNKNOWN";
}

const char* kestrel_last_error(void) { return kestrel::api::last_error_cstr(); }

uint32_t kestrel_api_version(void) { return KESTREL_API_VERSION; }

void kestrel_log_set(kestrel_log_fn fn, void* user, kestrel_log_level min_level) {
  kestrel::log_set_callback(fn, user);
  kestrel::log_set_level(min_level);
}

}  // extern "C"
