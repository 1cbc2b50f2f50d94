#!/usr/bin/env python3
"""What the Python binding costs per generated token: greedy decode of N tokens (end-of-text
ignored) through `kestrel bench` (C, one context), Model.generate (the C engine, pieces handed
to Python through a queue) and a Python loop over Context.decode + logits + argmax.

usage: KESTREL_LIBRARY=build/libkestrel.so PYTHONPATH=bindings/python \\
       python3 tools/dev/bench_bindings.py MODEL.gguf [N] [THREADS] [REPS]   (docs/PERF.md)"""
import json
import os
import statistics
import subprocess
import sys
import time

import kestrel

model_path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 128
threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
cli = os.environ.get("KESTREL_CLI", os.path.join(os.path.dirname(__file__), "..", "..", "build", "kestrel"))


def median_rate(fn):
    fn()  # warm-up
    rates = []
    for _ in range(reps):
        t0 = time.perf_counter()
        k = fn()
        rates.append(k / (time.perf_counter() - t0))
    return statistics.median(rates)


bench = subprocess.run([cli, "bench", "-m", model_path, "-p", "0", "-n", str(n), "-t", str(threads), "-r", str(reps),
                        "--json"], capture_output=True, text=True, check=True)
c_rate = next(r["avg_ts"] for r in json.loads(bench.stdout) if r["n_gen"] > 0)

with kestrel.Model(model_path, n_threads=threads, n_parallel=1) as model:
    prompt = model.tokenize("Once upon a time")

    def engine():
        req = model.submit(prompt, max_tokens=n, temperature=0, stop_at_eog=False)
        for _ in req:
            pass
        return len(req.tokens)

    ctx = model.context(n_ctx=len(prompt) + n + 8, n_threads=threads)

    def loop():
        ctx.kv_clear()
        ctx.decode(prompt)
        for _ in range(n):
            row = ctx.logits(-1)
            ctx.decode([max(range(len(row)), key=row.__getitem__)])
        return n

    e_rate = median_rate(engine)
    l_rate = median_rate(loop)

print(f"| {os.path.basename(model_path)} | {threads} | {c_rate:.1f} | {e_rate:.1f} ({e_rate / c_rate:.0%}) "
      f"| {l_rate:.1f} ({l_rate / c_rate:.0%}) |")
