#!/usr/bin/env python3
"""Streaming under load (issue 18), on two vocabularies: the qwen3 test model (SentencePiece with
byte-fallback tokens <0x00>..<0xFF>) and the same weights with Llama 3's byte-level BPE vocabulary
cut to 512 tokens (built here in a temporary folder). For each:
  1. the reported crash: streamed /v1/completions, 30 tokens, temperature 1.0, many seeds (qwen3);
     the first streamed request at temperature 0.8 (byte-level BPE);
  2. logit_bias forcing a lone lead / continuation byte token: the stream stays valid UTF-8 and
     shows U+FFFD for what can never complete;
  3. 64 concurrent clients (--parallel 8) mixing temperatures 0..2, streamed and whole replies,
     chat and completions, some hanging up mid-stream: zero 5xx, zero crashes, every SSE event
     valid UTF-8 JSON, then kestrel_kv_blocks_used 0.
KESTREL_HOSTILE_SEED fixes the random mix (printed either way)."""
import os
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_mini  # noqa: E402
from hostile_common import Results, Server, health, log, model_path, scaled, stream, testdata, wait_kv_free  # noqa: E402
from load_gen import run_load  # noqa: E402

COMPL, CHAT = "/v1/completions", "/v1/chat/completions"


def gpt2_byte_symbol(b):
    """The printable character byte-level BPE vocabularies use for byte b (GPT-2's table)."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in printable:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in printable].index(b))


def byte_ids(model, byte_level):
    vocab = next(v for k, _, v in gguf_mini.read(model)[0] if k == "tokenizer.ggml.tokens")[1]
    name = gpt2_byte_symbol if byte_level else (lambda b: f"<0x{b:02X}>")
    return {"lead 0xE2": vocab.index(name(0xE2)), "continuation 0x82": vocab.index(name(0x82))}


def check_stream(res, cat, name, r, want_fffd=False):
    problems = list(r["problems"])
    if r["status"] != 200:
        problems.append(f"status {r['status']}: {r['reply'].body[:200] if r['reply'] else b''!r}")
    elif not r["finish"]:
        problems.append("no finish_reason")
    if want_fffd and r["status"] == 200 and "\ufffd" not in r["text"]:
        problems.append(f"no U+FFFD in the text {r['text']!r}")
    return res.case(cat, name, not problems, "; ".join(problems[:3]))


def after(srv, res, cat, name):
    """A dead or wedged server is a failed case of its own; restart it so the next case still runs."""
    ok, _ = health(srv.host, srv.port, timeout=scaled(2))
    if not ok:
        time.sleep(0.2)  # an abort may still be under way
        res.case(cat, f"server alive after {name}", False, f"{srv.exit_text()}: {srv.stderr_tail(300)!r}")
        srv.kill()
        srv.start()


def finding(srv, res, byte_level):
    cat = "finding"
    if byte_level:
        body = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 30, "temperature": 0.8, "stream": True}
        check_stream(res, cat, "first streamed chat at temperature 0.8", stream(srv.host, srv.port, CHAT, body))
        after(srv, res, cat, "the first streamed chat")
    n_seeds = 8 if byte_level else 24
    for seed in range(1, n_seeds + 1):
        body = {"prompt": "Once upon a time", "max_tokens": 30, "temperature": 1.0, "seed": seed, "stream": True}
        check_stream(res, cat, f"streamed completion, 30 tokens, temperature 1.0, seed {seed}",
                     stream(srv.host, srv.port, COMPL, body))
        after(srv, res, cat, f"seed {seed}")


def forced_bytes(srv, res, ids):
    cat = "forced-bytes"
    for which, tok in ids.items():
        for path in (COMPL, CHAT):
            body = {"max_tokens": 5, "temperature": 1.0, "stream": True, "logit_bias": {str(tok): 100}}
            if path == COMPL:
                body["prompt"] = "Once upon a time"
            else:
                body["messages"] = [{"role": "user", "content": "Hi"}]
            name = f"{path} streams the {which} byte token 5 times"
            check_stream(res, cat, name, stream(srv.host, srv.port, path, body), want_fffd=True)
            after(srv, res, cat, name)


def load(srv, res, n_clients, n_requests, seed):
    cat = "load"
    t0 = time.monotonic()
    stats = run_load(srv.host, srv.port, n_clients, seed, n_requests=n_requests, timeout=90)
    log(f"  load: {stats.line()} in {time.monotonic() - t0:.1f} s")
    alive = srv.alive()
    res.case(cat, f"{n_clients} clients: the server survives", alive, f"{srv.exit_text()}: {srv.stderr_tail(300)!r}")
    res.case(cat, f"{n_clients} clients: no 5xx", not stats.server_errors,
             f"{len(stats.server_errors)} 5xx, e.g. {stats.server_errors[:3]}")
    shown = [f"{d}: {p}" for d, p in stats.problems[:4]]
    res.case(cat, f"{n_clients} clients: every reply complete, valid UTF-8 JSON", not stats.problems,
             f"{len(stats.problems)} problems, e.g. {shown}")
    if alive:
        used = wait_kv_free(srv.host, srv.port, 5)
        res.case(cat, f"{n_clients} clients: kestrel_kv_blocks_used back to 0", used == 0, f"kestrel_kv_blocks_used = {used}")
    else:
        res.case(cat, f"{n_clients} clients: kestrel_kv_blocks_used back to 0", False, "the server is dead")
        srv.start()


def main():
    qwen = model_path("qwen3-f32.gguf")
    seed = int(os.environ.get("KESTREL_HOSTILE_SEED") or time.time())
    log(f"stream-load: seed {seed} (KESTREL_HOSTILE_SEED={seed} repeats this mix)")
    res = Results("stream-load")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kestrel-hostile-") as tmp:
        models = [("qwen3 byte-fallback", qwen, False, 64, 4)]
        vocab = os.path.join(testdata(), "tokenizer", "ggml-vocab-llama-bpe.gguf")
        if os.path.isfile(vocab):
            bpe = gguf_mini.byte_bpe_model(qwen, vocab, os.path.join(tmp, "qwen3-llama3-vocab.gguf"))
            models.append(("qwen3 weights + Llama 3 byte-level BPE", bpe, True, 64, 2))
        else:
            log(f"  (no {vocab}: the byte-level BPE part is skipped)")
        for label, model, byte_level, n_clients, n_requests in models:
            log(f"stream-load: {label}")
            # 64 clients from one address, some reconnecting right after hanging up: above the
            # default per-client connection limit (64) that test_slow_clients checks.
            srv = Server(model, ["--parallel", "8"], ["--max-connections-per-client", "256"], results=res)
            try:
                srv.start()
                for phase, run in (("finding", lambda: finding(srv, res, byte_level)),
                                   ("forced bytes", lambda: forced_bytes(srv, res, byte_ids(model, byte_level))),
                                   ("load", lambda: load(srv, res, n_clients, n_requests, seed))):
                    t1 = time.monotonic()
                    run()
                    log(f"  {phase}: {time.monotonic() - t1:.1f} s")
            finally:
                srv.stop()
    log(f"stream-load: {time.monotonic() - t0:.1f} s")
    return res.summary()


if __name__ == "__main__":
    threading.stack_size(512 * 1024)
    sys.exit(main())
