"""A mixed generation load for `kestrel serve`: N client threads, each sending requests that mix
temperatures 0..2, streamed and whole replies, chat and completions, and (some) disconnects in the
middle of a stream. Every reply is checked (status, JSON, UTF-8, SSE framing). Used by
test_stream_load.py and by tools/dev/soak.sh (through tools/dev/soak_load.py)."""
import json
import random
import threading
import time

from hostile_common import Reply, http, stream

PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park. They",
           "\u4e2d\u6587 and emoji \U0001F600 then", "Tom had a red ball", "One day, a cat"]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.statuses = {}
        self.disconnects = 0
        self.problems = []   # (request description, problem)
        self.server_errors = []  # 5xx replies

    def add(self, desc, status, problems, disconnected=False):
        with self.lock:
            self.requests += 1
            self.statuses[status] = self.statuses.get(status, 0) + 1
            self.disconnects += disconnected
            self.problems += [(desc, p) for p in problems]
            if isinstance(status, int) and status >= 500:
                self.server_errors.append(desc)

    def line(self):
        return (f"{self.requests} requests, statuses {dict(sorted(self.statuses.items(), key=str))}, "
                f"{self.disconnects} disconnects, {len(self.problems)} problems")


def one_request(host, port, rng, timeout=60.0, disconnect_rate=0.15, stream_rate=0.75, max_tokens=(8, 40),
                force=None):
    """Sends one random request; returns (description, status, problems, disconnected).
    force: extra body fields (e.g. a logit_bias) merged into the random body."""
    chat = rng.random() < 0.5
    streamed = rng.random() < stream_rate
    body = {"max_tokens": rng.randint(*max_tokens), "temperature": round(rng.uniform(0, 2.0), 2),
            "seed": rng.randrange(1 << 31)}
    if rng.random() < 0.3:
        body["top_p"] = round(rng.uniform(0.5, 1.0), 2)
    prompt = rng.choice(PROMPTS)
    if chat:
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": prompt}]
    else:
        path, body["prompt"] = "/v1/completions", prompt
    body.update(force or {})
    desc = f"{path} stream={streamed} temp={body['temperature']} max_tokens={body['max_tokens']} seed={body['seed']}"
    if streamed:
        body["stream"] = True
        cut = rng.randint(1, 6) if rng.random() < disconnect_rate else None
        r = stream(host, port, path, body, timeout=timeout, disconnect_after=cut, abort=rng.random() < 0.5)
        if r.get("disconnected"):
            return desc + f" (left after {cut} events)", r["status"], r["problems"], True
        problems = list(r["problems"])
        if r["status"] == 200 and not r["finish"]:
            problems.append("no finish_reason in the stream")
        if r["status"] not in (200, None) and r["reply"] is not None:
            problems.append(f"status {r['status']}: {r['reply'].body[:200]!r}")
        return desc, r["status"], problems, False
    r = http(host, port, "POST", path, body, timeout=timeout)
    if not isinstance(r, Reply):
        return desc, r, [f"no reply: {r}"], False
    problems = []
    try:
        j = json.loads(r.body.decode("utf-8"))
        if r.status == 200 and not j["choices"][0].get("finish_reason"):
            problems.append("no finish_reason")
    except (UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError) as e:
        problems.append(f"reply is not valid UTF-8 JSON of the right shape ({e}): {r.body[:200]!r}")
    if r.status != 200:
        problems.append(f"status {r.status}: {r.body[:200]!r}")
    return desc, r.status, problems, False


def run_load(host, port, n_clients, seed, n_requests=None, until=None, stop=None, **kw):
    """n_clients threads, each sending n_requests requests (or until time.monotonic() > until, or
    until stop is set). Returns Stats."""
    stats = Stats()

    def client(i):
        rng = random.Random(seed * 1000003 + i)
        k = 0
        while True:
            if n_requests is not None and k >= n_requests:
                return
            if until is not None and time.monotonic() > until:
                return
            if stop is not None and stop.is_set():
                return
            k += 1
            try:
                stats.add(*one_request(host, port, rng, **kw))
            except Exception as e:  # a client bug must not pass for a server failure silently
                stats.add(f"client {i}", "client-error", [f"{type(e).__name__}: {e}"])

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats
