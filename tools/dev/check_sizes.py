#!/usr/bin/env python3
"""Line budget of DESIGN.md: model files <= 300 lines, kestrel.h <= 400, other sources <= 800
(tests <= 1500). Exits non-zero naming every file over its budget."""
import pathlib
import subprocess
import sys

root = pathlib.Path(__file__).resolve().parents[2]
files = subprocess.run(["git", "ls-files", "*.c", "*.cc", "*.cpp", "*.h", "*.hpp", "*.cu", "*.cuh", "*.py", "*.rs"],
                       cwd=root, capture_output=True, text=True).stdout.split()
over = []
for f in files:
    p = root / f
    if not p.is_file():
        continue
    n = sum(1 for _ in p.open(encoding="utf-8", errors="replace"))
    limit = 800
    if f.startswith("models/"):
        limit = 300
    elif f == "runtime/include/kestrel.h":
        limit = 400
    elif f.startswith("tests/") or "/tests/" in f:
        limit = 1500
    if n > limit:
        over.append(f"{f}: {n} lines (budget {limit})")
if over:
    print("files over the line budget:\n  " + "\n  ".join(over))
    sys.exit(1)
print(f"check_sizes: {len(files)} files within budget")
