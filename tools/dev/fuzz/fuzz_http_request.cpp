// libFuzzer target for the server's HTTP/1.1 request parsing (tools/server/http/http_parser.h):
// raw bytes as a client would send them on one connection, parsed the way the event loop does
// (request heads, Content-Length or chunked bodies, pipelined requests one after the other), whole
// and split at pseudo-random points. By hand, from the repo root:
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Itools \
//     tools/dev/fuzz/fuzz_http_request.cpp tools/server/http/http_parser.cpp -o /tmp/fuzz_http_request
//   /tmp/fuzz_http_request -max_len=4096 -max_total_time=60
//
// Invariants (a violation traps): every prefix of the input either needs more bytes or gives
// exactly the result of the whole input (so trickled bytes are parsed like a burst); errors carry a
// 4xx status and a printable message; waiting for more never holds more than the limits allow; a
// parsed head is well formed; a chunked body decodes the same in pieces as at once.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/http_parser.h"

using namespace kestrel::server::http;

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

// Small deterministic generator seeded by the input, for split points.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

void check_error(const ParseResult& r) {
  require(r.status == 400 || r.status == 413 || r.status == 414 || r.status == 417 || r.status == 431);
  require(!r.message.empty());
  for (char c : r.message) require(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f);
}

bool same(const ParseResult& a, const ParseResult& b) {
  return a.state == b.state && a.status == b.status && (a.state != Parse::kComplete || a.consumed == b.consumed);
}

void check_head(const RequestHead& h, const ParseResult& r, std::string_view in, const Limits& l) {
  require(r.consumed > 0 && r.consumed <= in.size() && in[r.consumed - 1] == '\n');
  require(!h.method.empty());
  require(h.path == "*" || (!h.path.empty() && h.path[0] == '/'));
  require(h.version == "HTTP/1.1" || h.version == "HTTP/1.0");
  require(h.headers.size() <= l.max_headers);
  require(!(h.chunked && h.has_content_length));
  for (const auto& [name, value] : h.headers) {
    require(!name.empty());
    require(value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos);
  }
}

// The whole body at once, then in pieces the way the loop feeds it: same outcome and same data.
ParseResult check_chunked(std::string_view in, const Limits& l, Rng& rng, std::string* body) {
  ChunkedDecoder whole(l.max_body_bytes, l.max_header_bytes);
  const ParseResult once = whole.feed(in, body);
  if (once.state == Parse::kError) check_error(once);
  require(body->size() <= l.max_body_bytes);
  ChunkedDecoder pieces(l.max_body_bytes, l.max_header_bytes);
  std::string pending, got;
  size_t fed = 0, used = 0;
  ParseResult r;
  while (r.state == Parse::kNeedMore && fed < in.size()) {
    const size_t n = 1 + rng.next() % 64;
    pending.append(in.substr(fed, n));
    fed = std::min(in.size(), fed + n);
    r = pieces.feed(pending, &got);
    if (r.state == Parse::kError) break;
    pending.erase(0, r.consumed);
    used += r.consumed;
    // What waits for more stays small: a size line, a CR, or trailers under their limit.
    if (r.state == Parse::kNeedMore) require(pending.size() <= std::max<size_t>(4097, l.max_header_bytes));
  }
  require(r.state == once.state && r.status == once.status);
  if (once.state == Parse::kComplete) require(got == *body && used == once.consumed);
  return once;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The whole input is the connection's bytes (the seeds are plain requests). Its first and last
  // bytes also pick the limits: generous ones, or (half the time) small ones that get reached.
  const unsigned k = data[0] ^ data[size - 1];
  Limits l;
  l.max_request_line = 1024;
  l.max_header_bytes = 4096;
  l.max_headers = 32;
  l.max_body_bytes = 4096;
  if (k & 0x80) {
    l.max_request_line = 16 + (k & 0x1f) * 4;
    l.max_header_bytes = l.max_request_line + (k & 0x60) * 2;
    l.max_headers = 1 + (k & 3);
    l.max_body_bytes = 1 + (k & 0x7f) * 8;
  }
  std::string_view in(reinterpret_cast<const char*>(data), size);
  Rng rng{0x9e3779b97f4a7c15ull ^ size};
  for (size_t i = 0; i < size && i < 16; ++i) rng.s = rng.s * 31 + data[i];
  if (rng.s == 0) rng.s = 1;

  for (int request = 0; request < 16 && !in.empty(); ++request) {
    RequestHead h;
    const ParseResult whole = parse_head(in, l, &h);
    if (whole.state == Parse::kError) check_error(whole);
    if (whole.state == Parse::kNeedMore) require(in.size() <= l.max_request_line + 1 + std::max(l.max_request_line + 1, l.max_header_bytes));
    if (whole.state == Parse::kComplete) check_head(h, whole, in, l);
    // Prefixes at increasing random points: need more, or exactly the whole input's result.
    bool decided = false;
    for (size_t p = rng.next() % (in.size() + 1); p <= in.size(); p += 1 + rng.next() % 97) {
      RequestHead hp;
      const ParseResult r = parse_head(in.substr(0, p), l, &hp);
      require(!decided || r.state != Parse::kNeedMore);
      if (r.state == Parse::kNeedMore) continue;
      decided = true;
      require(same(r, whole));
      if (r.state == Parse::kComplete) require(hp.method == h.method && hp.target == h.target && hp.headers == h.headers);
    }
    if (whole.state != Parse::kComplete) break;
    in.remove_prefix(whole.consumed);
    if (h.chunked) {
      std::string body;
      const ParseResult b = check_chunked(in, l, rng, &body);
      if (b.state != Parse::kComplete) break;
      in.remove_prefix(b.consumed);
    } else {
      if (h.content_length > l.max_body_bytes || h.content_length > in.size()) break;  // 413, or a body to wait for
      in.remove_prefix(static_cast<size_t>(h.content_length));
    }
  }
  return 0;
}
