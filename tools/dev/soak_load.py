#!/usr/bin/env python3
"""The soak of issue 18 (run by tools/dev/soak.sh; not in CI): `kestrel serve` under a mixed load
(the hostile suite's load generator: temperatures 0..2, streamed and whole replies, chat and
completions, random hang-ups mid-stream = cancellations) for a given time. Every --sample seconds
it writes the server's RSS (/proc/PID/status VmRSS) and /metrics KV gauges to a CSV. At the end it
stops the load, waits for the KV blocks to come back, sends SIGTERM and prints the drift; it fails
(exit 1) if RSS grew more than --max-rss-growth-mb between the first sample after warm-up and the
last sample under load, if KV blocks stay in use, if any reply was a 5xx or malformed, or if the
server crashed or did not exit 0 (under ASan, a leak report makes the exit code non-zero)."""
import argparse
import csv
import os
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "tests", "hostile"))
from hostile_common import Server, metrics, wait_kv_free  # noqa: E402
from load_gen import run_load  # noqa: E402

FIELDS = ["t_s", "rss_kb", "kv_blocks_used", "kv_blocks_cached", "kv_blocks_free", "requests_total",
          "tokens_generated_total", "http_errors_total"]


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def sample(srv, t0):
    m = metrics(srv.host, srv.port)
    row = {"t_s": round(time.monotonic() - t0, 1), "rss_kb": rss_kb(srv.proc.pid)}
    for k in FIELDS[2:]:
        v = m.get("kestrel_" + k)
        row[k] = None if v is None else int(v)
    return row


def slope_mb_per_h(rows):
    """Least-squares RSS slope over rows (MB per hour); 0 with fewer than two points."""
    pts = [(r["t_s"], r["rss_kb"] / 1024) for r in rows if r["rss_kb"] is not None]
    if len(pts) < 2:
        return 0.0
    n = len(pts)
    mx, my = sum(p[0] for p in pts) / n, sum(p[1] for p in pts) / n
    var = sum((x - mx) ** 2 for x, _ in pts)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in pts) / var * 3600


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--sample", type=float, default=30, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=None, help="seconds before the RSS baseline (default: 10%% of the run, 30..300)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--max-rss-growth-mb", type=float, default=32)
    ap.add_argument("--csv", default="soak.csv")
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    os.environ["KESTREL_CLI"] = a.cli
    warmup = a.warmup if a.warmup is not None else min(300, max(30, a.seconds / 10))
    seed = a.seed if a.seed is not None else int(time.time())
    print(f"soak: {a.seconds:.0f} s, {a.clients} clients, --parallel {a.parallel}, warm-up {warmup:.0f} s, "
          f"sample every {a.sample:.0f} s, seed {seed}, model {a.model}, cli {a.cli}", flush=True)

    srv = Server(a.model, ["--parallel", str(a.parallel)]).start()
    t0 = time.monotonic()
    end = t0 + a.seconds
    box = {}
    load = threading.Thread(target=lambda: box.setdefault("stats", run_load(
        srv.host, srv.port, a.clients, seed, until=end, timeout=120, disconnect_rate=0.25)), daemon=True)
    load.start()
    rows = []
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        next_t = t0
        while time.monotonic() < end and srv.alive():
            if time.monotonic() >= next_t:
                rows.append(sample(srv, t0))
                w.writerow(rows[-1])
                f.flush()
                print("soak: " + " ".join(f"{k}={v}" for k, v in rows[-1].items()), flush=True)
                next_t += a.sample
            time.sleep(0.2)
        load.join(180)
        alive = srv.alive()
        kv_end = wait_kv_free(srv.host, srv.port, 10) if alive else None
        if alive:
            rows.append(sample(srv, t0))
            w.writerow(rows[-1])
    rc = srv.stop(timeout=60)
    stats = box.get("stats")

    under_load = [r for r in rows[:-1] if r["t_s"] >= warmup] if alive else [r for r in rows if r["t_s"] >= warmup]
    failures = []
    if len(under_load) >= 2 and under_load[0]["rss_kb"] and under_load[-1]["rss_kb"]:
        first, last = under_load[0], under_load[-1]
        growth = (last["rss_kb"] - first["rss_kb"]) / 1024
        print(f"soak: RSS after warm-up {first['rss_kb'] / 1024:.1f} MB (t={first['t_s']} s) -> "
              f"{last['rss_kb'] / 1024:.1f} MB (t={last['t_s']} s): drift {growth:+.1f} MB, "
              f"slope {slope_mb_per_h(under_load):+.1f} MB/h")
        if growth > a.max_rss_growth_mb:
            failures.append(f"RSS grew {growth:.1f} MB (limit {a.max_rss_growth_mb} MB)")
    else:
        failures.append(f"fewer than two samples after the {warmup:.0f} s warm-up: run longer or sample more often")
    print(f"soak: KV blocks used at the end: {kv_end if kv_end is None else int(kv_end)}")
    if kv_end != 0:
        failures.append(f"kestrel_kv_blocks_used = {kv_end} after the load")
    if stats:
        print(f"soak: load: {stats.line()}")
        if stats.server_errors:
            failures.append(f"{len(stats.server_errors)} 5xx replies, e.g. {stats.server_errors[:3]}")
        if stats.problems:
            failures.append(f"{len(stats.problems)} malformed replies, e.g. {stats.problems[:3]}")
    else:
        failures.append("the load generator did not finish")
    if not alive:
        failures.append(f"the server died: {srv.exit_text()}: {srv.stderr_tail(800)}")
    elif rc != 0:
        failures.append(f"the server exited with {rc} after SIGTERM: {srv.stderr_tail(2000)}")
    print(f"soak: samples in {a.csv}")
    for msg in failures:
        print(f"soak: FAIL: {msg}")
    print("soak: " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
