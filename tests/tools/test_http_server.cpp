// The server's HTTP/1.1 layer (tools/server/http/), live on 127.0.0.1 with raw sockets: routing,
// fixed and streamed replies, HTTP/1.0, pipelining, Expect, chunked bodies, limits, slow clients
// (slowloris, slow body), connection limits, failing handlers and stop() during a stream.
// Timeouts are set small through Limits; every wait has a generous bound for a loaded machine.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "server/http/http_server.h"

using namespace kestrel::server::http;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// A server on 127.0.0.1:<any port> with the test routes, run on its own thread.
struct Served {
  HttpServer server;
  int port = -1;
  std::atomic<bool> finished{false};
  std::atomic<bool> gone_seen{false};  // /until-gone saw its client leave
  std::thread thread;

  explicit Served(Limits l = Limits{}) : server(l) {
    server.route("GET", "/hello", [](const Request&, Response& r) {
      r.content_type = "text/plain";
      r.body = "hello";
    });
    server.route("POST", "/echo", [](const Request& q, Response& r) { r.body = q.body; });
    server.route("GET", "/a", [](const Request&, Response& r) { r.body.assign(1, 'A'); });
    server.route("GET", "/b", [](const Request&, Response& r) { r.body.assign(1, 'B'); });
    server.route("GET", "/throw", [](const Request&, Response&) { throw std::runtime_error("secret-detail-xyz"); });
    server.route("GET", "/stream", [](const Request&, Response& r) {
      r.content_type = "text/event-stream";
      r.stream = [](StreamWriter& w) {
        w.write("ab");
        w.write("");  // nothing: must not end the chunked reply
        w.write("cde");
      };
    });
    server.route("GET", "/slow-stream", [](const Request&, Response& r) {
      r.stream = [](StreamWriter& w) {
        for (int i = 0; i < 6; ++i) {
          if (!w.write("piece" + std::to_string(i) + ";")) return;
          sleep_s(0.1);
        }
      };
    });
    server.route("GET", "/stream-throw", [](const Request&, Response& r) {
      r.stream = [](StreamWriter& w) {
        w.write("first");
        throw std::runtime_error("stream failed");
      };
    });
    server.route("GET", "/until-gone", [this](const Request&, Response& r) {
      r.stream = [this](StreamWriter& w) {
        const auto t0 = Clock::now();
        while (w.alive() && since(t0) < 10) {
          w.write("x");
          sleep_s(0.02);
        }
        gone_seen = since(t0) < 10;
      };
    });
    server.set_pre_routing([](const Request& q, Response& r) {
      if (q.path != "/blocked") return false;
      r.status = 401;
      r.body = "no";
      return true;
    });
    server.set_error_formatter([](int status, const std::string& message, Response& r) {
      r.content_type = "text/plain";
      r.body = "ERR " + std::to_string(status) + ": " + message;
    });
    std::string why;
    port = server.bind("127.0.0.1", 0, &why);
    REQUIRE_MESSAGE(port > 0, why);
    thread = std::thread([this] {
      server.run();
      finished = true;
    });
  }
  ~Served() {
    server.stop();
    thread.join();
  }
};

struct Reply {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string raw_body;  // as framed on the wire
  bool complete = false;
  std::string header(const std::string& name) const {
    for (const auto& [k, v] : headers)
      if (strcasecmp(k.c_str(), name.c_str()) == 0) return v;
    return "";
  }
};

// A raw client connection (from 127.0.0.1, or another loopback address to count as another client).
struct Client {
  int fd = -1;
  std::string buf;

