#!/usr/bin/env python3
"""kestrel perf's predictions against kestrel bench's measurements on this machine (docs/PERF.md,
"The performance model"). A shared machine's bandwidth drifts by tens of percent from one minute
to the next, so every round of a row calibrates, predicts and measures within a minute or two, and
a row reports the medians of its rounds. Synthetic models are written to DIR once and reused.

  tools/dev/perf_validate.py [--build build] [--dir /tmp] [--rounds 3] [--threads N]
                             [--only decode|depth|batch]
                             [--calibrate model|row|memory|refresh|once|none]

A whole calibration takes minutes. --calibrate model (the default) calibrates whole where this
build has no saved profile yet, and measures again what the row's model reads (`kestrel bench --calibrate -m MODEL`: its weight
types' streams and prefill rates, attention's rates, the elementwise ops; under a minute) before
every round of every row: the cores drift as well as the memory. memory does the same for
memory's part only (`kestrel bench --calibrate-memory -m MODEL`, 15-60 s); refresh does that
with the profile saved last (no calibration at the start); row calibrates whole before every
round of every row; once calibrates at the start only; none uses the profile saved last:
quicker, but the rows then see the machine's drift since.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--only", choices=["decode", "depth", "batch"])
    ap.add_argument("--depths", default="4096,16384", help="context depths of the depth rows")
    ap.add_argument("--models", help="only these files' rows (comma-separated base names)")
    ap.add_argument("--calibrate", choices=["model", "row", "memory", "refresh", "once", "none"], default="model",
                    help="once, then the row's model's part before every round (default); whole before every "
                         "round of every row; once, then the model's memory part before every round; only that "
                         "memory part; once; or not at all")
    a = ap.parse_args()
    k = os.path.join(a.build, "kestrel")
    t = str(a.threads)

    def run(*args):
        return subprocess.run([k, *map(str, args)], check=True, capture_output=True, text=True).stdout

    def synth(name, *args):
        path = os.path.join(a.dir, name)
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            subprocess.run([k, "synth", *args, "-o", path], check=True, stdout=sys.stderr)
        return path

    def err(p, m):
        return "%+.0f%%" % (100 * (p - m) / m) if m > 0 else ""

    calibrated = []

    def calibrate(model):
        if a.calibrate == "model":  # what this row's model reads, memory and cores
            if subprocess.run([k, "bench", "--calibrate", "-m", model], capture_output=True).returncode != 0:
                run("bench", "--calibrate", "-t", t)  # no profile this build measured yet: a whole one
        elif a.calibrate == "row" or (a.calibrate in ("once", "memory") and not calibrated):
            run("bench", "--calibrate", "-t", t)
            calibrated.append(True)
        elif a.calibrate in ("memory", "refresh"):
            run("bench", "--calibrate-memory", "-m", model)  # the streams this row's model reads

    def predict(model, ctx, batches=None):
        args = ["perf", "-m", model, "--hw", "local", "-t", t, "--ctx", ctx, "-p", 512, "--json"]
        if batches:
            args += ["--batches", ",".join(map(str, batches))]
        return json.loads(run(*args))

    l1b = {q: synth("l1b-%s.gguf" % q, "llama-3.2-1b", "--type", q) for q in ("q4_0", "q8_0", "q4_K")}
    q06 = synth("q06-q8_0.gguf", "qwen3-0.6b", "--type", "q8_0")
    q30 = synth("q30l4-q4_K.gguf", "qwen3-30b-a3b", "--type", "q4_K", "--layers", "4")
    oss = synth("oss20l4-mxfp4.gguf", "gpt-oss-20b", "--type", "mxfp4", "--layers", "4")

    # Decode (tg32) and prefill (pp512) at a context depth: rounds of calibrate, predict, measure.
    def chosen(model):
        return not a.models or os.path.basename(model) in a.models.split(",")

    def row(model, depth):
        if not chosen(model):
            return
        pp_p, pp_m, tg_p, tg_m = [], [], [], []
        for _ in range(a.rounds):
            calibrate(model)
            p = predict(model, depth + 16)
            bench = json.loads(run("bench", "-m", model, "-t", t, "-p", 512 if depth == 0 else 0, "-n", 32,
                                   "-r", 2, "--n-depth", depth, "--json"))
            for r in bench:
                if r["n_prompt"] == 512 and r["n_gen"] == 0:
                    pp_p.append(p["prefill_tok_s"]), pp_m.append(r["avg_ts"])
                if r["n_gen"] == 32:
                    tg_p.append(p["decode_tok_s"]), tg_m.append(r["avg_ts"])
        med = lambda v: statistics.median(v) if v else 0
        cells = [os.path.basename(model), depth]
        if pp_m:
            cells += ["%.1f" % med(pp_p), "%.1f" % med(pp_m), err(med(pp_p), med(pp_m))]
        else:
            cells += ["", "", ""]
        cells += ["%.1f" % med(tg_p), "%.1f" % med(tg_m), err(med(tg_p), med(tg_m))]
        print("| " + " | ".join(map(str, cells)) + " |  rounds: pp %s / %s, tg %s / %s" % (
            ["%.1f" % v for v in pp_p], ["%.1f" % v for v in pp_m], ["%.1f" % v for v in tg_p],
            ["%.1f" % v for v in tg_m]), flush=True)

    # Batched decode through the engine: N concurrent requests of 32 prompt tokens generating 32
    # each (contexts 32..64, predicted at 48).
    def batch_rows(model, batches):
        if not chosen(model):
            return
        pred, meas = {b: [] for b in batches}, {b: [] for b in batches}
        for _ in range(a.rounds):
            calibrate(model)
            p = predict(model, 48, batches)
            for d in p["decode_by_batch"]:
                pred[int(d["batch"])].append(d["tok_s"])
            bench = json.loads(run("bench", "-m", model, "-t", t, "-p", 0, "-n", 32, "-r", 1, "--json",
                                   "--parallel", ",".join(map(str, batches))))
            for r in bench:
                if r.get("test") == "parallel":
                    meas[r["n_parallel"]].append(r["avg_ts"])
        for b in batches:
            pm, mm = statistics.median(pred[b]), statistics.median(meas[b])
            print("| %s | %d | %.1f | %.1f | %s |" % (os.path.basename(model), b, pm, mm, err(pm, mm)), flush=True)

    if a.only in (None, "decode"):
        print("| model | context | pp512 predicted | measured | error | tg32 predicted | measured | error |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for m in (l1b["q4_0"], l1b["q8_0"], l1b["q4_K"], q06, q30, oss):
            row(m, 0)
    if a.only in (None, "depth"):
        print("| model | context | pp512 predicted | measured | error | tg32 predicted | measured | error |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for d in map(int, a.depths.split(",")):
            for m in (l1b["q4_0"], l1b["q8_0"], l1b["q4_K"], q06, q30, oss):
                row(m, d)
    if a.only in (None, "batch"):
        print("| model | concurrent requests | tok/s predicted | measured | error |")
        print("|---|---:|---:|---:|---:|")
        batch_rows(l1b["q4_0"], [1, 2, 4, 8, 16, 32])
        batch_rows(q30, [1, 4, 16, 32])


if __name__ == "__main__":
    main()
