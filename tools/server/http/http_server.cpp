// The event loop: accepting, reading heads and bodies under deadlines and limits, refusing, and
// handing complete requests to the workers (http_worker.cpp). Linux (epoll, eventfd, accept4).
#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "server/http/http_impl.h"
#include "server/http/http_writer.h"

namespace kestrel::server::http {
namespace {

constexpr uint64_t kListenId = 0, kWakeId = 1;
constexpr auto kSweepEvery = std::chrono::milliseconds(50);
// After an error reply the connection is read and drained (not closed at once, which would reset
// it and could destroy the reply before the client reads it), for this long or this many bytes.
constexpr auto kLinger = std::chrono::seconds(2);
// A client still sending a large body when it is refused (413) must see the reply, so the drain
// takes up to the declared length, bounded: 64 MiB.
constexpr size_t kMaxDiscard = 64u << 20;
// Refused connections (429/503) lingering at once; beyond, they are closed right after the reply.
constexpr int kMaxRefused = 256;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string address_of(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(ss).sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a))
      inet_ntop(AF_INET, &a.s6_addr[12], buf, sizeof buf);
    else
      inet_ntop(AF_INET6, &a, buf, sizeof buf);
  }
  return buf;
}

// Every connection is a file descriptor: make sure max_connections of them can exist.
void raise_fd_limit(const Limits& l) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t want = static_cast<rlim_t>(l.max_connections) + static_cast<rlim_t>(l.n_workers) + kMaxRefused + 256;
  if (r.rlim_cur >= want) return;
  r.rlim_cur = r.rlim_max == RLIM_INFINITY ? want : std::min(want, r.rlim_max);
  setrlimit(RLIMIT_NOFILE, &r);
}

void sanitize(Limits* l) {
  const Limits d;
  auto positive = [](double& v, double def) {
    if (!(v > 0) || !std::isfinite(v)) v = def;
  };
  positive(l->header_timeout_s, d.header_timeout_s);
  positive(l->body_timeout_s, d.body_timeout_s);
  positive(l->idle_timeout_s, d.idle_timeout_s);
  positive(l->send_timeout_s, d.send_timeout_s);
  l->max_connections = std::max(1, l->max_connections);
  l->max_connections_per_client = std::max(1, l->max_connections_per_client);
  l->n_workers = std::max(1, l->n_workers);
  l->max_request_line = std::max<size_t>(16, l->max_request_line);
  l->max_header_bytes = std::max(l->max_request_line, l->max_header_bytes);
}

}  // namespace

// The loop must outlive anything one connection does (e.g. bad_alloc growing a body): that
// connection is dropped, the others go on.
template <class F>
void HttpServer::Impl::guarded(Conn& c, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kestrel serve: dropping a connection from %s: %s\n", c.addr.c_str(), e.what());
    if (c.state != Conn::State::kWorker) close_conn(c);
  }
}

HttpServer::Impl::Impl(Limits l) : limits(l), rbuf(64u << 10) {
  sanitize(&limits);
  epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

HttpServer::Impl::~Impl() {
  for (auto& [id, c] : conns)
    if (!c->dead && c->fd >= 0) ::close(c->fd);
  for (int fd : {listen_fd, epoll_fd, wake_fd, spare_fd})
    if (fd >= 0) ::close(fd);
}

int HttpServer::Impl::bind(const std::string& host, int port, std::string* why) {
  auto set_why = [&](const std::string& w) {
    if (why) *why = w;
    return -1;
  };
  if (listen_fd >= 0) return set_why("already bound");
  if (epoll_fd < 0 || wake_fd < 0) return set_why("cannot create the event loop (epoll/eventfd)");
  if (port < 0 || port > 65535) return set_why("invalid port " + std::to_string(port) + " (0..65535)");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return set_why("cannot resolve host '" + host + "': " + gai_strerror(rc));
  int fd = -1, err = 0;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return set_why(std::strerror(err));  // the caller names host and port
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  const int bound = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(ss).sin6_port
                                                   : reinterpret_cast<sockaddr_in&>(ss).sin_port);
  raise_fd_limit(limits);
  if (spare_fd < 0) spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  listen_fd = fd;
  return bound;
}

