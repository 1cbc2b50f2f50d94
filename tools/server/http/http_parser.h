// Pure HTTP/1.1 request parsing on a byte buffer (no sockets, no clocks), so it can be tested byte
// by byte and fuzzed: the request head (request line + header fields, RFC 9112) and a chunked
// request body. Each call says: complete (and how many bytes it used), need more bytes, or an
// error with the status to answer (400, 413, 414, 417, 431) and a message naming the problem.
// Limits are checked on incomplete input too, so a client can never make a buffer grow past them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http/http_server.h"

namespace kestrel::server::http {

enum class Parse { kNeedMore, kComplete, kError };

struct ParseResult {
  Parse state = Parse::kNeedMore;
  int status = 0;        // kError: the reply status
  std::string message;   // kError: what is wrong, for the client
  size_t consumed = 0;   // kComplete: bytes of the head (parse_head); bytes used (ChunkedDecoder)
};

struct RequestHead {
  std::string method;
  std::string target;
  std::string path;      // target without the query (absolute-form: without scheme and authority)
  std::string version;   // "HTTP/1.1" (any HTTP/1.x, x >= 1) or "HTTP/1.0"
  std::vector<std::pair<std::string, std::string>> headers;  // names as sent, values trimmed
  uint64_t content_length = 0;   // saturates far above any body limit
  bool has_content_length = false;
  bool chunked = false;          // Transfer-Encoding: chunked
  bool keep_alive = true;        // from the version and the Connection header
  bool expect_continue = false;  // Expect: 100-continue on HTTP/1.1
};

// Parses the request head at the start of buf. Empty lines before the request line are skipped
// (counted in consumed). Lines end with CRLF or a bare LF; a bare CR elsewhere is an error.
ParseResult parse_head(std::string_view buf, const Limits& limits, RequestHead* out);

// Case-insensitive lookup of the first header with this name; empty when absent.
std::string find_header(const std::vector<std::pair<std::string, std::string>>& headers, std::string_view name);
bool iequals(std::string_view a, std::string_view b);

// Incremental decoder of a chunked body (RFC 9112 7.1): feed it the bytes received so far; it
// uses a prefix of them (result.consumed, also on kNeedMore: drop those bytes before the next
// call) and appends the data to *body. Chunk extensions and trailer fields are read and ignored.
class ChunkedDecoder {
 public:
  ChunkedDecoder() = default;
  ChunkedDecoder(size_t max_body, size_t max_trailer) : max_body_(max_body), max_trailer_(max_trailer) {}
  ParseResult feed(std::string_view in, std::string* body);

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  State state_ = State::kSize;
  uint64_t remaining_ = 0;  // of the current chunk's data
  size_t max_body_ = 0;
  size_t max_trailer_ = 0;
  size_t trailer_bytes_ = 0;
};

}  // namespace kestrel::server::http
