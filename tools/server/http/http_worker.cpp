// The worker side: one complete request at a time, routed, its handler run with every exception
// caught, its reply written with blocking sends bounded by send_timeout_s, the connection then
// given back to the loop (kept alive, or to be closed).
#include <cstdio>
#include <exception>

#include "server/http/http_impl.h"
#include "server/http/http_writer.h"

namespace kestrel::server::http {
namespace {

// A path quoted in a message or a log line: printable ASCII only (the parser made sure), cut short.
std::string shown(const std::string& s) { return s.size() <= 200 ? s : s.substr(0, 200) + "..."; }

void log_internal(const Request& req, const char* what) {
  std::fprintf(stderr, "kestrel serve: internal error in %s %s: %s\n", req.method.c_str(), shown(req.path).c_str(), what);
}

}  // namespace

void HttpServer::Impl::worker_main() {
  for (;;) {
    Conn* c = nullptr;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return quit || !work.empty(); });
      if (work.empty()) return;
      c = work.front();
      work.pop_front();
    }
    bool keep = false;
    try {
      keep = serve(*c);
    } catch (const std::exception& e) {  // e.g. bad_alloc while formatting the reply
      log_internal(c->req, e.what());
    } catch (...) {
      log_internal(c->req, "unknown exception");
    }
    {
      std::lock_guard<std::mutex> lk(ret_mu);
      returned.emplace_back(c, !keep);
    }
    wake();
  }
}

bool HttpServer::Impl::serve(Conn& c) {
  const Request& req = c.req;
  const double timeout = limits.send_timeout_s;
  if (!c.out.empty()) {  // the end of a 100 Continue the loop could not send at once
    if (!send_all(c.fd, c.out, timeout)) return false;
    c.out.clear();
  }
  Response res;
  handle(req, res);
  decorate(res);
  bool keep = c.head.keep_alive && !stopping.load() && !iequals(find_header(res.headers, "connection"), "close");
  if (!res.stream) {
    const bool sent = send_all(c.fd, format_fixed(res, keep), timeout);
    reply_done(req, res, sent);
    return sent && keep;
  }

  // Streamed: chunked on HTTP/1.1; HTTP/1.0 cannot read chunks, so no length and close at the end.
  const bool chunked = req.version != "HTTP/1.0";
  keep = keep && chunked;
  const bool head_sent = send_all(c.fd, format_stream_head(res, chunked, keep), timeout);
  SocketStreamWriter writer(c.fd, chunked, timeout, head_sent);
  bool ok = true;
  try {
    res.stream(writer);  // runs even when the head could not be sent, so it can release what it holds
  } catch (const std::exception& e) {
    log_internal(req, e.what());
    ok = false;  // no terminating chunk: the client sees an incomplete reply
  } catch (...) {
    log_internal(req, "unknown exception");
    ok = false;
  }
  ok = ok && writer.finish();
  reply_done(req, res, ok);
  return ok && keep;
}

void HttpServer::Impl::decorate(Response& res) const {
  for (const auto& [name, value] : common_headers)
    if (find_header(res.headers, name).empty()) res.headers.emplace_back(name, value);
}

void HttpServer::Impl::reply_done(const Request& req, const Response& res, bool complete) {
  if (!on_reply) return;
  try {
    on_reply(req, res, std::chrono::duration<double>(Clock::now() - req.received).count(), complete);
  } catch (const std::exception& e) {
    log_internal(req, e.what());
  } catch (...) {
    log_internal(req, "unknown exception in the reply callback");
  }
}

void HttpServer::Impl::handle(const Request& req, Response& res) {
  try {
    if (pre_routing && pre_routing(req, res)) return;
    const auto it = routes.find(req.path);
    if (it == routes.end()) return error_reply(404, "no route for " + req.method + " " + shown(req.path), res);
    std::string allow;
    for (const auto& [method, handler] : it->second) {
      if (method == req.method) return handler(req, res);
      allow += (allow.empty() ? "" : ", ") + method;
    }
    error_reply(405, "method " + req.method + " is not allowed on " + shown(req.path) + " (allowed: " + allow + ")", res);
    res.headers.emplace_back("Allow", allow);
  } catch (const std::exception& e) {
    log_internal(req, e.what());
    res = Response{};
    error_reply(500, "internal error", res);
  } catch (...) {
    log_internal(req, "unknown exception");
    res = Response{};
    error_reply(500, "internal error", res);
  }
}

void HttpServer::Impl::error_reply(int status, const std::string& message, Response& res) {
  res.status = status;
  res.content_type = "application/json";
  res.body.clear();
  res.stream = nullptr;
  if (error_formatter) {
    try {
      error_formatter(status, message, res);
      res.stream = nullptr;  // the layer's error replies are fixed
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel serve: internal error in the error formatter: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "kestrel serve: internal error in the error formatter\n");
    }
  }
  res.status = status;
  res.content_type = "application/json";
  res.body = default_error_body(status, message);
}

}  // namespace kestrel::server::http