void HttpServer::Impl::wake() {
  const uint64_t one = 1;
  const ssize_t r = ::write(wake_fd, &one, sizeof one);  // async-signal-safe, like stop()
  (void)r;
}

void HttpServer::Impl::run() {
  if (listen_fd < 0) {
    std::fprintf(stderr, "kestrel serve: HttpServer::run() without a bound socket\n");
    return;
  }
  workers.reserve(static_cast<size_t>(limits.n_workers));
  for (int i = 0; i < limits.n_workers; ++i) {
    try {
      workers.emplace_back([this] { worker_main(); });
    } catch (const std::system_error& e) {  // out of threads: serve with those that started
      std::fprintf(stderr, "kestrel serve: started %d of %d HTTP worker threads: %s\n", i, limits.n_workers, e.what());
      break;
    }
  }
  if (workers.empty()) return;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
  ev.data.u64 = kWakeId;
  epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &ev);
  epoll_event evs[128];
  Clock::time_point next_sweep = Clock::now();
  for (;;) {
    if (stopping.load() && listen_fd >= 0) begin_stop();
    if (stopping.load() && n_in_workers == 0) break;
    const int n = epoll_wait(epoll_fd, evs, 128, static_cast<int>(kSweepEvery.count()));
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "kestrel serve: epoll_wait: %s\n", std::strerror(errno));
      std::this_thread::sleep_for(kSweepEvery);
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = evs[i].data.u64;
      if (id == kListenId) {
        try {
          if (listen_fd >= 0) accept_all();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "kestrel serve: accepting connections: %s\n", e.what());
        }
      } else if (id == kWakeId) {
        uint64_t v;
        while (::read(wake_fd, &v, sizeof v) > 0) {
        }
      } else if (auto it = conns.find(id); it != conns.end() && !it->second->dead) {
        if (it->second->state != Conn::State::kWorker) guarded(*it->second, [&] { on_event(*it->second, evs[i].events); });
      }
    }
    take_returned();
    const Clock::time_point now = Clock::now();
    if (now >= next_sweep) {
      sweep(now);
      next_sweep = now + kSweepEvery;
    }
    reap();
  }
  // Every connection is the loop's again: close them all, then let the workers go.
  for (auto& [id, c] : conns) close_conn(*c);
  reap();
  {
    std::lock_guard<std::mutex> lk(mu);
    quit = true;
  }
  cv.notify_all();
  for (std::thread& t : workers) t.join();
  workers.clear();
}

void HttpServer::Impl::begin_stop() {
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
  ::close(listen_fd);
  listen_fd = -1;
  for (auto& [id, c] : conns)
    if (c->state != Conn::State::kWorker) close_conn(*c);
}

void HttpServer::Impl::accept_all() {
  for (int i = 0; i < 512; ++i) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE) shed_one();
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // one small write per token
    auto owned = std::make_unique<Conn>();
    Conn& c = *owned;
    c.id = next_id++;
    c.fd = fd;
    c.addr = address_of(ss);
    c.deadline = Clock::now() + seconds(limits.header_timeout_s);
    conns.emplace(c.id, std::move(owned));
    const auto per = per_client.find(c.addr);
    const int from_addr = per == per_client.end() ? 0 : per->second;
    if (n_counted >= limits.max_connections || from_addr >= limits.max_connections_per_client) {
      c.counted = false;
      ++n_refused;
      if (n_counted >= limits.max_connections)
        refuse(c, 503, "too many connections (limit " + std::to_string(limits.max_connections) + ")");
      else
        refuse(c, 429, "too many connections from " + c.addr + " (limit " +
                           std::to_string(limits.max_connections_per_client) + ")");
      if (n_refused > kMaxRefused) close_conn(c);
      continue;
    }
    ++per_client[c.addr];
    ++n_counted;
    set_events(c, EPOLLIN);
  }
}

// Out of file descriptors: the pending connection would make the listening socket ready forever.
// Free the spare descriptor, take the connection, answer 503 and close it, keep the spare again.
void HttpServer::Impl::shed_one() {
  if (!fd_warning_shown) {
    std::fprintf(stderr, "kestrel serve: out of file descriptors, refusing connections (raise ulimit -n)\n");
    fd_warning_shown = true;
  }
  if (spare_fd < 0) return;
  ::close(spare_fd);
  const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    Response r;
    error_reply(503, "the server has no file descriptors left", r);
    decorate(r);
    const std::string reply = format_fixed(r, false);
    const ssize_t n = ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;
    ::close(fd);
  }
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

