"""Malformed HTTP over raw sockets: broken request lines and headers, oversized heads, bad
Content-Length and Transfer-Encoding, wrong methods on every known path, unknown paths, and
(on a server started with --api-key) missing or wrong credentials."""
from hostile_common import Case, exchange

GET_PATHS = ["/v1/models", "/health", "/metrics", "/"]
POST_PATHS = ["/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"]
BODY = b'{"content": "Hello"}'


def raw(data, timeout=10.0, shut_write=False, head_request=False):
    return lambda srv: exchange(srv.host, srv.port, data, timeout, shut_write=shut_write, head_request=head_request)


def req(method, path, headers=(), body=b"", version="HTTP/1.1"):
    """A request with Host and Connection: close plus the given (name, value) headers, as bytes."""
    lines = [f"{method} {path} {version}".encode("latin-1"), b"Host: x", b"Connection: close"]
    lines += [k.encode("latin-1") + b": " + (v if isinstance(v, bytes) else v.encode("latin-1")) for k, v in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def post_with(headers, body=BODY, path="/tokenize"):
    return req("POST", path, [("Content-Type", "application/json")] + list(headers), body)


def request_lines():
    bad_lines = [
        (b"GARBAGE\r\n\r\n", {400}), (b"GET\r\n\r\n", {400}), (b"GET /health\r\n\r\n", {400, 505}),
        (b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n", {400, 505}), (b"GET /health HTTP/1.1 extra\r\nHost: x\r\n\r\n", {400}),
        (b"GET /health HTTX/1.1\r\nHost: x\r\n\r\n", {400}), (b"\x00\x01\x02\xff\xfe\r\n\r\n", {400}),
        (b"GET /he\x00alth HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404}),
        (b"GET /health\x7f HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404}),
        (b"GET /health HTTP/1.1\nHost: x\n\n", "non5xx"),
        (b"GET  /health  HTTP/1.1\r\nHost: x\r\n\r\n", "non5xx"),
        (b"get /health HTTP/1.1\r\nHost: x\r\n\r\n", {400, 405, 501}),
        (b"BREW /health HTTP/1.1\r\nHost: x\r\n\r\n", {400, 405, 501}),
        (b"G\x00T /health HTTP/1.1\r\nHost: x\r\n\r\n", {400, 405, 501}),
        (b"A" * 10000 + b" /health HTTP/1.1\r\nHost: x\r\n\r\n", {400, 405, 414, 431, 501}),
        (b"GET " + b"/" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {400, 414, 431}),
        (b"GET /health?" + b"q=1&" * 30000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", {400, 414, 431}),
        (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404, 405}),
        (b"GET http://x/health HTTP/1.1\r\nHost: x\r\n\r\n", "non5xx"),
        (b"OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", "non5xx"),
        (b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n", {400, 404, 405, 501}),
    ]
    cases = [Case("http-line", repr(d[:40]), raw(d), e, allow_closed=False) for d, e in bad_lines]
    cases.append(Case("http-line", "blank lines then EOF", raw(b"\r\n\r\n\r\n", shut_write=True), {400}, allow_closed=True))
    cases.append(Case("http-line", "half a request line then EOF", raw(b"GET /hea", shut_write=True), {400}, allow_closed=True))
    # A reply to HEAD has no body, so an error status cannot carry the JSON error object.
    cases.append(Case("http-line", "HEAD /health", raw(req("HEAD", "/health"), head_request=True), "non5xx",
                      head_request=True))
    return cases


def headers():
    specs = [
        ("header without a colon", req("GET", "/health", [("X", "1")]).replace(b"X: 1", b"BadHeaderNoColon"), {400}),
        ("space in a header name", req("GET", "/health", [("Bad Name", "v")]), {400}),
        # RFC 9110 5.5: reject, or replace NUL / a lone CR with a space.
        ("NUL in a header value", req("GET", "/health", [("X-A", b"a\x00b")]), {200, 400}),
        ("CR alone in a header value", req("GET", "/health", [("X-A", b"a\rb")]), {200, 400}),
        ("obs-fold continuation line", req("GET", "/health", [("X-A", "a")]).replace(b"X-A: a", b"X-A: a\r\n folded"), "non5xx"),
        ("empty header name", req("GET", "/health", [("", "v")]), {400}),
        ("a 100 KB header", req("GET", "/health", [("X-Big", "b" * 100000)]), {400, 431}),
        ("300 headers", req("GET", "/health", [(f"X-H{i}", "v") for i in range(300)]), {400, 431}),
        ("1 MB of headers", req("GET", "/health", [(f"X-H{i}", "v" * 1000) for i in range(1000)]), {400, 431}),
        ("binary header value", req("GET", "/health", [("X-Bin", bytes(range(1, 32)).replace(b"\r", b"").replace(b"\n", b""))]), "non5xx"),
        ("Host header 64 KB", req("GET", "/health", [("Host", "h" * 65536)]), {400, 431}),
    ]
    return [Case("http-headers", name, raw(d), e) for name, d, e in specs]


def bodies():
    tok = "/tokenize"
    specs = [
        ("Content-Length -1", post_with([("Content-Length", "-1")]), {400}),
        ("Content-Length abc", post_with([("Content-Length", "abc")]), {400}),
        ("Content-Length 0x10", post_with([("Content-Length", "0x10")]), {400}),
        ("Content-Length +20", post_with([("Content-Length", "+20")]), {400}),
        ("Content-Length '1, 2'", post_with([("Content-Length", "1, 2")]), {400}),
        ("Content-Length empty", post_with([("Content-Length", "")]), {400, 411}),
        ("two different Content-Lengths", post_with([("Content-Length", "20"), ("Content-Length", "5")]), {400}),
        ("Content-Length 10^23", post_with([("Content-Length", "1" + "0" * 23)]), {400, 413}),
        ("Content-Length 2^64", post_with([("Content-Length", str(2 ** 64))]), {400, 413}),
        ("Content-Length 9 MiB, no body sent", post_with([("Content-Length", str(9 << 20))], b""), {413}),
        ("Content-Length shorter than the body", post_with([("Content-Length", "5")]), {400}),
        ("POST without Content-Length", post_with([]), {400, 411}),
        ("chunked body with a bad size", post_with([("Transfer-Encoding", "chunked")], b"zz\r\nabc\r\n0\r\n\r\n"), {400}),
        ("chunked body of 2^64-1 bytes", post_with([("Transfer-Encoding", "chunked")], b"ffffffffffffffff\r\nabc"),
         {400, 413, 501}),
        ("chunked body, valid", post_with([("Transfer-Encoding", "chunked")], b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)),
         {200, 400, 411, 501}),
        ("Transfer-Encoding and Content-Length", post_with([("Transfer-Encoding", "chunked"), ("Content-Length", "3")],
                                                           b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)), {200, 400, 411, 501}),
        ("Transfer-Encoding gzip", post_with([("Transfer-Encoding", "gzip"), ("Content-Length", str(len(BODY)))]),
         {400, 411, 501}),
        ("Expect: 100-continue with a 9 MiB Content-Length",
         post_with([("Expect", "100-continue"), ("Content-Length", str(9 << 20))], b""), {413, 417}),
        ("Expect: something-else", post_with([("Expect", "fancy"), ("Content-Length", str(len(BODY)))]), {200, 417}),
        ("Content-Type text/plain", req("POST", tok, [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))], BODY),
         {200, 400, 415}),
    ]
    cases = [Case("http-body", name, raw(d), e) for name, d, e in specs]
    # The client promises 100 bytes, sends 10 and closes its side: a prompt 400 or a close, not a hang.
    cases.append(Case("http-body", "Content-Length 100, 10 bytes sent, then EOF",
                      raw(post_with([("Content-Length", "100")], b'{"content"'), timeout=5, shut_write=True),
                      {400}, allow_closed=True))
    return cases


def methods():
    cases = []
    for p in GET_PATHS:
        for m in ("POST", "PUT", "DELETE", "PATCH"):
            body = [("Content-Length", str(len(BODY)))] if m != "DELETE" else []
            cases.append(Case("methods", f"{m} {p}", raw(req(m, p, body, BODY if body else b"")), {405}))
    for p in POST_PATHS:
        for m in ("GET", "PUT", "DELETE", "PATCH"):
            body = [("Content-Length", str(len(BODY)))] if m in ("PUT", "PATCH") else []
            cases.append(Case("methods", f"{m} {p}", raw(req(m, p, body, BODY if body else b"")), {405}))
    return cases


def unknown_paths():
    paths = ["/v2/models", "/v1/chat/completion", "/v1/chat/completions/extra", "/health/", "/metricsx",
             "/%2e%2e/%2e%2e/etc/passwd", "/../../etc/passwd", "/" + "a" * 4000, "/tokenize%00", "/v1", "/v1/",
             "/index.html", "/\xff\xfe"]
    cases = [Case("paths", f"GET {p[:40]!r}", raw(req("GET", p)), {404, 400}) for p in paths]
    for p in ["/v1/chat/completions2", "/completion"]:
        cases.append(Case("paths", f"POST {p}", raw(post_with([("Content-Length", str(len(BODY)))], path=p)), {404}))
    return cases


def auth(key):
    """For a server started with --api-key key."""
    cl = ("Content-Length", str(len(BODY)))
    specs = [
        ("GET /v1/models without a key", req("GET", "/v1/models")),
        ("GET /v1/models with a wrong key", req("GET", "/v1/models", [("Authorization", "Bearer wrong")])),
        ("GET /v1/models with a key prefix", req("GET", "/v1/models", [("Authorization", "Bearer " + key[:-1])])),
        ("GET /v1/models with the key plus a byte", req("GET", "/v1/models", [("Authorization", "Bearer " + key + "x")])),
        ("GET /v1/models with 'Bearer' alone", req("GET", "/v1/models", [("Authorization", "Bearer")])),
        ("GET /v1/models with Basic auth", req("GET", "/v1/models", [("Authorization", "Basic " + key)])),
        ("GET /metrics without a key", req("GET", "/metrics")),
        ("POST /tokenize without a key", post_with([cl])),
        ("POST /v1/completions with a wrong key", post_with([cl, ("Authorization", "Bearer nope")], path="/v1/completions")),
        ("POST /v1/chat/completions without a key", post_with([cl], path="/v1/chat/completions")),
    ]
    cases = [Case("auth", name, raw(d), {401}) for name, d in specs]
    # Control bytes make the header itself invalid (RFC 9110 5.5): 400 is as right as 401.
    cases.append(Case("auth", "GET /v1/models with a binary key",
                      raw(req("GET", "/v1/models", [("Authorization", b"Bearer \xff\xfe\x01")])), {400, 401}))
    cases.append(Case("auth", "GET /v1/models with a 100 KB key", raw(req("GET", "/v1/models", [("Authorization", "Bearer " + "k" * 100000)])),
                      {400, 401, 431}))
    cases.append(Case("auth", "sanity: GET /health without a key", raw(req("GET", "/health")), {200}))
    cases.append(Case("auth", "sanity: GET /v1/models with the key", raw(req("GET", "/v1/models", [("Authorization", "Bearer " + key)])),
                      {200}))
    return cases


def all_cases():
    return request_lines() + headers() + bodies() + methods() + unknown_paths()
