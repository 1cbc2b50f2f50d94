#include "server/http/http_parser.h"

#include <algorithm>

namespace kestrel::server::http {
namespace {

// Far above any body limit, below any overflow.
constexpr uint64_t kLengthCap = uint64_t{1} << 62;
// A chunk-size line (hex size + extensions) longer than this is refused.
constexpr size_t kMaxChunkLine = 4096;

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// RFC 9110 token characters (methods, header names, transfer codings).
bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+':
    case '-': case '.': case '^': case '_': case '`': case '|': case '~':
      return true;
    default:
      return false;
  }
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Client text quoted in a message: cut short, so an error reply stays small.
// Bytes outside printable ASCII become '?', so the message is valid UTF-8 whatever was sent.
std::string quote(std::string_view s) {
  constexpr size_t kMax = 64;
  std::string q = "'";
  for (char c : s.substr(0, kMax)) q += static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f ? c : '?';
  return q + (s.size() > kMax ? "...'" : "'");
}

ParseResult fail(int status, std::string message) {
  ParseResult r;
  r.state = Parse::kError;
  r.status = status;
  r.message = std::move(message);
  return r;
}

// Calls f on each comma-separated element of a list-valued field, trimmed, empty ones skipped.
template <class F>
void for_each_element(std::string_view value, F&& f) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    const std::string_view item = trim(value.substr(0, comma));
    if (!item.empty()) f(item);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
}

// origin-form "/p?q", asterisk-form "*" (OPTIONS only) or absolute-form "http://host/p?q".
bool split_target(std::string_view method, std::string_view target, std::string* path) {
  if (target == "*") {
    path->assign(1, '*');
    return method == "OPTIONS";
  }
  std::string_view rest = target;
  if (target.front() != '/') {
    const size_t scheme_end = target.find("://");
    if (scheme_end == std::string_view::npos) return false;
    const std::string_view scheme = target.substr(0, scheme_end);
    if (!iequals(scheme, "http") && !iequals(scheme, "https")) return false;
    rest = target.substr(scheme_end + 3);
    const size_t slash = rest.find_first_of("/?");
    if (slash == 0 || rest.empty()) return false;  // no authority
    rest = slash == std::string_view::npos ? std::string_view("/") : rest.substr(slash);
    if (rest.front() == '?') {
      path->assign(1, '/');
      return true;
    }
  }
  *path = std::string(rest.substr(0, rest.find_first_of("?#")));
  return true;
}

ParseResult parse_request_line(std::string_view line, RequestHead* out) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line (expected 'METHOD TARGET HTTP/1.1')");
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  if (!is_token(method)) return fail(400, "invalid method " + quote(method));
  const bool target_ok = !target.empty() && std::all_of(target.begin(), target.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (!target_ok || !split_target(method, target, &out->path)) return fail(400, "invalid request target " + quote(target));
  const bool version_ok = version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[6] == '.' &&
                          version[5] >= '0' && version[5] <= '9' && version[7] >= '0' && version[7] <= '9';
  if (!version_ok) return fail(400, "invalid HTTP version " + quote(version));
  if (version[5] != '1') return fail(400, "unsupported HTTP version " + quote(version) + " (HTTP/1.1 or HTTP/1.0)");
  out->method = std::string(method);
  out->target = std::string(target);
  out->version = version[7] == '0' ? "HTTP/1.0" : "HTTP/1.1";
  return {};
}

ParseResult parse_header_line(std::string_view line, const Limits& limits, RequestHead* out) {
  if (line.front() == ' ' || line.front() == '\t') return fail(400, "obsolete line folding in the request head");
  if (out->headers.size() >= limits.max_headers)
    return fail(431, "too many header fields (limit " + std::to_string(limits.max_headers) + ")");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return fail(400, "header line without a colon: " + quote(line));
  const std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
  if (!is_token(name)) return fail(400, "invalid header name " + quote(name));
  for (char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return fail(400, "invalid character in header " + quote(name));
  }
  out->headers.emplace_back(std::string(name), std::string(value));
  return {};
}

