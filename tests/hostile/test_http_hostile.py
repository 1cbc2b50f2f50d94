#!/usr/bin/env python3
"""Hostile HTTP requests against `kestrel serve` (issue 18): several hundred malformed requests
across every endpoint, each of which must get a 4xx with an OpenAI-style error object (or the
specific status the server contract names), after which /health must still answer 200 from a live
process. A case that crashes or wedges the server is recorded and the server restarted, so one
run lists every failing case. Exit code: 0 all passed, 1 some failed, 77 test model missing."""
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases_http  # noqa: E402
import cases_json  # noqa: E402
import gguf_mini  # noqa: E402
from hostile_common import Reply, Results, Server, health, log, model_path, scaled  # noqa: E402

MODEL = "stories260K-f32.gguf"  # SentencePiece with byte fallback: <0xE2> etc. are tokens


def byte_token_ids(model):
    vocab = next(v for k, _, v in gguf_mini.read(model)[0] if k == "tokenizer.ggml.tokens")[1]
    return len(vocab), {"lead 0xE2": vocab.index("<0xE2>"), "continuation 0x82": vocab.index("<0x82>"),
                        "0xFF": vocab.index("<0xFF>")}


def run_cases(srv, cases, res):
    for c in cases:
        try:
            r = c.send(srv)
            problem = c.problem(r)
        except Exception as e:  # a client-side surprise is a failed case, not a dead run
            r, problem = None, f"client error {type(e).__name__}: {e}"
        if not srv.alive():
            problem = f"the server died ({srv.exit_text()}): {srv.stderr_tail(300)!r}"
            res.case(c.cat, c.name, False, problem)
            srv.start()
            continue
        ok, secs = health(srv.host, srv.port, timeout=scaled(2))
        if not ok:
            problem = (problem + "; " if problem else "") + f"/health failed afterwards ({secs:.1f} s)"
            res.case(c.cat, c.name, False, problem)
            srv.kill()
            srv.start()
            continue
        res.case(c.cat, c.name, problem is None, problem or "")
        if isinstance(r, Reply) and r.status >= 500:
            log(f"    (5xx reply: {r.body[:200]!r})")


def main():
    model = model_path(MODEL)
    n_vocab, byte_ids = byte_token_ids(model)
    res = Results("hostile-http")
    t0 = time.monotonic()
    main_srv = Server(model, ["--parallel", "4"], results=res)
    key = "hostile-suite-key-0123456789"
    auth_srv = Server(model, ["--parallel", "1", "--api-key", key], results=res)
    try:
        main_srv.start()
        run_cases(main_srv, cases_json.sanity(), res)
        run_cases(main_srv, cases_json.all_cases(n_vocab, byte_ids), res)
        run_cases(main_srv, cases_http.all_cases(), res)
        main_srv.stop()
        auth_srv.start()
        run_cases(auth_srv, cases_http.auth(key), res)
    finally:
        main_srv.stop()
        auth_srv.stop()
    log(f"hostile-http: {time.monotonic() - t0:.1f} s")
    return res.summary()


if __name__ == "__main__":
    sys.exit(main())
