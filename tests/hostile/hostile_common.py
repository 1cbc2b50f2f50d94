"""Shared pieces of the hostile-input suite (Python 3 standard library only): finding the CLI and
the test models, starting and stopping `kestrel serve`, a small HTTP/1.1 response reader over raw
sockets, an SSE streaming client that checks every byte it gets, and per-category result counts.

Environment: KESTREL_CLI (the kestrel binary; ctest sets it), KESTREL_TESTDATA (default
../shared/testdata next to the repository), KESTREL_REQUIRE_TESTDATA=1 (a missing model fails
instead of skipping with exit code 77), KESTREL_TIME_SCALE (multiplies every timeout: ~3 under
ASan).
"""
import http.client as httpclient
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIME_SCALE = float(os.environ.get("KESTREL_TIME_SCALE", "1") or 1)
SKIP = 77


def scaled(seconds):
    return seconds * TIME_SCALE


def log(msg):
    print(msg, flush=True)


def cli_path():
    p = os.environ.get("KESTREL_CLI") or os.path.join(ROOT, "build", "kestrel")
    if not os.path.isfile(p):
        log(f"FAIL: the kestrel CLI is missing ({p}); set KESTREL_CLI")
        sys.exit(1)
    return p


def testdata():
    return os.environ.get("KESTREL_TESTDATA") or os.path.join(os.path.dirname(ROOT), "shared", "testdata")


def model_path(name):
    """Path of a test model, or exit 77 (skip) when it is missing, unless KESTREL_REQUIRE_TESTDATA=1."""
    p = os.path.join(testdata(), "models", name)
    if not os.path.isfile(p):
        if os.environ.get("KESTREL_REQUIRE_TESTDATA") == "1":
            log(f"FAIL: test model missing: {p}")
            sys.exit(1)
        log(f"SKIP: test model missing: {p}")
        sys.exit(SKIP)
    return p


class Results:
    """Pass/fail per case, grouped by category; summary() prints a line per category."""

    def __init__(self, title):
        self.title, self.cats, self.failures = title, {}, []

    def case(self, category, name, ok, detail=""):
        n = self.cats.setdefault(category, [0, 0])
        n[0] += 1
        if not ok:
            n[1] += 1
            self.failures.append(f"[{category}] {name}: {detail}")
            log(f"  FAIL [{category}] {name}: {detail}")
        return ok

    def summary(self):
        for cat, (n, bad) in self.cats.items():
            log(f"{self.title}: {cat}: {n} cases, {n - bad} passed, {bad} failed")
        total = sum(n for n, _ in self.cats.values())
        bad = sum(b for _, b in self.cats.values())
        log(f"{self.title}: {total} cases, {total - bad} passed, {bad} failed")
        return 1 if bad else 0