void HttpServer::Impl::on_event(Conn& c, uint32_t ev) {
  if ((ev & EPOLLOUT) && !flush(c)) return close_conn(c);
  if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_conn(c);
}

void HttpServer::Impl::read_conn(Conn& c) {
  const ssize_t n = ::recv(c.fd, rbuf.data(), rbuf.size(), MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) return close_conn(c);  // end of stream or reset: whatever was half-sent is dropped
  if (c.state == Conn::State::kLinger) {
    c.discarded += static_cast<size_t>(n);
    if (c.discarded > kMaxDiscard) close_conn(c);
    return;
  }
  if (c.state == Conn::State::kIdle) {  // the next request starts: its head has header_timeout_s
    c.state = Conn::State::kHead;
    c.deadline = Clock::now() + seconds(limits.header_timeout_s);
  }
  c.in.append(rbuf.data(), static_cast<size_t>(n));
  advance(c);
}

void HttpServer::Impl::advance(Conn& c) {
  if (c.state == Conn::State::kHead) {
    const ParseResult r = parse_head(c.in, limits, &c.head);
    if (r.state == Parse::kNeedMore) return;
    if (r.state == Parse::kError) return refuse(c, r.status, r.message);
    c.in.erase(0, r.consumed);
    if (c.head.content_length > limits.max_body_bytes)
      return refuse(c, 413, "request body of " + std::to_string(c.head.content_length) + " bytes is larger than " +
                                std::to_string(limits.max_body_bytes) + " bytes");
    c.body.clear();
    if (!c.head.chunked && c.head.content_length == 0) return dispatch(c);
    c.state = Conn::State::kBody;
    c.deadline = Clock::now() + seconds(limits.body_timeout_s);
    c.chunks = ChunkedDecoder(limits.max_body_bytes, limits.max_header_bytes);
    if (c.head.expect_continue && c.in.empty()) {
      c.out += "HTTP/1.1 100 Continue\r\n\r\n";
      if (!flush(c)) return close_conn(c);
    }
  }
  if (c.state != Conn::State::kBody) return;
  if (c.head.chunked) {
    const ParseResult r = c.chunks.feed(c.in, &c.body);
    if (r.state == Parse::kError) return refuse(c, r.status, r.message);
    c.in.erase(0, r.consumed);
    if (r.state == Parse::kComplete) dispatch(c);
    return;
  }
  const size_t take = std::min<size_t>(c.in.size(), c.head.content_length - c.body.size());
  c.body.append(c.in, 0, take);
  c.in.erase(0, take);
  if (c.body.size() == c.head.content_length) dispatch(c);
}

void HttpServer::Impl::dispatch(Conn& c) {
  set_events(c, 0);
  RequestHead& h = c.head;
  c.req = Request{std::move(h.method), std::move(h.target), std::move(h.path), std::move(h.version),
                  std::move(h.headers), std::move(c.body), c.addr, Clock::now()};
  c.body = std::string();
  {
    std::lock_guard<std::mutex> lk(mu);
    work.push_back(&c);  // if this throws, the connection is still the loop's (guarded() drops it)
    c.state = Conn::State::kWorker;
    ++n_in_workers;
  }
  // A stream holds its worker for the whole reply: when every worker is busy, start another (up
  // to max_connections), so long generations never keep /health or a short request waiting.
  if (n_in_workers > static_cast<int>(workers.size()) && static_cast<int>(workers.size()) < limits.max_connections) {
    try {
      workers.emplace_back([this] { worker_main(); });
    } catch (const std::system_error& e) {  // out of threads: the queued request waits for a worker
      std::fprintf(stderr, "kestrel serve: cannot start another HTTP worker thread: %s\n", e.what());
    }
  }
  cv.notify_one();
}

void HttpServer::Impl::refuse(Conn& c, int status, const std::string& message) {
  Response r;
  error_reply(status, message, r);
  decorate(r);
  c.out += format_fixed(r, false);
  c.state = Conn::State::kLinger;
  c.in.clear();
  c.deadline = Clock::now() + kLinger;
  if (!flush(c)) close_conn(c);
}