  explicit Client(int port, const char* from = "127.0.0.1") {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, from, &a.sin_addr);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    sockaddr_in s{};
    s.sin_family = AF_INET;
    s.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &s.sin_addr);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&s), sizeof s) == 0);
  }
  ~Client() { close_now(); }
  void close_now() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Appends what arrives within timeout_s; false on end of stream, error or timeout.
  bool fill(double timeout_s = 5) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    char tmp[65536];
    const ssize_t n = recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) return false;
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  }
  // True when the server closes the connection within timeout_s with nothing more sent.
  bool sees_close(double timeout_s = 5) {
    pollfd p{fd, POLLIN, 0};
    if (!buf.empty() || poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    char c;
    const ssize_t n = recv(fd, &c, 1, 0);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }
  bool take_line(std::string* line, double timeout_s) {
    size_t nl;
    while ((nl = buf.find("\r\n")) == std::string::npos)
      if (!fill(timeout_s)) return false;
    *line = buf.substr(0, nl);
    buf.erase(0, nl + 2);
    return true;
  }
  bool take_bytes(size_t n, std::string* out, double timeout_s) {
    while (buf.size() < n)
      if (!fill(timeout_s)) return false;
    out->append(buf, 0, n);
    buf.erase(0, n);
    return true;
  }
  // Reads one reply; complete is false when the framing ended early (or nothing came).
  Reply read_reply(double timeout_s = 5) {
    Reply r;
    std::string line;
    if (!take_line(&line, timeout_s) || line.size() < 12 || line.compare(0, 9, "HTTP/1.1 ") != 0) return r;
    r.status = std::stoi(line.substr(9, 3));
    while (take_line(&line, timeout_s) && !line.empty()) {
      const size_t colon = line.find(':');
      r.headers.emplace_back(line.substr(0, colon), line.substr(line.find_first_not_of(' ', colon + 1)));
    }
    if (r.status == 100) {
      r.complete = true;
      return r;
    }
    if (r.header("Transfer-Encoding") == "chunked") {
      for (;;) {
        if (!take_line(&line, timeout_s)) return r;
        r.raw_body += line + "\r\n";
        const size_t n = std::stoul(line, nullptr, 16);
        std::string data;
        if (!take_bytes(n + 2, &data, timeout_s)) return r;
        r.raw_body += data;
        if (data.substr(n) != "\r\n") return r;
        r.body += data.substr(0, n);
        if (n == 0) break;
      }
    } else if (!r.header("Content-Length").empty()) {
      if (!take_bytes(std::stoul(r.header("Content-Length")), &r.body, timeout_s)) return r;
    } else {  // close-delimited
      while (fill(timeout_s)) {
      }
      r.body = buf;
      buf.clear();
    }
    r.complete = true;
    return r;
  }
};

}  // namespace

