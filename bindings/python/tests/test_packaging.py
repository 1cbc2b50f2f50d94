"""`pip install --no-build-isolation bindings/python` offline (setuptools only): the installed
package imports, finds the library next to itself, and generates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from ._util import program, stories_path

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def packaging_python() -> str | None:
    """A Python with pip, setuptools and wheel (this one, else the system's), or None."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(exe) and subprocess.run([exe, "-c", "import setuptools, wheel, pip"], stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL).returncode == 0:
            return exe
    return None


class PipInstallTest(unittest.TestCase):
    def test_offline_pip_install_with_bundled_library(self) -> None:
        python = packaging_python()
        if python is None:
            self.skipTest("no Python with pip, setuptools and wheel")
        library = program("KESTREL_LIBRARY")
        model = stories_path()
        with tempfile.TemporaryDirectory() as tmp:
            # A copy of the source (pip builds in place), with the library bundled next to the modules.
            src = os.path.join(tmp, "src")
            shutil.copytree(PKG_ROOT, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
            shutil.copy(library, os.path.join(src, "kestrel", "libkestrel.so"))
            target = os.path.join(tmp, "site")
            r = subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                                "--no-deps", "--quiet", "--target", target, src],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
            self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace"))
            self.assertTrue(os.path.exists(os.path.join(target, "kestrel", "libkestrel.so")))
            env = {k: v for k, v in os.environ.items() if k not in ("KESTREL_LIBRARY", "PYTHONPATH")}
            env["PYTHONPATH"] = target
            code = ("import kestrel, sys\n"
                    "with kestrel.Model(sys.argv[1], n_threads=1) as m:\n"
                    "    print(m.generate('Once upon a time', max_tokens=8, temperature=0))\n")
            r = subprocess.run([python, "-c", code, model], env=env, cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            self.assertTrue(r.stdout.decode().startswith(", there was"), r.stdout)


if __name__ == "__main__":
    unittest.main()
