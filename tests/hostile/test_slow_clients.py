#!/usr/bin/env python3
"""Slow and unusual clients against `kestrel serve` (issue 18):
  1. 80 slowloris connections (one header byte every 2 s) and 10 slow-body connections (head with
     Content-Length 1000, then a byte a second), all from 127.0.0.2 and reopened as soon as the
     server drops them, for ~15 s: /health from 127.0.0.1 must answer within 1 s every time, and
     each slow connection must get a 408 or be closed within its timeout (5 s here) + a margin;
  2. the per-client connection limit: 120 idle connections from 127.0.0.3 against a limit of 100
     -> at least 20 answered 429 or closed at once;
  3. keep-alive and pipelining: requests sent back to back on one connection, answered in order;
  4. an HTTP/1.0 client gets its stream close-delimited, not chunked;
  5. Expect: 100-continue gets a 100 before the body is sent, then the reply."""
import json
import os
import select
import socket
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_common import (CLOSED, Conn, Reply, Results, Server, connect, error_problem, health, log,  # noqa: E402
                            model_path, scaled, stream)

TIMEOUT_S = 5      # --header-timeout and --body-timeout given to the server
ATTACK_S = 15      # how long the slow connections keep coming
N_SLOWLORIS, N_SLOW_BODY = 80, 10
PER_CLIENT = 100   # --max-connections-per-client (the 90 slow connections fit under it)
ATTACKER, CROWD = "127.0.0.2", "127.0.0.3"


def slow_connection(srv, head, trickle, gap, end, out, lock):
    """Repeatedly: connect from ATTACKER, send head at once, then trickle one byte per gap seconds
    until the server answers or closes. Records (seconds from the end of head to the close, what
    ended it); a connection still open at `end` records how long it had been open."""
    while time.monotonic() < end:
        try:
            s = connect(srv.host, srv.port, timeout=gap, source=ATTACKER)
            s.settimeout(gap)  # the attack's pace: not stretched by KESTREL_TIME_SCALE
        except OSError as e:
            with lock:
                out.append((0.0, f"connect failed: {e}"))
            time.sleep(gap)
            continue
        c, t0, what, i = Conn(s), time.monotonic(), None, 0
        try:
            if head:
                s.sendall(head)
            while what is None and time.monotonic() < end:
                try:
                    if i < len(trickle):
                        s.sendall(trickle[i:i + 1])
                        i += 1
                    d = s.recv(4096)
                    c.buf += d
                    what = "closed" if not d else "reply"
                except socket.timeout:
                    continue
                except OSError:
                    what = "closed"
        finally:
            elapsed = time.monotonic() - t0
            if what == "reply":
                what = reply_outcome(s, c)
            with lock:
                out.append((elapsed, what or "still open"))
            s.close()
        if what == "reply 429":
            time.sleep(0.2)  # refused (the address is at its limit): do not spin


def reply_outcome(s, c):
    """'reply STATUS' for an error reply with an OpenAI-style body, else what is wrong with it."""
    try:
        s.settimeout(2.0)
        r = c.reply()
    except (OSError, EOFError, ValueError) as e:
        return f"reply cut short ({type(e).__name__}): {c.buf[:80]!r}"
    if not isinstance(r, Reply):
        return f"reply {r}"
    p = error_problem(r) if r.status >= 400 else "not an error status"
    return f"reply {r.status}" + (f" with a bad body: {p}" if p else "")


def attack(srv, res):
    cat = "slow-clients"
    end = time.monotonic() + ATTACK_S
    deadline = TIMEOUT_S + scaled(3)
    lock = threading.Lock()
    loris, bodies = [], []
    loris_head = b""
    loris_trickle = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    body_head = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\n\r\n")
    body_trickle = b'{"content": "' + b"a" * 980
    threads = [threading.Thread(target=slow_connection, args=(srv, loris_head, loris_trickle, 2.0, end, loris, lock))
               for _ in range(N_SLOWLORIS)]
    threads += [threading.Thread(target=slow_connection, args=(srv, body_head, body_trickle, 1.0, end, bodies, lock))
                for _ in range(N_SLOW_BODY)]
    for t in threads:
        t.daemon = True
        t.start()
    time.sleep(1.0)  # let every slow connection be open before probing
    probes, slow = 0, []
    while time.monotonic() < end:
        ok, secs = health(srv.host, srv.port, timeout=scaled(1.0))
        probes += 1
        if not ok:
            slow.append(round(secs, 2))
        time.sleep(0.25)
    for t in threads:
        t.join(scaled(10) + 3)
    res.case(cat, f"/health answers within 1 s while {N_SLOWLORIS}+{N_SLOW_BODY} slow connections are open "
                  f"({probes} probes)", not slow, f"{len(slow)} probes failed or took >= 1 s: {slow[:10]}")
    for name, got in (("slowloris", loris), ("slow body", bodies)):
        late = [(round(e, 1), w) for e, w in got if e > deadline]
        # 429: a connection reopened while the server still counts the one it just timed out.
        bad = [w for _, w in got if w.startswith("reply") and w not in ("reply 408", "reply 429")]
        failed = [w for _, w in got if w.startswith("connect failed")]
        kinds = sorted({w for _, w in got})
        log(f"  {name}: {len(got)} connections, outcomes {kinds}")
        res.case(cat, f"{name} connections get a 408 or a close within {TIMEOUT_S} s + margin", not late and got,
                 f"{len(late)} of {len(got)} late: {late[:5]}")
        res.case(cat, f"{name} connections: any reply is a 408 (or 429)", not bad, f"{bad[:5]}")
        res.case(cat, f"{name} connections: none refused at connect", not failed, f"{failed[:3]}")


