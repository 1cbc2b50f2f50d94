// The HTTP/1.1 request parser (tools/server/http/http_parser.h): complete, byte-by-byte, pipelined
// and malformed heads, framing headers, and the chunked body decoder.
#include <doctest/doctest.h>

#include <string>

#include "server/http/http_parser.h"

using namespace kestrel::server::http;

namespace {

ParseResult parse(const std::string& s, RequestHead* h, const Limits& l = Limits{}) { return parse_head(s, l, h); }

// The status of parsing s (0 when it parses completely, -1 when it needs more).
int status_of(const std::string& s, const Limits& l = Limits{}) {
  RequestHead h;
  const ParseResult r = parse(s, &h, l);
  if (r.state == Parse::kComplete) return 0;
  if (r.state == Parse::kNeedMore) return -1;
  CHECK(!r.message.empty());
  return r.status;
}

ParseResult decode(const std::string& s, std::string* body, size_t max_body = 1 << 20) {
  ChunkedDecoder d(max_body, 1024);
  ParseResult r = d.feed(s, body);
  return r;
}

}  // namespace

TEST_CASE("http parser: a complete GET head") {
  const std::string s = "GET /v1/models?x=1&y=2 HTTP/1.1\r\nHost: a\r\nX-Thing:   spaced value \t\r\nAccept: */*\r\n\r\n";
  RequestHead h;
  const ParseResult r = parse(s, &h);
  REQUIRE(r.state == Parse::kComplete);
  CHECK(r.consumed == s.size());
  CHECK(h.method == "GET");
  CHECK(h.target == "/v1/models?x=1&y=2");
  CHECK(h.path == "/v1/models");
  CHECK(h.version == "HTTP/1.1");
  REQUIRE(h.headers.size() == 3);
  CHECK(h.headers[1].first == "X-Thing");
  CHECK(h.headers[1].second == "spaced value");
  CHECK(find_header(h.headers, "x-THING") == "spaced value");
  CHECK(find_header(h.headers, "missing").empty());
  CHECK(h.keep_alive);
  CHECK_FALSE(h.has_content_length);
  CHECK_FALSE(h.chunked);
  Request req;
  req.headers = h.headers;
  CHECK(req.header("HOST") == "a");
}

TEST_CASE("http parser: byte by byte, every prefix needs more and the whole agrees") {
  const std::string s = "POST /x HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
  for (size_t n = 0; n < s.size(); ++n) {
    RequestHead h;
    CAPTURE(n);
    CHECK(parse(s.substr(0, n), &h).state == Parse::kNeedMore);
  }
  RequestHead h;
  const ParseResult r = parse(s + "hello", &h);
  REQUIRE(r.state == Parse::kComplete);
  CHECK(r.consumed == s.size());
  CHECK(h.content_length == 5);
  CHECK(h.expect_continue);
}

TEST_CASE("http parser: pipelined heads, bare LF line ends and leading empty lines") {
  const std::string a = "GET /a HTTP/1.1\r\n\r\n", b = "\r\nGET /b HTTP/1.1\nHost: x\n\n";
  const std::string both = a + b;
  RequestHead h;
  ParseResult r = parse(both, &h);
  REQUIRE(r.state == Parse::kComplete);
  CHECK(r.consumed == a.size());
  CHECK(h.path == "/a");
  r = parse(both.substr(r.consumed), &h);
  REQUIRE(r.state == Parse::kComplete);
  CHECK(r.consumed == b.size());
  CHECK(h.path == "/b");
  CHECK(find_header(h.headers, "host") == "x");
}

