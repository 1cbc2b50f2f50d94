#!/usr/bin/env python3
"""A server that tells what it does (issue 25, item 6): the startup summary on stderr, one log
line per request (method, path, status, prompt/generated tokens, seconds), /metrics in Prometheus
conventions (`promtool check metrics` clean when promtool is installed; required with
KESTREL_REQUIRE_TESTDATA=1), counters that move by what the replies' usage says, histograms whose
counts equal the requests, and CORS headers only with `--cors ORIGIN` (preflight OPTIONS answered
without the API key; every reply, errors and streams included, carries Access-Control-Allow-Origin)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_common import Reply, Results, Server, http, log, model_path, scaled  # noqa: E402

ORIGIN = "https://app.example"
LONG = ("Once upon a time there was a little girl named Lily who loved to play in the park with her "
        "friends and her dog. One day she found a big red ball under a tree.")


def scrape(srv):
    """(text, {series: value}) of GET /metrics."""
    r = http(srv.host, srv.port, "GET", "/metrics", timeout=10)
    if not isinstance(r, Reply) or r.status != 200:
        raise RuntimeError(f"/metrics: {r!r}")
    text = r.body.decode("utf-8")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            out[k] = float(v)
    return text, out


def promtool_check(res, text):
    tool = shutil.which("promtool")
    if not tool:
        if os.environ.get("KESTREL_REQUIRE_TESTDATA") == "1":
            res.case("metrics", "promtool check metrics", False, "promtool is not installed")
        else:
            log("  promtool not installed: the lint check is skipped")
        return
    p = subprocess.run([tool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    problems = (p.stdout + p.stderr).decode("utf-8", "replace").strip()
    res.case("metrics", "promtool check metrics is clean", p.returncode == 0 and not problems, problems[:2000])


def histogram_problems(m, name):
    """None if the buckets of histogram `name` are cumulative and end in +Inf == _count."""
    buckets = [(k, v) for k, v in m.items() if k.startswith(name + "_bucket{")]
    if not buckets:
        return f"{name}: no buckets"
    les = []
    for k, v in buckets:
        le = re.search(r'le="([^"]+)"', k).group(1)
        les.append((float("inf") if le == "+Inf" else float(le), v))
    les.sort()
    if les[-1][0] != float("inf"):
        return f"{name}: no +Inf bucket"
    if any(a[1] > b[1] for a, b in zip(les, les[1:])):
        return f"{name}: buckets not cumulative: {les}"
    if les[-1][1] != m.get(name + "_count"):
        return f"{name}: +Inf bucket {les[-1][1]} != _count {m.get(name + '_count')}"
    if name + "_sum" not in m:
        return f"{name}: no _sum"
    return None


def sse_usage(body):
    """The usage object of a streamed reply (stream_options.include_usage), and whether [DONE] came."""
    usage, done = None, False
    for line in body.decode("utf-8").splitlines():
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            j = json.loads(line[6:])
            if j.get("usage"):
                usage = j["usage"]
    return usage, done


def delta(m0, m1, k):
    return m1.get(k, 0) - m0.get(k, 0)


def check_metrics_and_log(res, srv):
    cat = "metrics"
    err0 = srv.stderr_tail(1 << 20)
    for what, pattern in [("model", r"kestrel serve: model \S*stories260K-f32\.gguf \(llama, .*params"),
                          ("backend and threads", r"kestrel serve: backend \S+, (\d+ threads|threads: all physical cores)"),
                          ("context and slots", r"context \d+ tokens .* shared by 2 parallel slots"),
                          ("addresses", rf"OpenAI API http://{re.escape(srv.host)}:{srv.port}/v1.*CORS off")]:
        res.case("summary", f"the startup summary names the {what}", re.search(pattern, err0) is not None,
                 f"/{pattern}/ not in stderr: {err0[-1500:]!r}")

    text0, m0 = scrape(srv)
    promtool_check(res, text0)
    greedy = {"temperature": 0}
    usages, expected_log = [], []
    # 1. plain completion; 2. the same long prompt again: its full blocks come from the prefix cache.
    for i in range(2):
        r = http(srv.host, srv.port, "POST", "/v1/completions", {"prompt": LONG, "max_tokens": 6, **greedy}, timeout=60)
        ok = isinstance(r, Reply) and r.status == 200
        res.case(cat, f"completion {i + 1} answered 200", ok, repr(r))
        if ok:
            usages.append(json.loads(r.body)["usage"])
            expected_log.append(("POST", "/v1/completions", 200, usages[-1]))
    # 3. streamed completion with usage.
    r = http(srv.host, srv.port, "POST", "/v1/completions",
             {"prompt": "Once upon a time", "max_tokens": 9, "stream": True, "stream_options": {"include_usage": True},
              **greedy}, timeout=60)
    usage, done = sse_usage(r.body) if isinstance(r, Reply) else (None, False)
    res.case(cat, "streamed completion with usage", isinstance(r, Reply) and r.status == 200 and usage and done, repr(r))
    if usage:
        usages.append(usage)
        expected_log.append(("POST", "/v1/completions", 200, usage))
    # 4. chat, streamed.
    r = http(srv.host, srv.port, "POST", "/v1/chat/completions",
             {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 5, "stream": True,
              "stream_options": {"include_usage": True}, **greedy}, timeout=60)
    usage, done = sse_usage(r.body) if isinstance(r, Reply) else (None, False)
    res.case(cat, "streamed chat with usage", isinstance(r, Reply) and r.status == 200 and usage and done, repr(r))
    if usage:
        usages.append(usage)
        expected_log.append(("POST", "/v1/chat/completions", 200, usage))
    # 5. errors: a bad body (400) and an unknown path (404).
    r = http(srv.host, srv.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": -3})
    res.case(cat, "a bad request is a 400", isinstance(r, Reply) and r.status == 400, repr(r))
    expected_log.append(("POST", "/v1/completions", 400, None))
    r = http(srv.host, srv.port, "GET", "/nowhere")
    res.case(cat, "an unknown path is a 404", isinstance(r, Reply) and r.status == 404, repr(r))
    expected_log.append(("GET", "/nowhere", 404, None))
    n_gen = len(usages)

    text1, m1 = scrape(srv)
    time.sleep(scaled(0.2))  # a reply's log line is written once its bytes are out
    err1 = srv.stderr_tail(1 << 20)
    promtool_check(res, text1)
    prompt = sum(u["prompt_tokens"] for u in usages)
    gen = sum(u["completion_tokens"] for u in usages)
    cached = sum(u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages)
    res.case(cat, "the repeated prompt hit the prefix cache", cached > 0, f"cached_tokens {cached}")
    expect = {
        "kestrel_requests_total": n_gen,
        "kestrel_tokens_prompt_total": prompt,
        "kestrel_tokens_generated_total": gen,
        "kestrel_tokens_cached_total": cached,
        "kestrel_prefix_cache_queries_total": prompt,
        "kestrel_prefix_cache_hits_total": cached,
        # Every request between the scrapes, and the second scrape itself (counted as it arrives).
        "kestrel_http_requests_total": n_gen + 2 + 1,
        "kestrel_http_errors_total": 2,
        "kestrel_time_to_first_token_seconds_count": n_gen,
        "kestrel_e2e_request_latency_seconds_count": n_gen,
        "kestrel_request_queue_time_seconds_count": n_gen,
        # One latency per token after each request's first.
        "kestrel_inter_token_latency_seconds_count": gen - n_gen,
        'kestrel_requests_finished_total{reason="stop"}+{reason="length"}': n_gen,
    }
    for k, want in expect.items():
        if "+" in k:
            got = delta(m0, m1, 'kestrel_requests_finished_total{reason="stop"}') + \
                delta(m0, m1, 'kestrel_requests_finished_total{reason="length"}')
        else:
            got = delta(m0, m1, k)
        res.case(cat, f"{k} moved by {want}", got == want, f"moved by {got}")
    for h in ("kestrel_time_to_first_token_seconds", "kestrel_inter_token_latency_seconds",
              "kestrel_e2e_request_latency_seconds", "kestrel_request_queue_time_seconds"):
        p = histogram_problems(m1, h)
        res.case(cat, f"{h} is a well-formed histogram", p is None, p)
    ratio = m1.get("kestrel_kv_cache_usage_ratio")
    res.case(cat, "kestrel_kv_cache_usage_ratio in [0, 1]", ratio is not None and 0 <= ratio <= 1, repr(ratio))
    # The log: one line per request, with the tokens of its usage.
    lines = err1[len(err0):].splitlines()
    access = [ln for ln in lines if re.match(r"^(GET|POST|OPTIONS) /", ln)]
    for ln in access:
        if not re.match(r"^[A-Z]+ /\S* \d{3}( prompt=\d+ gen=\d+)? \d+\.\d{3}s$", ln):
            res.case("log", "request log lines are compact", False, repr(ln))
    posts = [ln for ln in access if not ln.startswith("GET /metrics")]
    res.case("log", "one line per request", len(posts) == len(expected_log), "\n".join(access))
    # A stream's line is written once its last bytes are out, which may be after the client has
    # read them and sent its next request: match lines to requests whatever their order.
    left = list(posts)
    for method, path, status, usage in expected_log:
        want = f"{method} {path} {status}"
        if usage:
            want += f" prompt={usage['prompt_tokens']} gen={usage['completion_tokens']}"
        hit = next((ln for ln in left if ln.startswith(want + " ")), None)
        if hit is not None:
            left.remove(hit)
        res.case("log", f"log line {want}", hit is not None, "\n".join(posts))
    res.case("log", "the scrapes are logged", sum(ln.startswith("GET /metrics 200 ") for ln in access) >= 1,
             "\n".join(access))

    r = http(srv.host, srv.port, "GET", "/v1/models", headers={"Origin": ORIGIN})
    res.case(cat, "no CORS header without --cors", isinstance(r, Reply) and r.status == 200 and
             not r.header("Access-Control-Allow-Origin"), repr(r))
    r = http(srv.host, srv.port, "OPTIONS", "/v1/chat/completions", headers={"Origin": ORIGIN})
    res.case(cat, "OPTIONS without --cors is a 405 as before", isinstance(r, Reply) and r.status == 405 and
             not r.header("Access-Control-Allow-Origin"), repr(r))



def check_cors(res, model):
    cat = "cors"
    srv = Server(model, ["--cors", ORIGIN, "--api-key", "sekret"])
    try:
        srv.start()
    except RuntimeError as e:
        why = str(e)
        hint = " (tools/cli/cmd_serve.cpp must pass --cors to ServerOptions::cors_origin)" if "cors" in why else ""
        res.case(cat, "kestrel serve accepts --cors ORIGIN", False, why[-400:] + hint)
        return
    try:
        key = {"Authorization": "Bearer sekret"}
        err = srv.stderr_tail(1 << 20)
        res.case(cat, "the summary names the origin", f"CORS {ORIGIN}" in err, err[-800:])
        r = http(srv.host, srv.port, "OPTIONS", "/v1/chat/completions",
                 headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                          "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"})
        ok = isinstance(r, Reply) and r.status == 204
        res.case(cat, "preflight OPTIONS is a 204 without the key", ok, repr(r))
        if ok:
            allow_h = r.header("Access-Control-Allow-Headers").lower()
            res.case(cat, "preflight: Allow-Origin", r.header("Access-Control-Allow-Origin") == ORIGIN, r.headers)
            res.case(cat, "preflight: Allow-Methods has GET and POST",
                     {"GET", "POST"} <= {m.strip() for m in r.header("Access-Control-Allow-Methods").split(",")}, r.headers)
            res.case(cat, "preflight: Allow-Headers has Authorization and Content-Type",
                     "authorization" in allow_h and "content-type" in allow_h, r.headers)
        r = http(srv.host, srv.port, "OPTIONS", "/v1/models", headers={"Origin": ORIGIN})
        res.case(cat, "preflight without Request-Headers allows Authorization, Content-Type",
                 isinstance(r, Reply) and r.status == 204 and
                 "authorization" in r.header("Access-Control-Allow-Headers").lower() and
                 "content-type" in r.header("Access-Control-Allow-Headers").lower(), repr(r))
        checks = [
            ("GET /v1/models", http(srv.host, srv.port, "GET", "/v1/models", headers={"Origin": ORIGIN, **key}), 200),
            ("a 401 without the key", http(srv.host, srv.port, "GET", "/v1/models", headers={"Origin": ORIGIN}), 401),
            ("a 404", http(srv.host, srv.port, "GET", "/nowhere", headers=key), 404),
            ("a 400", http(srv.host, srv.port, "POST", "/v1/completions", {"prompt": 3}, headers=key), 400),
            ("a stream", http(srv.host, srv.port, "POST", "/v1/completions",
                              {"prompt": "Once", "max_tokens": 4, "stream": True}, headers=key, timeout=60), 200),
            ("/metrics", http(srv.host, srv.port, "GET", "/metrics", headers=key), 200),
        ]
        for name, r, status in checks:
            res.case(cat, f"{name} carries Access-Control-Allow-Origin",
                     isinstance(r, Reply) and r.status == status and r.header("Access-Control-Allow-Origin") == ORIGIN,
                     repr(r) + (f" {r.headers}" if isinstance(r, Reply) else ""))
    finally:
        rc = srv.stop()
        res.case(cat, "the server exits 0 on SIGTERM", rc == 0, f"exit {rc}")


def main():
    model = model_path("stories260K-f32.gguf")
    res = Results("observability")
    srv = Server(model, ["--parallel", "2"])
    srv.start()
    try:
        check_metrics_and_log(res, srv)
    finally:
        rc = srv.stop()
        res.case("metrics", "the server exits 0 on SIGTERM", rc == 0, f"exit {rc}: {srv.stderr_tail()}")
    check_cors(res, model)
    return res.summary()


if __name__ == "__main__":
    sys.exit(main())