def per_client_limit(srv, res):
    cat = "slow-clients"
    socks, refused, problems = [], 0, []
    for _ in range(PER_CLIENT + 20):
        try:
            socks.append(connect(srv.host, srv.port, timeout=0.5, source=CROWD))
        except OSError:
            refused += 1
    time.sleep(min(scaled(1.5), 3.0))  # well inside the 5 s header timeout: only refusals have arrived
    ready, _, _ = select.select(socks, [], [], 0)
    for s in ready:
        s.settimeout(1.0)
        try:
            r = Conn(s).reply()
        except (OSError, EOFError, ValueError):
            r = CLOSED
        refused += 1
        if isinstance(r, Reply):
            if r.status != 429:
                problems.append(f"status {r.status}")
            elif error_problem(r):
                problems.append(error_problem(r))
    ok, _ = health(srv.host, srv.port, timeout=scaled(1.0))
    for s in socks:
        s.close()
    res.case(cat, f"{PER_CLIENT + 20} connections from one address, limit {PER_CLIENT}: >= 20 refused (429 or close)",
             refused >= 20 and not problems, f"{refused} refused; {problems[:3]}")
    res.case(cat, "/health from another address still answers", ok, "no answer")


def pipelining(srv, res):
    cat = "http1.1"
    s = connect(srv.host, srv.port, timeout=10)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /health?again=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        c, got = Conn(s), []
        for _ in range(3):
            r = c.reply()
            got.append(r.status if isinstance(r, Reply) else r)
            if isinstance(r, Reply) and len(got) == 2 and b'"data"' not in r.body:
                got[-1] = f"not the models list: {r.body[:80]!r}"
    except (OSError, EOFError, ValueError) as e:
        got.append(f"{type(e).__name__}: {e}")
    finally:
        s.close()
    res.case(cat, "three pipelined GETs are all answered, in order", got == [200, 200, 200], f"got {got}")

    contents = ["Once upon a time", "The dog", "A red ball and a blue ball"]
    want = []
    for t in contents:
        r = post_tokenize(srv, t)
        want.append(r)
    s = connect(srv.host, srv.port, timeout=10)
    got = []
    try:
        data = b""
        for i, t in enumerate(contents):
            b = json.dumps({"content": t}).encode()
            last = b"Connection: close\r\n" if i == len(contents) - 1 else b""
            data += (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + last +
                     b"Content-Length: %d\r\n\r\n" % len(b) + b)
        s.sendall(data)
        c = Conn(s)
        for _ in contents:
            r = c.reply()
            got.append(json.loads(r.body)["tokens"] if isinstance(r, Reply) and r.status == 200 else r)
    except (OSError, EOFError, ValueError, KeyError) as e:
        got.append(f"{type(e).__name__}: {e}")
    finally:
        s.close()
    res.case(cat, "three pipelined POST /tokenize are answered in order", got == want, f"got {got}, want {want}")

    s = connect(srv.host, srv.port, timeout=10)
    got = []
    try:
        c = Conn(s)
        for i in range(3):  # keep-alive: one request at a time on the same connection
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            r = c.reply()
            got.append(r.status if isinstance(r, Reply) else r)
    except (OSError, EOFError, ValueError) as e:
        got.append(f"{type(e).__name__}: {e}")
    finally:
        s.close()
    res.case(cat, "keep-alive: three requests one after another on one connection", got == [200, 200, 200], f"got {got}")


def post_tokenize(srv, text):
    s = connect(srv.host, srv.port, timeout=10)
    try:
        b = json.dumps({"content": text}).encode()
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(b) + b)
        r = Conn(s).reply()
        return json.loads(r.body)["tokens"] if isinstance(r, Reply) and r.status == 200 else r
    finally:
        s.close()


def http10_and_expect(srv, res):
    cat = "http1.1"
    body = {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stream": True}
    r = stream(srv.host, srv.port, "/v1/completions", body, timeout=30, http10=True)
    problems = list(r["problems"])
    if r["status"] != 200:
        problems.append(f"status {r['status']}")
    if r["chunked"]:
        problems.append("the reply to an HTTP/1.0 request uses chunked encoding")
    res.case(cat, "HTTP/1.0 streamed reply: close-delimited SSE, not chunked", not problems, "; ".join(problems[:3]))

    s = connect(srv.host, srv.port, timeout=5)
    got = []
    try:
        b = b'{"content": "Hello"}'
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(b))
        c = Conn(s)
        r = c.reply()  # must come before the body is sent
        got.append(r.status if isinstance(r, Reply) else r)
        s.sendall(b)
        r = c.reply()
        got.append(r.status if isinstance(r, Reply) else r)
    except (OSError, EOFError, ValueError) as e:
        got.append(f"{type(e).__name__}: {e}")
    finally:
        s.close()
    res.case(cat, "Expect: 100-continue gets 100, then 200 once the body is sent", got == [100, 200], f"got {got}")


def main():
    model = model_path("stories260K-f32.gguf")
    res = Results("slow-clients")
    t0 = time.monotonic()
    flags = ["--header-timeout", str(TIMEOUT_S), "--body-timeout", str(TIMEOUT_S),
             "--max-connections-per-client", str(PER_CLIENT)]
    srv = Server(model, ["--parallel", "2"], flags, results=res)
    try:
        srv.start()
        pipelining(srv, res)
        http10_and_expect(srv, res)
        attack(srv, res)
        if not srv.alive():
            res.case("slow-clients", "server alive after the attack", False, srv.exit_text())
            srv.start()
        time.sleep(0.5)
        per_client_limit(srv, res)
    finally:
        srv.kill()
    log(f"slow-clients: {time.monotonic() - t0:.1f} s")
    return res.summary()


if __name__ == "__main__":
    threading.stack_size(512 * 1024)
    sys.exit(main())
