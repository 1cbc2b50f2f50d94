"""The README's Python example, run exactly as printed from the folder holding the model."""

from __future__ import annotations

import os
import subprocess
import sys
import unittest

from ._util import require, testdata

MARKER = "<!-- example: python (run by the tests) -->"
PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_example(text: str) -> str:
    """The fenced python block right after the marker line."""
    lines = text.split("\n")
    start = lines.index(MARKER) + 1
    if lines[start].strip() != "```python":
        raise AssertionError(f"the line after {MARKER!r} is not ```python")
    end = lines.index("```", start + 1)
    return "\n".join(lines[start + 1 : end]) + "\n"


class ReadmeTest(unittest.TestCase):
    def test_python_example_runs_as_printed(self) -> None:
        readme = require(os.environ.get("KESTREL_README") or "", "KESTREL_README")
        with open(readme, encoding="utf-8") as f:
            code = readme_example(f.read())
        self.assertIn("import kestrel", code)
        models = os.path.dirname(testdata("models", "stories260K-f32.gguf"))
        env = dict(os.environ)
        env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        r = subprocess.run([sys.executable, "-c", code], cwd=models, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        out = r.stdout.decode("utf-8")
        self.assertTrue(out.strip(), "the example printed nothing")
        self.assertTrue(out.startswith(", there was"), out)  # the greedy continuation comes first


if __name__ == "__main__":
    unittest.main()
