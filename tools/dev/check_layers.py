#!/usr/bin/env python3
"""Dependencies point one way (DESIGN.md): backends/ use runtime/'s core; runtime/ and models/
include nothing under backends/ but the interface, backends/backend.h. Exits non-zero naming every
include that breaks it. Run by ctest (check_layers) and .ci/run."""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parents[2]
include = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
allowed_from_runtime = {"backends/backend.h"}
bad = []
for top in ("runtime", "models"):
    for p in sorted((root / top).rglob("*")):
        if p.suffix not in (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".def", ".inc"):
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = include.match(line)
            if m and m.group(1).startswith("backends/") and m.group(1) not in allowed_from_runtime:
                bad.append(f"{p.relative_to(root)}:{n}: includes {m.group(1)}")
if bad:
    print("runtime/ and models/ may include only backends/backend.h from backends/:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("check_layers: runtime/ and models/ include only backends/backend.h from backends/")