// Content-Length, Transfer-Encoding, Connection and Expect, once every field is in.
ParseResult read_framing(RequestHead* h) {
  bool close = false, keep_alive = false, has_te = false;
  for (const auto& [name, value] : h->headers) {
    if (iequals(name, "content-length")) {
      bool bad = false;
      int n_values = 0;
      for_each_element(value, [&](std::string_view v) {
        ++n_values;
        uint64_t n = 0;
        for (char c : v) {
          if (c < '0' || c > '9') {
            bad = true;
            return;
          }
          n = std::min(kLengthCap, n * 10 + static_cast<uint64_t>(c - '0'));
        }
        if (h->has_content_length && n != h->content_length) bad = true;
        h->has_content_length = true;
        h->content_length = n;
      });
      if (bad || n_values == 0) return fail(400, "invalid or conflicting Content-Length " + quote(value));
    } else if (iequals(name, "transfer-encoding")) {
      has_te = true;
      bool only_chunked = !h->chunked;  // "chunked" exactly once, and nothing else
      int n = 0;
      for_each_element(value, [&](std::string_view v) { only_chunked = only_chunked && ++n == 1 && iequals(v, "chunked"); });
      if (!only_chunked || n == 0) return fail(400, "unsupported Transfer-Encoding " + quote(value) + " (only chunked)");
      h->chunked = true;
    } else if (iequals(name, "connection")) {
      for_each_element(value, [&](std::string_view v) {
        if (iequals(v, "close")) close = true;
        if (iequals(v, "keep-alive")) keep_alive = true;
      });
    } else if (iequals(name, "expect")) {
      if (!iequals(value, "100-continue")) return fail(417, "unsupported Expect " + quote(value));
      h->expect_continue = h->version == "HTTP/1.1";
    }
  }
  if (has_te && h->has_content_length) return fail(400, "both Content-Length and Transfer-Encoding were sent");
  const bool http10 = h->version == "HTTP/1.0";
  h->keep_alive = !close && (http10 ? keep_alive && !has_te : true);
  return {};
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string find_header(const std::vector<std::pair<std::string, std::string>>& headers, std::string_view name) {
  for (const auto& [k, v] : headers)
    if (iequals(k, name)) return v;
  return {};
}

std::string Request::header(std::string_view name) const { return find_header(headers, name); }

ParseResult parse_head(std::string_view buf, const Limits& limits, RequestHead* out) {
  *out = RequestHead{};
  size_t pos = 0;
  // Empty lines before a request (e.g. a CRLF a client sent after its last body) are ignored.
  while (pos < buf.size() && (buf[pos] == '\r' || buf[pos] == '\n')) {
    if (buf[pos] == '\r' && pos + 1 == buf.size()) return {};
    if (buf[pos] == '\r' && buf[pos + 1] != '\n') return fail(400, "bare CR in the request head");
    pos += buf[pos] == '\r' ? 2 : 1;
    if (pos > limits.max_request_line) return fail(400, "too many empty lines before the request line");
  }
  const size_t start = pos;
  bool first = true;
  for (;;) {
    const size_t nl = buf.find('\n', pos);
    // Limits hold on what has arrived, so waiting for more never grows a buffer past them (the
    // same checks in the same order as on a complete line, so every prefix agrees with the whole).
    if (nl == std::string_view::npos) {
      // An unfinished request line can still become a 414 (never a 431 yet); +1: a CR may end it.
      if (first && buf.size() - start > limits.max_request_line + 1)
        return fail(414, "request line longer than " + std::to_string(limits.max_request_line) + " bytes");
      if (!first && buf.size() - start > limits.max_header_bytes)
        return fail(431, "request head larger than " + std::to_string(limits.max_header_bytes) + " bytes");
      return {};
    }
    std::string_view line = buf.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (first && line.size() > limits.max_request_line)
      return fail(414, "request line longer than " + std::to_string(limits.max_request_line) + " bytes");
    if (nl + 1 - start > limits.max_header_bytes)
      return fail(431, "request head larger than " + std::to_string(limits.max_header_bytes) + " bytes");
    if (line.find('\r') != std::string_view::npos) return fail(400, "bare CR in the request head");
    pos = nl + 1;
    if (first) {
      ParseResult r = parse_request_line(line, out);
      if (r.state == Parse::kError) return r;
      first = false;
      continue;
    }
    if (line.empty()) break;
    ParseResult r = parse_header_line(line, limits, out);
    if (r.state == Parse::kError) return r;
  }
  ParseResult r = read_framing(out);
  if (r.state == Parse::kError) return r;
  r.state = Parse::kComplete;
  r.consumed = pos;
  return r;
}

ParseResult ChunkedDecoder::feed(std::string_view in, std::string* body) {
  size_t pos = 0;
  auto need_more = [&] {
    ParseResult r;
    r.consumed = pos;
    return r;
  };
  while (state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t take = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - pos));
      body->append(in.substr(pos, take));
      pos += take;
      remaining_ -= take;
      if (remaining_ > 0) return need_more();
      state_ = State::kDataEnd;
      continue;
    }
    if (state_ == State::kDataEnd) {  // the CRLF (or LF) after a chunk's data
      if (pos == in.size() || (in[pos] == '\r' && pos + 1 == in.size())) return need_more();
      if (in[pos] == '\r') ++pos;
      if (in[pos] != '\n') return fail(400, "chunked body: chunk data not followed by CRLF");
      ++pos;
      state_ = State::kSize;
      continue;
    }
    const size_t nl = in.find('\n', pos);
    // Size checks before anything else, and on incomplete lines too (+1: a CR may end the line),
    // so that a body fed in pieces fails exactly as the same body fed at once.
    if (nl == std::string_view::npos) {
      if (state_ == State::kSize && in.size() - pos > kMaxChunkLine + 1) return fail(400, "chunked body: chunk-size line too long");
      if (state_ == State::kTrailer && trailer_bytes_ + (in.size() - pos) > max_trailer_)
        return fail(431, "chunked body: trailer fields larger than " + std::to_string(max_trailer_) + " bytes");
      return need_more();
    }
    std::string_view line = in.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = nl + 1;
    if (state_ == State::kSize && line.size() > kMaxChunkLine) return fail(400, "chunked body: chunk-size line too long");
    if (state_ == State::kTrailer) {
      trailer_bytes_ += line.size() + 2;
      if (trailer_bytes_ > max_trailer_)
        return fail(431, "chunked body: trailer fields larger than " + std::to_string(max_trailer_) + " bytes");
    }
    if (line.find('\r') != std::string_view::npos) return fail(400, "chunked body: bare CR");
    if (state_ == State::kTrailer) {
      if (line.empty()) state_ = State::kDone;
      continue;
    }
    // chunk-size [BWS ; chunk-ext] : hex digits, then nothing or extensions.
    uint64_t size = 0;
    size_t i = 0;
    for (; i < line.size(); ++i) {
      const char c = lower(line[i]);
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) break;
      size = std::min(kLengthCap, size * 16 + static_cast<uint64_t>(d));
    }
    const std::string_view after = trim(line.substr(i));
    if (i == 0 || (!after.empty() && after.front() != ';')) return fail(400, "chunked body: invalid chunk size " + quote(line));
    if (size > max_body_ - std::min(max_body_, body->size()))
      return fail(413, "request body larger than " + std::to_string(max_body_) + " bytes");
    remaining_ = size;
    state_ = size == 0 ? State::kTrailer : State::kData;
  }
  ParseResult r;
  r.state = Parse::kComplete;
  r.consumed = pos;
  return r;
}

}  // namespace kestrel::server::http