TEST_CASE("http server: fixed replies, 404, 405, pre-routing, keep-alive") {
  Served s;
  Client c(s.port);
  REQUIRE(c.send("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n"));
  Reply r = c.read_reply();
  CHECK(r.status == 200);
  CHECK(r.body == "hello");
  CHECK(r.header("Content-Type") == "text/plain");
  CHECK(r.header("Connection") == "keep-alive");
  // The same connection serves the next requests.
  REQUIRE(c.send("GET /nope?x=1 HTTP/1.1\r\n\r\n"));
  r = c.read_reply();
  CHECK(r.status == 404);
  CHECK(r.body == "ERR 404: no route for GET /nope");
  REQUIRE(c.send("POST /hello HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
  r = c.read_reply();
  CHECK(r.status == 405);
  CHECK(r.header("Allow") == "GET");
  REQUIRE(c.send("HEAD /hello HTTP/1.1\r\n\r\n"));
  CHECK(c.read_reply().status == 405);
  REQUIRE(c.send("GET /blocked HTTP/1.1\r\nConnection: close\r\n\r\n"));
  r = c.read_reply();
  CHECK(r.status == 401);
  CHECK(r.header("Connection") == "close");
  CHECK(c.sees_close());
}

TEST_CASE("http server: HTTP/1.0 gets Connection: close unless it asks for keep-alive") {
  Served s;
  Client c(s.port);
  REQUIRE(c.send("GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
  Reply r = c.read_reply();
  CHECK(r.body == "hello");
  CHECK(r.header("Connection") == "keep-alive");
  REQUIRE(c.send("GET /hello HTTP/1.0\r\n\r\n"));
  r = c.read_reply();
  CHECK(r.body == "hello");
  CHECK(r.header("Connection") == "close");
  CHECK(c.sees_close());
}

TEST_CASE("http server: streamed reply is chunked on HTTP/1.1") {
  Served s;
  Client c(s.port);
  REQUIRE(c.send("GET /stream HTTP/1.1\r\n\r\n"));
  Reply r = c.read_reply();
  REQUIRE(r.complete);
  CHECK(r.status == 200);
  CHECK(r.header("Content-Type") == "text/event-stream");
  CHECK(r.header("Content-Length").empty());
  CHECK(r.raw_body == "2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n");
  CHECK(r.body == "abcde");
  REQUIRE(c.send("GET /hello HTTP/1.1\r\n\r\n"));  // and the connection is kept
  CHECK(c.read_reply().body == "hello");
}

TEST_CASE("http server: streamed reply to HTTP/1.0 is close-delimited, not chunked") {
  Served s;
  Client c(s.port);
  REQUIRE(c.send("GET /stream HTTP/1.0\r\n\r\n"));
  Reply r = c.read_reply();
  REQUIRE(r.complete);
  CHECK(r.status == 200);
  CHECK(r.header("Transfer-Encoding").empty());
  CHECK(r.header("Content-Length").empty());
  CHECK(r.header("Connection") == "close");
  CHECK(r.body == "abcde");  // read until the server closed
}

TEST_CASE("http server: pipelined requests in one send are all answered, in order") {
  Served s;
  Client c(s.port);
  REQUIRE(c.send("GET /a HTTP/1.1\r\n\r\nPOST /echo HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
                 "GET /stream HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\nConnection: close\r\n\r\n"));
  CHECK(c.read_reply().body == "A");
  CHECK(c.read_reply().body == "xyz");
  CHECK(c.read_reply().body == "abcde");
  Reply r = c.read_reply();
  CHECK(r.body == "B");
  CHECK(r.header("Connection") == "close");
  CHECK(c.sees_close());
}

TEST_CASE("http server: request bodies: Expect 100-continue, chunked, too large") {
  Limits l;
  l.max_body_bytes = 64;
  Served s(l);
  Client c(s.port);
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  Reply r = c.read_reply();
  CHECK(r.status == 100);
  REQUIRE(c.send("hello"));
  r = c.read_reply();
  CHECK(r.status == 200);
  CHECK(r.body == "hello");
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"));
  CHECK(c.read_reply().body == "abcde");
  // Too large: refused from the head alone, with no 100 Continue and before any body is sent.
  const auto t0 = Clock::now();
  REQUIRE(c.send("POST /echo HTTP/1.1\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"));
  r = c.read_reply();
  CHECK(r.status == 413);
  CHECK(since(t0) < 2);
  CHECK(c.sees_close());
  Client c2(s.port);
  REQUIRE(c2.send("POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n50\r\n" + std::string(80, 'x') + "\r\n0\r\n\r\n"));
  CHECK(c2.read_reply().status == 413);
}

TEST_CASE("http server: malformed and oversized heads get 4xx and a close") {
  Limits l;
  l.max_request_line = 64;
  l.max_headers = 4;
  Served s(l);
  struct Case {
    std::string request;
    int status;
  } cases[] = {
      {"BAD\r\n\r\n", 400},
      {"GET / HTTP/2.0\r\n\r\n", 400},
      {"GET /" + std::string(200, 'a') + " HTTP/1.1\r\n\r\n", 414},
      {"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n", 431},
      {"POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"GET / HTTP/1.1\r\nExpect: magic\r\n\r\n", 417},
  };
  for (const Case& k : cases) {
    CAPTURE(k.request);
    Client c(s.port);
    REQUIRE(c.send(k.request));
    const Reply r = c.read_reply();
    CHECK(r.status == k.status);
    CHECK(r.body.rfind("ERR " + std::to_string(k.status) + ": ", 0) == 0);
    CHECK(c.sees_close());
  }
  Client ok(s.port);
  REQUIRE(ok.send("GET /hello HTTP/1.1\r\n\r\n"));
  CHECK(ok.read_reply().status == 200);
}

TEST_CASE("http server: slowloris connections get 408 while other clients are served at once") {
  Limits l;
  l.header_timeout_s = 0.8;
  l.n_workers = 2;
  Served s(l);
  const auto t0 = Clock::now();
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 12; ++i) {  // more slow connections than workers
    slow.push_back(std::make_unique<Client>(s.port, "127.0.0.2"));
    REQUIRE(slow.back()->send("GET /hello HTTP/1.1\r\n"));
  }
  double worst = 0;
  for (int tick = 0; tick < 12; ++tick) {  // one header byte each every 0.1 s, past the timeout
    for (auto& c : slow) c->send("X");
    if (tick % 3 == 1) {
      Client probe(s.port);
      const auto t = Clock::now();
      REQUIRE(probe.send("GET /hello HTTP/1.1\r\n\r\n"));
      const Reply r = probe.read_reply(5);
      CHECK(r.status == 200);
      worst = std::max(worst, since(t));
    }
    sleep_s(0.1);
  }
  CHECK(worst < 1.0);
  for (auto& c : slow) {
    const Reply r = c->read_reply(5);
    CHECK(r.status == 408);
    if (r.status != 408) break;  // failed already: do not wait on every connection
    CHECK(c->sees_close());
  }
  CHECK(since(t0) >= 0.8);  // not before the deadline
}

TEST_CASE("http server: streams holding every worker do not starve a short request") {
  Limits l;
  l.n_workers = 2;
  Served s(l);
  std::vector<std::unique_ptr<Client>> streams;
  for (int i = 0; i < 4; ++i) {  // twice as many long streams as workers started
    streams.push_back(std::make_unique<Client>(s.port));
    REQUIRE(streams.back()->send("GET /until-gone HTTP/1.1\r\n\r\n"));
  }
  for (auto& c : streams) REQUIRE(c->fill(5));  // every stream is running (holds a worker)
  Client probe(s.port);
  const auto t = Clock::now();
  REQUIRE(probe.send("GET /hello HTTP/1.1\r\n\r\n"));
  const Reply r = probe.read_reply(5);
  CHECK(r.status == 200);
  CHECK(since(t) < 1.0);
  for (auto& c : streams) c->close_now();
}

TEST_CASE("http server: a slow body gets 408 and holds no worker") {
  Limits l;
  l.body_timeout_s = 0.6;
  l.n_workers = 1;
  Served s(l);
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 4; ++i) {
    slow.push_back(std::make_unique<Client>(s.port, "127.0.0.2"));
    REQUIRE(slow.back()->send("POST /echo HTTP/1.1\r\nContent-Length: 100\r\n\r\n0123456789"));
  }
  const auto t0 = Clock::now();
  for (int tick = 0; tick < 10; ++tick) {
    for (auto& c : slow) c->send("z");
    if (tick == 3) {
      Client probe(s.port);
      const auto t = Clock::now();
      REQUIRE(probe.send("GET /hello HTTP/1.1\r\n\r\n"));
      CHECK(probe.read_reply().status == 200);
      CHECK(since(t) < 1.0);
    }
    sleep_s(0.1);
  }
  for (auto& c : slow) {
    const Reply r = c->read_reply(5);
    CHECK(r.status == 408);
    if (r.status != 408) break;
    CHECK(c->sees_close());
  }
  CHECK(since(t0) >= 0.5);
}

TEST_CASE("http server: an idle keep-alive connection is closed quietly") {
  Limits l;
  l.idle_timeout_s = 0.3;
  Served s(l);
  Client c(s.port);
  REQUIRE(c.send("GET /hello HTTP/1.1\r\n\r\n"));
  CHECK(c.read_reply().status == 200);
  const auto t0 = Clock::now();
  CHECK(c.sees_close(5));
  CHECK(since(t0) >= 0.2);
}

TEST_CASE("http server: connection limits answer 429 per client and 503 overall") {
  Limits l;
  l.max_connections_per_client = 2;
  l.max_connections = 4;
  Served s(l);
  auto a = std::make_unique<Client>(s.port, "127.0.0.2");
  Client b(s.port, "127.0.0.2");
  REQUIRE(a->send("GET /hello HTTP/1.1\r\n\r\n"));  // both are accepted and counted
  CHECK(a->read_reply().status == 200);
  Client third(s.port, "127.0.0.2");
  Reply r = third.read_reply();
  CHECK(r.status == 429);
  CHECK(r.body.find("127.0.0.2") != std::string::npos);
  CHECK(third.sees_close());
  Client other(s.port, "127.0.0.3");  // another address is not affected
  REQUIRE(other.send("GET /hello HTTP/1.1\r\n\r\n"));
  CHECK(other.read_reply().status == 200);
  Client fourth(s.port, "127.0.0.4");
  Client fifth(s.port, "127.0.0.5");  // a, b, other, fourth: the server is full
  CHECK(fifth.read_reply().status == 503);
  // A closed connection frees its place.
  a.reset();
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    sleep_s(0.05);
    Client again(s.port, "127.0.0.2");
    REQUIRE(again.send("GET /hello HTTP/1.1\r\n\r\n"));
    served = again.read_reply().status == 200;
  }
  CHECK(served);
}

TEST_CASE("http server: a throwing handler gets a generic 500 and the server keeps serving") {
  Served s;
  Client c(s.port);
  REQUIRE(c.send("GET /throw HTTP/1.1\r\n\r\n"));
  Reply r = c.read_reply();
  CHECK(r.status == 500);
  CHECK(r.body == "ERR 500: internal error");
  CHECK(r.body.find("secret-detail") == std::string::npos);
  REQUIRE(c.send("GET /hello HTTP/1.1\r\n\r\n"));
  CHECK(c.read_reply().body == "hello");
  // A stream that throws: the reply is cut (no last chunk), the connection closed.
  Client d(s.port);
  REQUIRE(d.send("GET /stream-throw HTTP/1.1\r\n\r\n"));
  r = d.read_reply();
  CHECK(r.status == 200);
  CHECK_FALSE(r.complete);
  Client e(s.port);
  REQUIRE(e.send("GET /hello HTTP/1.1\r\n\r\n"));
  CHECK(e.read_reply().body == "hello");
}

TEST_CASE("http server: StreamWriter::alive() sees the client leave") {
  Served s;
  Client c(s.port);
  REQUIRE(c.send("GET /until-gone HTTP/1.1\r\n\r\n"));
  REQUIRE(c.fill());
  c.close_now();
  const auto t0 = Clock::now();
  while (!s.gone_seen && since(t0) < 5) sleep_s(0.02);
  CHECK(s.gone_seen);
}

TEST_CASE("http server: stop() during a stream lets it finish, then run() returns") {
  Served s;
  Client idle(s.port);  // an idle connection is closed by stop()
  Client c(s.port);
  REQUIRE(c.send("GET /slow-stream HTTP/1.1\r\n\r\n"));
  while (c.buf.find("piece0") == std::string::npos) REQUIRE(c.fill());
  s.server.stop();
  const Reply r = c.read_reply();
  CHECK(r.complete);
  CHECK(r.body == "piece0;piece1;piece2;piece3;piece4;piece5;");
  CHECK(r.header("Connection") == "keep-alive");  // sent before stop(); the connection closes after
  CHECK(c.sees_close());
  CHECK(idle.sees_close());
  const auto t0 = Clock::now();
  while (!s.finished && since(t0) < 5) sleep_s(0.01);
  CHECK(s.finished);
}

TEST_CASE("http server: bind errors are reported") {
  HttpServer server{Limits{}};
  std::string why;
  CHECK(server.bind("no-such-host.invalid", 0, &why) == -1);
  CHECK(why.find("no-such-host.invalid") != std::string::npos);
  CHECK(server.bind("127.0.0.1", 70000, &why) == -1);
  CHECK(why.find("70000") != std::string::npos);
  const int port = server.bind("127.0.0.1", 0, &why);
  CHECK(port > 0);
  HttpServer other{Limits{}};
  CHECK(other.bind("127.0.0.1", port, &why) == -1);  // taken
  CHECK(!why.empty());
}
