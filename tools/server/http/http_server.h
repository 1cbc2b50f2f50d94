// The server's own HTTP/1.1 layer: one event-loop thread accepts connections and reads request
// heads and bodies under deadlines and size limits (so a slow or hostile client holds no worker),
// and only a complete request reaches a worker thread, which runs the route's handler. Replies
// are fixed (Content-Length) or streamed (chunked for HTTP/1.1, close-delimited for HTTP/1.0).
// Keep-alive and pipelining: a connection goes back to the loop after its reply, and requests
// already buffered behind it are answered next, in order.
//
// Details a caller may rely on: request bodies come with Content-Length or chunked
// (Transfer-Encoding: chunked, same size limit); `Expect: 100-continue` is answered before the body
// is read (or with 413 instead); HEAD is 405 unless a HEAD route exists; a head or body limit
// broken, or a deadline missed, gets the error reply and the connection is closed. The error
// formatter is called on the loop thread and on worker threads (it must be thread-safe). route()
// and the set_* calls belong before run(). Linux only (epoll).
#pragma once
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kestrel::server::http {

// Every limit the layer enforces, checked before any work; each has a `kestrel serve` flag.
struct Limits {
  size_t max_request_line = 8u << 10;   // 414 beyond
  size_t max_header_bytes = 64u << 10;  // request line + headers; 431 beyond
  size_t max_headers = 100;             // 431 beyond
  size_t max_body_bytes = 8u << 20;     // 413 beyond (Content-Length checked before reading)
  double header_timeout_s = 10;         // whole head, from the connection's first byte wait; 408
  double body_timeout_s = 60;           // whole body, from the end of the head; 408
  double idle_timeout_s = 30;           // keep-alive connection with no request: closed quietly
  double send_timeout_s = 30;           // a reply write that makes no progress this long: closed
  int max_connections = 1024;           // beyond: accepted, answered 503, closed
  int max_connections_per_client = 256;  // per remote address; beyond: answered 429, closed
  int n_workers = 64;                   // threads running handlers, started at once; more are
                                        // started when all are busy, up to max_connections
};

struct Request {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent, e.g. "/v1/models?x=1"
  std::string path;     // target without the query
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent; values trimmed
  std::string body;
  std::string remote_addr;
  std::chrono::steady_clock::time_point received{};  // when the whole request had arrived
  // Case-insensitive lookup; empty when absent.
  std::string header(std::string_view name) const;
};

// A streamed reply's writer, valid during the stream callback only.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  // Sends one piece (a chunk on HTTP/1.1). False once the client is gone or stopped reading
  // (send timeout): the callback should then stop and return.
  virtual bool write(std::string_view data) = 0;
  // False once the peer has closed its side (checked without blocking).
  virtual bool alive() = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
  std::string body;  // fixed reply (ignored when stream is set)
  // Set for a streamed reply: called once on the worker thread after the head is sent; the reply
  // ends when it returns. Whatever happens, it runs to its end (so it can release what it holds).
  std::function<void(StreamWriter&)> stream;
  // The handler's own, handed back to the reply-done callback (set_on_reply); the layer never looks inside.
  std::shared_ptr<void> user;
};

// The end of one request's reply, for the access log: seconds since Request::received, and
// complete = false when the reply could not be written whole (the client went away, a handler threw).
using ReplyDone = std::function<void(const Request&, const Response&, double seconds, bool complete)>;

using Handler = std::function<void(const Request&, Response&)>;

class HttpServer {
 public:
  explicit HttpServer(Limits limits);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes match the path exactly. A known path with another method gets 405; an unknown one the
  // not-found handler's reply (default: 404).
  void route(const std::string& method, const std::string& path, Handler h);
  // Runs before routing (auth, draining): return true when it filled the response itself.
  void set_pre_routing(std::function<bool(const Request&, Response&)> f);
  // Fills the reply the layer itself must send (400/408/413/414/431/429/503/404/405, and 500
  // when a handler throws): status and a message; the callback formats the body.
  void set_error_formatter(std::function<void(int status, const std::string& message, Response&)> f);
  // Headers added to every reply, the layer's own refusals included (CORS); a handler's header of
  // the same name wins.
  void set_common_headers(std::vector<std::pair<std::string, std::string>> headers);
  // Called on the worker thread once the reply of a request that reached a worker is over (a
  // stream: when it ended). Refusals the event loop sends itself (malformed heads, 408, 413, 429,
  // 503 for too many connections) are not reported. Exceptions it throws are caught and logged.
  void set_on_reply(ReplyDone f);

  // Binds host:port (port 0: any free port). Returns the bound port, or -1 with *why set.
  int bind(const std::string& host, int port, std::string* why);
  // Serves until stop(); returns after the loop and the workers have finished. Streams still
  // running when stop() is called are allowed to end first.
  void run();
  // Thread-safe and async-signal-safe: stop accepting and end run(). Idle connections are closed;
  // requests already received are answered (Connection: close) and streams run to their end, with
  // no time limit here (the caller bounds its handlers). Destroy the server after run() returned.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kestrel::server::http
