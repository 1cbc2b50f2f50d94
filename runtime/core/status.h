// Status and Expected<T>: how errors travel inside Kestrel. Nothing that file bytes, user
// arguments or the network can reach may throw or abort; it returns a Status instead.
#pragma once
#include <string>
#include <utility>
#include <variant>

#include "kestrel.h"

namespace kestrel {

class Status {
 public:
  Status() = default;  // OK
  Status(kestrel_status code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return {}; }

  bool ok() const { return code_ == KESTREL_OK; }
  kestrel_status code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<STATUS_NAME>: message"
  std::string to_string() const;

 private:
  kestrel_status code_ = KESTREL_OK;
  std::string message_;
};

inline Status Error(kestrel_status code, std::string message) { return {code, std::move(message)}; }

// A value or the Status explaining why there is none.
template <class T>
class Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}        // NOLINT(implicit)
  Expected(Status status) : v_(std::move(status)) {}  // NOLINT(implicit); must not be ok()
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const T& value() const& { return std::get<0>(v_); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<1>(v_);
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kestrel

// Propagate a non-ok Status from an expression returning Status.
#define KS_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::kestrel::Status ks_st_ = (expr);         \
    if (!ks_st_.ok()) return ks_st_;           \
  } while (0)
