#!/usr/bin/env python3
"""kestrel bench against llama.cpp's llama-bench (and ik_llama.cpp's, run with -rtr 1) on the same
files, interleaved round by round, on this machine (docs/PERF.md, "Against llama.cpp and
ik_llama.cpp"). A shared machine's speed drifts by tens of percent within minutes, so only rounds
taken in the same minutes compare: every round runs each engine once on each file (all of a
file's tests in one process), in an order that rotates from round to round, and a row reports
each engine's rounds and the ratios of their medians.

  tools/dev/compare_llamacpp.py --llama-bench PATH [--ik-bench PATH] [--kestrel build/kestrel]
      [--rounds 3] [--reps 1] [-t THREADS] [-p 512,2048] [-n 32] [-d 0] FILE.gguf [FILE.gguf ...]

-d takes depths for the generation tests (llama-bench's -d; ik_llama.cpp's -gp DEPTH,N): with
depths other than 0 the prompt tests are left out (a depth row is slow; give it its own run).
Build llama.cpp and ik_llama.cpp outside this repository, CPU-only, with their own native flags
(GGML_NATIVE=ON); the commands are in docs/PERF.md. KESTREL_NO_AVX512=1 in the environment
measures Kestrel's AVX2 path (the other engines ignore it: build them with GGML_NATIVE=OFF
-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON for theirs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def label(n_prompt, n_gen, depth):
    if n_gen == 0:
        return "pp%d" % n_prompt
    return "tg%d" % n_gen + ("@d%d" % depth if depth else "")


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def isa():
    """The instruction set kestrel's kernels use here: AVX-512 (with VNNI, as they need) unless
    KESTREL_NO_AVX512=1 (the other engines' builds say their own)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return ""
    if " avx512_vnni" in flags and os.environ.get("KESTREL_NO_AVX512", "") in ("", "0"):
        return "AVX-512"
    return "AVX2" if " avx2" in flags else "no AVX2"


def counts(v):
    return ",".join(map(str, v or [0]))


class Engine:
    """llama-bench's command line; kestrel bench takes the same flags but for a subcommand, its JSON
    switch and its depth's name."""
    sub, json_flag, depth_flag = [], ["-o", "json"], "-d"

    def __init__(self, name, path, extra=()):
        self.name, self.path, self.extra = name, path, list(extra)
        self.build = ""

    def command(self, model, a, prompts, gens, depths):
        return [self.path, *self.sub, "-m", model, "-t", str(a.threads), "-r", str(a.reps), *self.json_flag,
                "-p", counts(prompts), "-n", counts(gens), self.depth_flag, counts(depths)] + self.extra

    def run(self, model, a, prompts, gens, depths):
        cmd = self.command(model, a, prompts, gens, depths)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("%s failed (rc %d): %s\n%s" % (self.name, r.returncode, " ".join(cmd), r.stderr[-2000:]))
        rows = json.loads(r.stdout[r.stdout.index("["):])
        if rows and not self.build:
            self.build = " ".join(str(rows[0].get(k, "")) for k in ("build_commit", "build_number")).strip()
        return {self.label(row): row["avg_ts"] for row in rows}

    def label(self, row):
        return label(row["n_prompt"], row["n_gen"], row.get("n_depth", 0))


class Kestrel(Engine):
    sub, json_flag, depth_flag = ["bench"], ["--json"], "--n-depth"


class IkBench(Engine):
    """ik_llama.cpp's llama-bench has no -d: generation after a prompt is -gp PROMPT,GEN (it
    times the generation only), labelled tgN@ppD."""

    def command(self, model, a, prompts, gens, depths):
        cmd = [self.path, "-m", model, "-t", str(a.threads), "-r", str(a.reps), "-o", "json", "-rtr", "1",
               "-p", counts(prompts)]
        if depths == [0]:
            cmd += ["-n", counts(gens)]
        else:
            cmd += ["-n", "0"]
            for d in depths:
                for g in gens:
                    cmd += ["-gp", "%d,%d" % (d, g)]
        return cmd + self.extra

    def label(self, row):
        t = row.get("test", "")
        if "@pp" in t:  # tgN@ppD
            g, d = t[2:].split("@pp")
            return label(0, int(g), int(d))
        return label(row["n_prompt"], row["n_gen"], 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--kestrel", default=os.path.join(ROOT, "build", "kestrel"))
    ap.add_argument("--llama-bench", required=True, help="llama.cpp's llama-bench")
    ap.add_argument("--ik-bench", help="ik_llama.cpp's llama-bench (run with -rtr 1)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=1, help="repetitions inside each process (-r)")
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("-p", default="512,2048", help="prompt lengths (0: none)")
    ap.add_argument("-n", default="32", help="generation lengths (0: none)")
    ap.add_argument("-d", default="0", help="depths of the generation tests")
    ap.add_argument("--kestrel-args", default="", help="extra arguments to kestrel bench")
    a = ap.parse_args()

    nums = lambda s: [int(v) for v in s.split(",") if v.strip() and int(v) > 0]
    depths = [int(v) for v in a.d.split(",")]
    prompts, gens = nums(a.p), nums(a.n)
    if depths != [0]:
        prompts = []  # see the docstring
        if not gens:
            sys.exit("-d needs generation tests (-n)")
    engines = [Kestrel("kestrel", a.kestrel, a.kestrel_args.split()), Engine("llama.cpp", a.llama_bench)]
    git = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    engines[0].build = git.stdout.strip()
    if a.ik_bench:
        engines.append(IkBench("ik_llama.cpp", a.ik_bench))
    for e in engines:
        if not os.access(e.path, os.X_OK):
            sys.exit("not an executable: %s" % e.path)

    print("CPU: %s (%s), %d threads; %d rounds, -r %d each" % (cpu_model(), isa(), a.threads, a.rounds, a.reps))
    # results[file][engine][test] = [avg_ts per round]
    results = {f: {e.name: {} for e in engines} for f in a.files}
    for r in range(a.rounds):
        for fi, f in enumerate(a.files):
            k = (r + fi) % len(engines)
            for e in engines[k:] + engines[:k]:  # rotated: no engine always runs first
                for test, ts in e.run(f, a, prompts, gens, depths).items():
                    results[f][e.name].setdefault(test, []).append(ts)
                print("round %d: %s, %s done" % (r + 1, os.path.basename(f), e.name), file=sys.stderr, flush=True)

    names = [e.name for e in engines]
    head = "| file | test | " + " | ".join("%s rounds" % n for n in names) + " | " + " | ".join(
        "kestrel / %s" % n for n in names[1:]) + " |"
    print(head)
    print("|" + "---|" * (2 + len(names)) + "---:|" * (len(names) - 1))
    for f in a.files:
        tests = list(results[f]["kestrel"])
        for t in tests:
            cells = [os.path.basename(f), t]
            med = {}
            for n in names:
                v = results[f][n].get(t, [])
                cells.append(" / ".join("%.1f" % x for x in v) if v else "-")
                med[n] = statistics.median(v) if v else 0
            for n in names[1:]:
                cells.append("**%.2fx**" % (med["kestrel"] / med[n]) if med[n] > 0 else "-")
            print("| " + " | ".join(cells) + " |", flush=True)
    print("builds: " + "; ".join("%s %s" % (e.name, e.build or "?") for e in engines))


if __name__ == "__main__":
    main()
