// kestrel.hpp — thin RAII wrappers over the C API for C++ users (the CLI and server use them).
// Errors become kestrel::Error exceptions on this side of the boundary only.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kestrel.h"

namespace kestrel {

class Error : public std::runtime_error {
 public:
  Error(kestrel_status s, const std::string& msg) : std::runtime_error(msg), status_(s) {}
  kestrel_status status() const { return status_; }

 private:
  kestrel_status status_;
};

inline void check(kestrel_status s) {
  if (s != KESTREL_OK) throw Error(s, kestrel_last_error());
}

struct ModelDeleter { void operator()(kestrel_model* m) const { kestrel_model_free(m); } };
struct ContextDeleter { void operator()(kestrel_context* c) const { kestrel_context_free(c); } };
struct SamplerDeleter { void operator()(kestrel_sampler* s) const { kestrel_sampler_free(s); } };
struct DetokenizerDeleter { void operator()(kestrel_detokenizer* d) const { kestrel_detokenizer_free(d); } };
struct ReplyParserDeleter { void operator()(kestrel_reply_parser* p) const { kestrel_reply_parser_free(p); } };
using ModelPtr = std::unique_ptr<kestrel_model, ModelDeleter>;
using ContextPtr = std::unique_ptr<kestrel_context, ContextDeleter>;
using SamplerPtr = std::unique_ptr<kestrel_sampler, SamplerDeleter>;
using DetokenizerPtr = std::unique_ptr<kestrel_detokenizer, DetokenizerDeleter>;
using ReplyParserPtr = std::unique_ptr<kestrel_reply_parser, ReplyParserDeleter>;

inline ModelPtr load_model(const std::string& path, const kestrel_model_options* opts = nullptr) {
  kestrel_model* m = nullptr;
  check(kestrel_model_load(path.c_str(), opts, &m));
  return ModelPtr(m);
}

inline ContextPtr new_context(const kestrel_model* m, const kestrel_context_options* opts = nullptr) {
  kestrel_context* c = nullptr;
  check(kestrel_context_new(m, opts, &c));
  return ContextPtr(c);
}

inline SamplerPtr new_sampler(const kestrel_sampler_options* opts = nullptr) {
  kestrel_sampler* s = nullptr;
  check(kestrel_sampler_new(opts, &s));
  return SamplerPtr(s);
}

namespace detail {
// Token ids from a (tokens, cap, *n) call: a first try with room for `guess`, then the size asked for.
template <class F>
std::vector<kestrel_token> read_tokens(size_t guess, F call) {
  size_t n = 0;
  std::vector<kestrel_token> ids(guess);
  kestrel_status s = call(ids.data(), ids.size(), &n);
  if (s == KESTREL_ERR_BUFFER_TOO_SMALL) {
    ids.resize(n);
    s = call(ids.data(), ids.size(), &n);
  }
  check(s);
  ids.resize(n);
  return ids;
}
}  // namespace detail

inline std::vector<kestrel_token> tokenize(const kestrel_model* m, const std::string& text, bool add_special,
                                           bool parse_special) {
  return detail::read_tokens(text.size() + 8, [&](kestrel_token* buf, size_t cap, size_t* n) {
    return kestrel_tokenize(m, text.data(), text.size(), add_special, parse_special, buf, cap, n);
  });
}

// The prompt tokens of a rendered chat (one BOS kept when the template wrote it too).
inline std::vector<kestrel_token> chat_tokenize(const kestrel_model* m, const std::string& text) {
  return detail::read_tokens(text.size() + 8, [&](kestrel_token* buf, size_t cap, size_t* n) {
    return kestrel_chat_tokenize(m, text.data(), text.size(), buf, cap, n);
  });
}

inline std::string detokenize(const kestrel_model* m, const std::vector<kestrel_token>& ids, bool render_special) {
  size_t len = 0;
  check(kestrel_detokenize(m, ids.data(), ids.size(), render_special, nullptr, 0, &len));
  std::string out(len + 1, '\0');
  check(kestrel_detokenize(m, ids.data(), ids.size(), render_special, out.data(), out.size(), &len));
  out.resize(len);
  return out;
}

inline std::string token_to_piece(const kestrel_model* m, kestrel_token id, bool render_special) {
  size_t len = 0;
  check(kestrel_token_to_piece(m, id, render_special, nullptr, 0, &len));
  std::string out(len + 1, '\0');
  check(kestrel_token_to_piece(m, id, render_special, out.data(), out.size(), &len));
  out.resize(len);
  return out;
}

inline std::string describe(const kestrel_model* m) {
  size_t len = 0;
  check(kestrel_model_describe(m, nullptr, 0, &len));
  std::string out(len + 1, '\0');
  check(kestrel_model_describe(m, out.data(), out.size(), &len));
  out.resize(len);
  return out;
}

}  // namespace kestrel
