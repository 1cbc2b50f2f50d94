// The C boundary's helpers: the thread-local last error, and a guard that turns any C++
// exception into KESTREL_ERR_INTERNAL / OUT_OF_MEMORY so nothing unwinds into C callers.
#pragma once
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "core/status.h"

namespace kestrel::api {

void set_last_error(const std::string& message);
const char* last_error_cstr();
kestrel_status fail(kestrel_status code, const std::string& message);
kestrel_status fail(const Status& st);

template <class F>
kestrel_status guard(const char* fn, F&& f) noexcept {
  try {
    set_last_error("");
    return f();
  } catch (const std::bad_alloc&) {
    return fail(KESTREL_ERR_OUT_OF_MEMORY, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(KESTREL_ERR_INTERNAL, std::string(fn) + ": internal error: " + e.what());
  } catch (...) {
    return fail(KESTREL_ERR_INTERNAL, std::string(fn) + ": internal error");
  }
}

// A caller buffer (buf, cap): NULL with cap > 0 is INVALID_ARGUMENT naming fn; NULL with cap 0 is a
// sizing call. Checked before a call changes any state, so a refused call changes nothing.
Status check_buffer(const char* fn, const void* buf, size_t cap);
// Copies text into a caller buffer with the (buf, cap, *len) convention (check_buffer first).
kestrel_status copy_out(const char* fn, const std::string& s, char* buf, size_t cap, size_t* len);
// Copies token ids into a caller array (tokens, cap, *n); check_buffer first.
kestrel_status copy_tokens(const char* fn, const std::vector<int32_t>& ids, kestrel_token* tokens, size_t cap, size_t* n);

#define KS_API_CHECK_ARG(cond, fn, what) \
  if (!(cond)) return ::kestrel::api::fail(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + (what))

// Options structs: copy at most what the caller's struct_size covers over our defaults.
template <class T>
bool read_options(const T* in, T* out, const char** error) {
  if (!in) return true;
  if (in->struct_size < sizeof(uint32_t) || in->struct_size > 4096) {
    *error = "struct_size is not set (call the matching *_init() first)";
    return false;
  }
  std::memcpy(out, in, std::min<size_t>(in->struct_size, sizeof(T)));
  out->struct_size = sizeof(T);
  return true;
}

// Out structs (results, statistics): the caller's struct_size says how many bytes it has room
// for; 0 (never set) means the struct's first published size, `v1_size`.
template <class T>
void write_out(const T& value, T* out, size_t v1_size) {
  if (out->struct_size != 0 && out->struct_size < sizeof(uint32_t)) return;
  const size_t room = out->struct_size == 0 ? v1_size : std::min<size_t>(out->struct_size, sizeof(T));
  std::memcpy(out, &value, std::min(room, sizeof(T)));
  out->struct_size = static_cast<uint32_t>(std::min(room, sizeof(T)));
}

}  // namespace kestrel::api
