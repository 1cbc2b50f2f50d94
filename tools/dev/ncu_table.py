#!/usr/bin/env python3
"""Nsight Compute's text report (ncu --section SpeedOfLight --section Occupancy ...) as a table:
one row per kernel and grid, in first-launch order, with the launches' count and their mean
duration, DRAM throughput and achieved occupancy. gpu_suite.sh's ncu step prints it.

    python3 tools/dev/ncu_table.py NCU_OUTPUT.txt
"""
import re
import sys

HEADER = re.compile(r"^  (\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Context", re.M)


def metric(block, name):
    m = re.search(r"^\s+" + re.escape(name) + r"\s+\S+\s+([\d.,]+)\s*$", block, re.M)
    return float(m.group(1).replace(",", "")) if m else None


def main(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    heads = list(HEADER.finditer(text))
    rows = {}
    for i, h in enumerate(heads):
        block = text[h.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)]
        # "void unnamed>::gemv_q8_kernel<2, 1, 4>(TensorArg, ...)" (as ncu prints an anonymous
        # namespace) -> "gemv_q8_kernel<2, 1, 4>"
        name = re.sub(r"^(void )?(\S*?unnamed>::|\S*?\(anonymous namespace\)::)?", "", h.group(1)).split("(")[0]
        key = (name, f"{h.group(2)}x{h.group(3)}x{h.group(4)}", h.group(5))
        r = rows.setdefault(key, {"n": 0, "us": 0.0, "dram": 0.0, "occ": 0.0})
        r["n"] += 1
        # ncu reports durations in us, or ms / ns for long and short kernels.
        us = metric(block, "Duration")
        unit = re.search(r"^\s+Duration\s+(\S+)", block, re.M)
        if us is not None and unit:
            us *= {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit.group(1), 1.0)
        r["us"] += us or 0.0
        r["dram"] += metric(block, "DRAM Throughput") or 0.0
        r["occ"] += metric(block, "Achieved Occupancy") or 0.0
    if not rows:
        print(f"ncu_table: no kernels in {path}")
        return 1
    print("| kernel | grid | block | launches | mean µs | DRAM % | occupancy % |")
    print("|---|---|---:|---:|---:|---:|---:|")
    total = 0.0
    for (name, grid, block), r in rows.items():
        n = r["n"]
        total += r["us"]
        print(f"| {name} | {grid} | {block} | {n} | {r['us'] / n:.2f} | {r['dram'] / n:.1f} | {r['occ'] / n:.1f} |")
    print(f"\n{sum(r['n'] for r in rows.values())} launches, {total:.1f} µs of kernel time")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