TEST_CASE("http parser: versions and keep-alive") {
  RequestHead h;
  REQUIRE(parse("GET / HTTP/1.0\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.version == "HTTP/1.0");
  CHECK_FALSE(h.keep_alive);
  REQUIRE(parse("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.keep_alive);
  REQUIRE(parse("GET / HTTP/1.1\r\nConnection: foo, close\r\n\r\n", &h).state == Parse::kComplete);
  CHECK_FALSE(h.keep_alive);
  REQUIRE(parse("GET / HTTP/1.2\r\n\r\n", &h).state == Parse::kComplete);  // a later 1.x is served as 1.1
  CHECK(h.version == "HTTP/1.1");
  REQUIRE(parse("GET / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n", &h).state == Parse::kComplete);
  CHECK_FALSE(h.expect_continue);  // HTTP/1.0 clients get no 100 Continue
}

TEST_CASE("http parser: request targets") {
  RequestHead h;
  REQUIRE(parse("GET http://example.com:8080/v1/models?q HTTP/1.1\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.path == "/v1/models");
  REQUIRE(parse("GET https://example.com HTTP/1.1\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.path == "/");
  REQUIRE(parse("OPTIONS * HTTP/1.1\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.path == "*");
  REQUIRE(parse("GET /a#frag HTTP/1.1\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.path == "/a");
}

TEST_CASE("http parser: malformed heads get 400 with a message") {
  const char* bad[] = {
      "GET /\r\n\r\n",                              // two parts
      "GET  / HTTP/1.1\r\n\r\n",                    // double space
      "GET / HTTP/1.1 x\r\n\r\n",                   // four parts
      "G(T / HTTP/1.1\r\n\r\n",                     // method not a token
      "GET x HTTP/1.1\r\n\r\n",                     // target neither /... nor absolute
      "GET * HTTP/1.1\r\n\r\n",                     // * only for OPTIONS
      "GET /\x01 HTTP/1.1\r\n\r\n",                 // control byte in the target
      "GET /\xc3\xa9 HTTP/1.1\r\n\r\n",             // raw non-ASCII in the target
      "GET ftp://h/ HTTP/1.1\r\n\r\n",              // unknown scheme
      "GET / HTTP/2.0\r\n\r\n",                     // unsupported version
      "GET / HTTP/1.1x\r\n\r\n",                    // bad version
      "GET / HTTX/1.1\r\n\r\n",
      "GET / http/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nNoColon\r\n\r\n",          // header without a colon
      "GET / HTTP/1.1\r\nA: b\r\n  folded\r\n\r\n", // obs-fold
      "GET / HTTP/1.1\r\nA : b\r\n\r\n",            // space before the colon
      "GET / HTTP/1.1\r\n: b\r\n\r\n",              // empty name
      "GET / HTTP/1.1\r\nA: b\x01z\r\n\r\n",        // control byte in a value
      "GET / HTTP/1.1\r\nA: b\rc\r\n\r\n",          // bare CR
      "\r\rGET / HTTP/1.1\r\n\r\n",                 // bare CR before the request line
      "GET / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: 0x10\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length:\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: ,\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",  // conflicting duplicates
      "GET / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\n",
      "GET / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",  // smuggling shape
      "GET / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      "GET / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
      "GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n",
  };
  for (const char* s : bad) {
    CAPTURE(s);
    CHECK(status_of(s) == 400);
  }
  CHECK(status_of("GET / HTTP/1.1\r\nExpect: something-else\r\n\r\n") == 417);
  // An error in a complete line is found before the head ends.
  CHECK(status_of("GET / HTTP/1.1\r\nNoColon\r\n") == 400);
  CHECK(status_of("BAD\r\n") == 400);
}

TEST_CASE("http parser: Content-Length values") {
  RequestHead h;
  REQUIRE(parse("POST / HTTP/1.1\r\nContent-Length: 7\r\ncontent-length: 7\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.content_length == 7);  // equal duplicates are one value
  REQUIRE(parse("POST / HTTP/1.1\r\nContent-Length: 7, 7\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.content_length == 7);
  REQUIRE(parse("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999999\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.content_length > (uint64_t{1} << 40));  // saturated, never wrapped: the server answers 413
  REQUIRE(parse("POST / HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n", &h).state == Parse::kComplete);
  CHECK(h.chunked);
}

TEST_CASE("http parser: size limits, on complete and on incomplete input") {
  Limits l;
  l.max_request_line = 64;
  l.max_header_bytes = 256;
  l.max_headers = 4;
  const std::string long_target = "GET /" + std::string(100, 'a') + " HTTP/1.1\r\n\r\n";
  CHECK(status_of(long_target, l) == 414);
  CHECK(status_of(long_target.substr(0, 70), l) == 414);  // no line end yet: refused already
  CHECK(status_of("GET /" + std::string(50, 'a') + " HTTP/1.1\r\n\r\n", l) == 0);  // 64 exactly
  CHECK(status_of("GET /" + std::string(51, 'a') + " HTTP/1.1\r\n\r\n", l) == 414);  // one over
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 5; ++i) many += std::string("H") + std::to_string(i) + std::string(": v\r\n");
  CHECK(status_of(many + "\r\n", l) == 431);
  CHECK(status_of(many, l) == 431);  // the fifth field, before the head ends
  CHECK(status_of("GET / HTTP/1.1\r\nA: b\r\nC: d\r\n\r\n", l) == 0);
  const std::string big = "GET / HTTP/1.1\r\nBig: " + std::string(300, 'x') + "\r\n\r\n";
  CHECK(status_of(big, l) == 431);
  CHECK(status_of(big.substr(0, 280), l) == 431);  // incomplete and already too large
  CHECK(status_of(std::string(100, '\n'), l) == 400);   // endless empty lines
  CHECK(status_of("GET / HTTP/1.1\r\nA: b\r\n", l) == -1);
}

TEST_CASE("http parser: chunked bodies") {
  const std::string s = "5\r\nhello\r\n6;ext=1\r\n world\r\nA \r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";
  std::string body;
  ParseResult r = decode(s, &body);
  REQUIRE(r.state == Parse::kComplete);
  CHECK(body == "hello world0123456789");
  CHECK(s.substr(r.consumed) == "NEXT");

  // Byte by byte: the caller drops what was consumed and appends one byte at a time.
  ChunkedDecoder d(1 << 20, 1024);
  std::string pending, got;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    pending += s[i];
    r = d.feed(pending, &got);
    REQUIRE(r.state != Parse::kError);
    pending.erase(0, r.consumed);
    if (r.state == Parse::kComplete) break;
  }
  CHECK(got == "hello world0123456789");
  CHECK(i + 1 == s.size() - 4);
  CHECK(pending.empty());

  body.clear();
  CHECK(decode("0\n\n", &body).state == Parse::kComplete);  // bare LF framing
  CHECK(decode("zz\r\n", &body).status == 400);
  CHECK(decode("\r\n", &body).status == 400);
  CHECK(decode("5 x\r\nhello\r\n0\r\n\r\n", &body).status == 400);
  CHECK(decode("5\r\nhelloXX0\r\n\r\n", &body).status == 400);  // data not followed by CRLF
  CHECK(decode(std::string(5000, '1'), &body).status == 400);    // endless size line
  CHECK(decode("ffffffffffffffffffffff\r\n", &body).status == 413);
  body.clear();
  CHECK(decode("10\r\n0123456789abcdef\r\n", &body, 8).status == 413);  // over the body limit
  body.clear();
  CHECK(decode("0\r\nT: " + std::string(2000, 'x'), &body).status == 431);  // trailers over their limit
  body.clear();
  CHECK(decode("5\r\nhel", &body).state == Parse::kNeedMore);
}