bool HttpServer::Impl::flush(Conn& c) {
  while (!c.out.empty()) {
    const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      set_events(c, EPOLLIN | EPOLLOUT);
      return true;
    } else {
      return false;
    }
  }
  if (c.state == Conn::State::kLinger && !c.shut_wr) {
    ::shutdown(c.fd, SHUT_WR);  // the reply is complete: the client sees it end, then we drain
    c.shut_wr = true;
  }
  if (c.state != Conn::State::kWorker) set_events(c, EPOLLIN);
  return true;
}

void HttpServer::Impl::set_events(Conn& c, uint32_t ev) {
  if (ev == c.events || c.fd < 0) return;
  epoll_event e{};
  e.events = ev;
  e.data.u64 = c.id;
  epoll_ctl(epoll_fd, ev == 0 ? EPOLL_CTL_DEL : c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &e);
  c.events = ev;
}

void HttpServer::Impl::close_conn(Conn& c) {
  if (c.dead) return;
  set_events(c, 0);
  ::close(c.fd);
  c.fd = -1;
  c.dead = true;
  dead_ids.push_back(c.id);
  if (!c.counted) {
    --n_refused;
    return;
  }
  --n_counted;
  if (auto it = per_client.find(c.addr); it != per_client.end() && --it->second <= 0) per_client.erase(it);
}

void HttpServer::Impl::reap() {
  for (uint64_t id : dead_ids) conns.erase(id);
  dead_ids.clear();
}

void HttpServer::Impl::take_returned() {
  std::vector<std::pair<Conn*, bool>> got;
  {
    std::lock_guard<std::mutex> lk(ret_mu);
    got.swap(returned);
  }
  for (const auto& [conn, close] : got) {
    Conn* c = conn;  // a plain variable: lambdas below capture it
    --n_in_workers;
    if (close || stopping.load()) {
      close_conn(*c);
      continue;
    }
    c->req = Request{};
    c->head = RequestHead{};
    const bool idle = c->in.empty();
    c->state = idle ? Conn::State::kIdle : Conn::State::kHead;
    c->deadline = Clock::now() + seconds(idle ? limits.idle_timeout_s : limits.header_timeout_s);
    set_events(*c, c->out.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT);
    guarded(*c, [&] { advance(*c); });  // a pipelined request may already be here
  }
}

void HttpServer::Impl::sweep(Clock::time_point now) {
  for (auto& [id, p] : conns) {
    Conn& c = *p;
    if (c.dead || c.state == Conn::State::kWorker || now < c.deadline) continue;
    guarded(c, [&] {
      char t[32];
      switch (c.state) {
        case Conn::State::kHead:
          std::snprintf(t, sizeof t, "%g", limits.header_timeout_s);
          return refuse(c, 408, std::string("request head not received within ") + t + " s");
        case Conn::State::kBody:
          std::snprintf(t, sizeof t, "%g", limits.body_timeout_s);
          return refuse(c, 408, std::string("request body not received within ") + t + " s");
        default:  // idle keep-alive, or done lingering: close quietly
          return close_conn(c);
      }
    });
  }
}

HttpServer::HttpServer(Limits limits) : impl_(std::make_unique<Impl>(limits)) {}
HttpServer::~HttpServer() = default;

void HttpServer::route(const std::string& method, const std::string& path, Handler h) {
  auto& methods = impl_->routes[path];
  for (auto& [m, handler] : methods)
    if (m == method) {
      handler = std::move(h);
      return;
    }
  methods.emplace_back(method, std::move(h));
}

void HttpServer::set_pre_routing(std::function<bool(const Request&, Response&)> f) { impl_->pre_routing = std::move(f); }

void HttpServer::set_error_formatter(std::function<void(int, const std::string&, Response&)> f) {
  impl_->error_formatter = std::move(f);
}

void HttpServer::set_common_headers(std::vector<std::pair<std::string, std::string>> headers) {
  impl_->common_headers = std::move(headers);
}

void HttpServer::set_on_reply(ReplyDone f) { impl_->on_reply = std::move(f); }

int HttpServer::bind(const std::string& host, int port, std::string* why) { return impl_->bind(host, port, why); }

void HttpServer::run() { impl_->run(); }

void HttpServer::stop() {
  impl_->stopping.store(true);
  impl_->wake();
}

}  // namespace kestrel::server::http