class Server:
    """`kestrel serve -m MODEL --port 0 ARGS... LIMIT_FLAGS...` in the background."""

    def __init__(self, model, args=(), limit_flags=(), results=None):
        self.model, self.args, self.limit_flags, self.results = model, list(args), list(limit_flags), results
        self.proc, self.host, self.port = None, None, None
        self.err = tempfile.TemporaryFile()
        self.flags_refused = False

    def start(self):
        flags = [] if self.flags_refused else self.limit_flags
        ok, why = self._spawn(flags)
        if not ok and flags and "unknown option" in why:
            # Today's build may not know the limit flags: say so once, then run without them so
            # every other case still gets its own verdict.
            self.flags_refused = True
            if self.results:
                first = next((ln for ln in why.splitlines() if "unknown option" in ln), why[:200])
                self.results.case("startup", "serve accepts " + " ".join(flags), False, first)
            ok, why = self._spawn([])
        if not ok:
            raise RuntimeError(f"kestrel serve did not start: {why}")
        return self

    def _spawn(self, flags):
        cmd = [cli_path(), "serve", "-m", self.model, "--port", "0"] + self.args + flags
        self.err.seek(0)
        self.err.truncate()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, stdin=subprocess.DEVNULL)
        found = {}

        def read_stdout():
            for line in iter(self.proc.stdout.readline, b""):
                m = re.search(rb"listening on http://([^:/\s]+):(\d+)", line)
                if m and not found:
                    found["addr"] = (m.group(1).decode(), int(m.group(2)))
        threading.Thread(target=read_stdout, daemon=True).start()
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline and not found and self.proc.poll() is None:
            time.sleep(0.02)
        if not found:
            self.kill()
            return False, self.stderr_tail(20000)
        self.host, self.port = found["addr"]
        return True, ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def exit_text(self):
        rc = self.proc.poll()
        if rc is None:
            return "running"
        return f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"

    def stderr_tail(self, n=600):
        self.err.seek(0)
        return self.err.read().decode("utf-8", "replace")[-n:].strip()

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=35):
        """SIGTERM, then SIGKILL if it has not exited within timeout. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(scaled(timeout))
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


# ---- raw HTTP ---------------------------------------------------------------------------------

CLOSED = "closed"    # the server closed the connection without a reply
TIMEOUT = "timeout"  # nothing (or not all of a reply) within the timeout


class Reply:
    def __init__(self, version, status, headers, body=b""):
        self.version, self.status, self.headers, self.body = version, status, headers, body

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return ""

    def __repr__(self):
        return f"<{self.status} {self.body[:200]!r}>"


def connect(host, port, timeout=5.0, source=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(scaled(timeout))
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    return s


class Conn:
    """A socket with a read buffer: reads HTTP/1.x replies one after another (keep-alive)."""

    def __init__(self, sock):
        self.sock, self.buf, self.eof = sock, b"", False

    def _fill(self):
        if self.eof:
            return False
        try:
            d = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            d = b""
        if not d:
            self.eof = True
            return False
        self.buf += d
        return True

    def _take(self, n):
        while len(self.buf) < n:
            if not self._fill():
                raise EOFError("connection closed mid-reply")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self, limit=1 << 20):
        while b"\r\n" not in self.buf:
            if len(self.buf) > limit or not self._fill():
                raise EOFError("connection closed mid-line")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def head(self):
        """Status line + headers -> Reply without body; CLOSED if the server closed first."""
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                if not self.buf:
                    return CLOSED
                raise EOFError(f"connection closed inside a reply head: {self.buf[:200]!r}")
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"bad status line {lines[0]!r}")
        headers = []
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers.append((k.strip(), v.strip()))
        return Reply(parts[0], int(parts[1]), headers)

    def body_pieces(self, r, head_request=False):
        """Yields the body of reply r as it arrives (chunked, Content-Length or close-delimited)."""
        if head_request or r.status in (204, 304) or 100 <= r.status < 200:
            return
        if "chunked" in r.header("Transfer-Encoding").lower():
            while True:
                size = int(self._line().split(b";")[0].strip(), 16)
                if size == 0:
                    while self._line() != b"":  # trailers
                        pass
                    return
                yield self._take(size)
                if self._take(2) != b"\r\n":
                    raise ValueError("chunk not followed by CRLF")
        elif r.header("Content-Length"):
            n = int(r.header("Content-Length"))
            while n > 0:
                if not self.buf and not self._fill():
                    raise EOFError("connection closed inside a Content-Length body")
                piece, self.buf = self.buf[:n], self.buf[n:]
                n -= len(piece)
                yield piece
        else:
            while True:
                if self.buf:
                    piece, self.buf = self.buf, b""
                    yield piece
                if not self._fill():
                    return

    def reply(self, head_request=False):
        """One whole reply (interim 1xx replies are returned too), CLOSED, or raises on a timeout."""
        r = self.head()
        if r == CLOSED:
            return r
        r.body = b"".join(self.body_pieces(r, head_request))
        return r


def exchange(host, port, data, timeout=10.0, source=None, shut_write=False, head_request=False):
    """Sends raw bytes, returns the first reply (Reply), CLOSED, or TIMEOUT. A send the server
    cut short (it answered early and closed) still reads what it answered."""
    try:
        s = connect(host, port, timeout, source)
    except OSError as e:
        return f"connect failed: {e}"
    try:
        try:
            s.sendall(data)
            if shut_write:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            return Conn(s).reply(head_request)
        except socket.timeout:
            return TIMEOUT
        except (EOFError, ConnectionResetError):
            return CLOSED
    finally:
        s.close()


def http(host, port, method, path, body=None, headers=None, timeout=10.0):
    """A well-formed request through http.client (so the standard library's own HTTP parser must
    accept every reply). body: dict/list -> JSON, bytes as is. Returns Reply, CLOSED or TIMEOUT."""
    if body is not None and not isinstance(body, (bytes, bytearray)):
        body = json.dumps(body).encode()
    h = {"Host": f"{host}:{port}", "Connection": "close"}
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    conn = httpclient.HTTPConnection(host, port, timeout=scaled(timeout))
    try:
        try:
            conn.connect()
        except ConnectionRefusedError as e:  # nobody listens: refused, worded as exchange() words it
            return f"connect failed: {e}"
        try:
            conn.request(method, path, body=body, headers=h)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early and closed: read what it said
        resp = conn.getresponse()
        version = "HTTP/1.0" if resp.version == 10 else "HTTP/1.1"
        return Reply(version, resp.status, resp.getheaders(), resp.read())
    except socket.timeout:
        return TIMEOUT
    except (httpclient.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        return CLOSED
    except (httpclient.HTTPException, OSError) as e:
        return f"http.client could not read the reply: {type(e).__name__}: {e}"
    finally:
        conn.close()


def error_problem(r):
    """None if r is an OpenAI-style error reply, else what is wrong with it."""
    if not r.header("Content-Type").startswith("application/json"):
        return f"error reply Content-Type {r.header('Content-Type')!r}, not application/json"
    try:
        j = json.loads(r.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return f"error body is not JSON ({e}): {r.body[:200]!r}"
    e = j.get("error") if isinstance(j, dict) else None
    if not isinstance(e, dict):
        return f"no 'error' object: {r.body[:200]!r}"
    if not isinstance(e.get("message"), str) or not isinstance(e.get("type"), str):
        return f"error.message/type not strings: {r.body[:200]!r}"
    for k in ("param", "code"):
        if k not in e or not (e[k] is None or isinstance(e[k], str)):
            return f"error.{k} missing or not string|null: {r.body[:200]!r}"
    return None


def health(host, port, timeout=1.0, source=None):
    """(ok, seconds): GET /health answered 200 within timeout (already scaled by the caller)."""
    t0 = time.monotonic()
    try:
        s = socket.create_connection((host, port), timeout=timeout,
                                     source_address=(source, 0) if source else None)
    except OSError:
        return False, time.monotonic() - t0
    try:
        s.settimeout(max(0.01, timeout - (time.monotonic() - t0)))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        r = Conn(s).reply()
        return (isinstance(r, Reply) and r.status == 200), time.monotonic() - t0
    except (OSError, EOFError, ValueError):
        return False, time.monotonic() - t0
    finally:
        s.close()


def metrics(host, port):
    r = http(host, port, "GET", "/metrics", timeout=5)
    if not isinstance(r, Reply) or r.status != 200:
        return {}
    out = {}
    for line in r.body.decode("utf-8", "replace").splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def wait_kv_free(host, port, seconds=5.0):
    """Polls /metrics until kestrel_kv_blocks_used is 0; returns the last value seen (None: absent)."""
    deadline = time.monotonic() + scaled(seconds)
    v = None
    while True:
        v = metrics(host, port).get("kestrel_kv_blocks_used")
        if v == 0 or time.monotonic() > deadline:
            return v
        time.sleep(0.1)


# ---- streaming (SSE) --------------------------------------------------------------------------

def stream(host, port, path, body, timeout=60.0, disconnect_after=None, abort=False, http10=False, source=None,
           on_event=None):
    """POSTs a streaming request and checks every SSE event. Returns a dict: status, events (parsed
    JSON chunks), done ([DONE] seen), finish (the last finish_reason), text, problems (list of
    strings: invalid UTF-8, unparsable JSON, a missing [DONE], a cut stream), chunked, reply.
    disconnect_after=k: hang up after k events (abort: with a TCP reset instead of a FIN).
    on_event(out): called after each event (progress for the caller)."""
    out = {"status": None, "events": [], "done": False, "finish": None, "text": "", "problems": [],
           "chunked": False, "reply": None}
    payload = json.dumps(body).encode()
    ver = "HTTP/1.0" if http10 else "HTTP/1.1"
    head = (f"POST {path} {ver}\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    try:
        s = connect(host, port, timeout, source)
    except OSError as e:
        out["problems"].append(f"connect failed: {e}")
        return out
    try:
        s.sendall(head + payload)
        c = Conn(s)
        r = c.head()
        if r == CLOSED:
            out["problems"].append("connection closed without a reply")
            return out
        out["status"], out["reply"] = r.status, r
        out["chunked"] = "chunked" in r.header("Transfer-Encoding").lower()
        if r.status != 200 or not r.header("Content-Type").startswith("text/event-stream"):
            r.body = b"".join(c.body_pieces(r))
            return out
        pending = b""
        for piece in c.body_pieces(r):
            pending += piece
            while b"\n\n" in pending:
                ev, pending = pending.split(b"\n\n", 1)
                _event(ev, out)
                if on_event:
                    on_event(out)
                if disconnect_after is not None and len(out["events"]) >= disconnect_after:
                    out["disconnected"] = True
                    if abort:
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return out
        if pending.strip():
            out["problems"].append(f"stream ended inside an event: {pending[:120]!r}")
        if not out["done"]:
            out["problems"].append("stream ended without data: [DONE]")
    except socket.timeout:
        out["problems"].append("timed out")
    except (EOFError, ValueError, OSError) as e:
        out["problems"].append(f"stream cut: {e}")
    finally:
        s.close()
    return out


def _event(ev, out):
    try:
        text = ev.decode("utf-8")
    except UnicodeDecodeError as e:
        out["problems"].append(f"invalid UTF-8 in an SSE event ({e}): {ev[:120]!r}")
        text = ev.decode("utf-8", "replace")
    for line in text.split("\n"):
        if not line.startswith("data: "):
            if line.strip():
                out["problems"].append(f"unexpected SSE line {line[:120]!r}")
            continue
        data = line[6:]
        if data == "[DONE]":
            out["done"] = True
            continue
        if out["done"]:
            out["problems"].append("data after [DONE]")
        try:
            j = json.loads(data)
        except ValueError:
            out["problems"].append(f"SSE data is not JSON: {data[:120]!r}")
            continue
        out["events"].append(j)
        if isinstance(j, dict) and j.get("error"):
            out["problems"].append(f"error event: {data[:200]}")
        for ch in (j.get("choices") or []) if isinstance(j, dict) else []:
            piece = ch.get("text")
            if piece is None:
                piece = (ch.get("delta") or {}).get("content")
            if isinstance(piece, str):
                try:
                    piece.encode("utf-8")  # a lone surrogate escape (\udc80) is not text either
                except UnicodeEncodeError:
                    out["problems"].append(f"lone surrogate in streamed text: {piece!r}")
                out["text"] += piece
            if ch.get("finish_reason"):
                out["finish"] = ch["finish_reason"]


# ---- cases ------------------------------------------------------------------------------------

class Case:
    """One hostile request. send(srv) -> Reply | CLOSED | TIMEOUT | str (a client-side failure).
    expect: a set of acceptable statuses, "4xx", or "non5xx" (anything below 500: for requests a
    server may reasonably accept). allow_closed: a close without a reply is acceptable too.
    param: the field an error reply must name (in error.param or error.message). check(reply):
    a further problem description or None. head_request: a HEAD reply (no body to check)."""

    def __init__(self, cat, name, send, expect="4xx", allow_closed=False, param=None, check=None, head_request=False):
        self.cat, self.name, self.send, self.expect = cat, name, send, expect
        self.allow_closed, self.param, self.check, self.head_request = allow_closed, param, check, head_request

    def problem(self, r):
        if not isinstance(r, Reply):
            if r == CLOSED and self.allow_closed:
                return None
            return f"got {r}, want {self.expect}"
        s, e = r.status, self.expect
        ok = (400 <= s < 500) if e == "4xx" else (s < 500) if e == "non5xx" else (s in e)
        if not ok:
            return f"status {s}, want {sorted(e) if isinstance(e, set) else e}: {r.body[:300]!r}"
        if s >= 400 and not self.head_request:
            p = error_problem(r)
            if p:
                return f"status {s}: {p}"
            if self.param:
                err = json.loads(r.body)["error"]
                if self.param not in (err.get("param") or "") and self.param not in err["message"]:
                    return f"status {s}: the error names neither param nor message '{self.param}': {r.body[:300]!r}"
        return self.check(r) if self.check else None
