#include "server/http/http_writer.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>

#include "server/http/http_parser.h"

namespace kestrel::server::http {
namespace {

bool header_safe(std::string_view s) { return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos; }

// Framing headers are the layer's business; a handler's own copies are dropped.
bool framing_header(std::string_view name) {
  return iequals(name, "content-length") || iequals(name, "transfer-encoding") || iequals(name, "connection");
}

std::string head_common(const Response& res, bool keep_alive) {
  const int status = res.status >= 100 && res.status <= 999 ? res.status : 500;
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text(status)) + "\r\n";
  if (!res.content_type.empty() && header_safe(res.content_type)) h += "Content-Type: " + res.content_type + "\r\n";
  for (const auto& [name, value] : res.headers)
    if (!name.empty() && header_safe(name) && header_safe(value) && name.find(':') == std::string::npos && !framing_header(name))
      h += name + ": " + value + "\r\n";
  h += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  return h;
}

int poll_ms(double s) { return s <= 0 ? 0 : s > 3.6e6 ? 3600 * 1000 : static_cast<int>(s * 1000 + 0.5); }

}  // namespace

std::string_view status_text(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

std::string format_fixed(const Response& res, bool keep_alive) {
  std::string out = head_common(res, keep_alive);
  // 1xx, 204 and 304 replies carry no body (RFC 9110 6.4.1).
  const bool no_body = (res.status >= 100 && res.status < 200) || res.status == 204 || res.status == 304;
  if (!no_body) out += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  out += "\r\n";
  if (!no_body) out += res.body;
  return out;
}

std::string format_stream_head(const Response& res, bool chunked, bool keep_alive) {
  std::string out = head_common(res, keep_alive && chunked);
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  return out + "\r\n";
}

std::string default_error_body(int status, std::string_view message) {
  std::string m;
  for (char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      m += '\\';
      m += ch;
    } else if (c < 0x20 || c >= 0x7f) {  // ASCII only: never invalid UTF-8 in the reply
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c < 0x20 ? c : 0xfffd);
      m += esc;
    } else {
      m += ch;
    }
  }
  const char* type = status >= 500 ? "server_error" : "invalid_request_error";
  return std::string("{\"error\":{\"message\":\"") + m + "\",\"type\":\"" + type + "\",\"param\":null,\"code\":null}}";
}

bool send_all(int fd, std::string_view data, double timeout_s) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    // The socket buffer is full: wait until the client reads, at most timeout_s without progress.
    pollfd p{fd, POLLOUT, 0};
    int r;
    do {
      r = ::poll(&p, 1, poll_ms(timeout_s));
    } while (r < 0 && errno == EINTR);
    if (r <= 0 || (p.revents & (POLLERR | POLLHUP | POLLNVAL))) return false;
  }
  return true;
}

bool peer_alive(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) < 0) return errno == EINTR;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return false;
  if (!(p.revents & POLLIN)) return true;
  // Readable: either data (a pipelined request: still alive) or end of stream (gone).
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

bool SocketStreamWriter::write(std::string_view data) {
  if (!ok_) return false;
  if (data.empty()) return true;  // an empty chunk would end the reply
  if (chunked_) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    std::string chunk;
    chunk.reserve(data.size() + 32);
    chunk.append(size).append(data).append("\r\n");
    ok_ = send_all(fd_, chunk, timeout_s_);
  } else {
    ok_ = send_all(fd_, data, timeout_s_);
  }
  return ok_;
}

bool SocketStreamWriter::alive() { return ok_ && peer_alive(fd_); }

bool SocketStreamWriter::finish() {
  if (ok_ && chunked_) ok_ = send_all(fd_, "0\r\n\r\n", timeout_s_);
  return ok_;
}

}  // namespace kestrel::server::http
