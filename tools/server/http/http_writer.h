// Writing HTTP/1.1 replies to a socket: the status line and headers of fixed and streamed replies,
// blocking sends bounded by a timeout on a non-blocking socket (MSG_NOSIGNAL: a closed peer is an
// error, never a SIGPIPE), and the StreamWriter handed to streaming handlers.
#pragma once
#include <string>
#include <string_view>

#include "server/http/http_server.h"

namespace kestrel::server::http {

// "OK", "Not Found", ...; "Unknown" for a code without a text here.
std::string_view status_text(int status);

// A whole fixed reply: status line, headers (Content-Type, Content-Length, Connection, the
// response's extra headers), body. Header values holding CR or LF are left out.
std::string format_fixed(const Response& res, bool keep_alive);
// The head of a streamed reply: chunked (HTTP/1.1) or close-delimited (HTTP/1.0, no length).
std::string format_stream_head(const Response& res, bool chunked, bool keep_alive);
// The body the layer sends when no error formatter is set (or it threw): an OpenAI-style error.
std::string default_error_body(int status, std::string_view message);

// Sends all of data, waiting for the socket to take more at most timeout_s each time it is full.
// False on a send error, a closed peer or a timeout (then the connection must be dropped).
bool send_all(int fd, std::string_view data, double timeout_s);
// False once the peer has closed or reset the connection (never blocks, reads nothing).
bool peer_alive(int fd);

class SocketStreamWriter final : public StreamWriter {
 public:
  // ok = false: the head could not be sent; every write then fails at once.
  SocketStreamWriter(int fd, bool chunked, double timeout_s, bool ok)
      : fd_(fd), chunked_(chunked), timeout_s_(timeout_s), ok_(ok) {}
  bool write(std::string_view data) override;
  bool alive() override;
  // Ends the reply: the terminating chunk when chunked. False if anything failed.
  bool finish();
  bool ok() const { return ok_; }

 private:
  int fd_;
  bool chunked_;
  double timeout_s_;
  bool ok_;
};

}  // namespace kestrel::server::http
