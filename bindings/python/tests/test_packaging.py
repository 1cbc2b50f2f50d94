"""Packaging: the package's own build backend (_kestrel_build.py, standard library only) makes a
valid wheel carrying the library it finds (in the documented order); `pip install` of the source
offline, with build isolation and nothing to install, gives a package that loads its own copy.
(tests/install/python_venv.sh runs the README's install in fresh venvs.)"""

from __future__ import annotations

import base64
import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from typing import Optional

from ._util import program, stories_path

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def backend():  # type: ignore[no-untyped-def]
    sys.path.insert(0, PKG_ROOT)
    try:
        return importlib.import_module("_kestrel_build")
    finally:
        sys.path.remove(PKG_ROOT)


def pip_python() -> Optional[str]:
    """A Python with pip (this one, else the system's), or None."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(exe) and subprocess.run([exe, "-m", "pip", "--version"], stdout=subprocess.DEVNULL,
                                                  stderr=subprocess.DEVNULL).returncode == 0:
            return exe
    return None


def clean_pip_env() -> dict[str, str]:
    """This environment without pip's or Python's settings, pip's index off."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k not in ("KESTREL_LIBRARY", "PYTHONPATH")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


class BackendTest(unittest.TestCase):
    def test_library_search_order(self) -> None:
        b = backend()
        with tempfile.TemporaryDirectory() as tmp:
            here = os.path.join(tmp, "repo", "bindings", "python")
            os.makedirs(os.path.join(here, "kestrel"))
            os.makedirs(os.path.join(tmp, "repo", "build"))
            os.makedirs(os.path.join(tmp, "prefix", "lib"))
            explicit = os.path.join(tmp, "explicit.so")
            bundled = os.path.join(here, "kestrel", b.LIB_NAME)
            build = os.path.join(tmp, "repo", "build", b.LIB_NAME)
            installed = os.path.join(tmp, "prefix", "lib", b.LIB_NAME)
            for f in (explicit, bundled, build, installed):
                open(f, "wb").close()
            saved = b.HERE, b._pkg_config_libdir
            b.HERE, b._pkg_config_libdir = here, lambda: os.path.join(tmp, "prefix", "lib")
            try:
                self.assertEqual(b.find_library({}, {"KESTREL_LIBRARY": explicit}), (explicit, "KESTREL_LIBRARY"))
                self.assertEqual(b.find_library({"library": explicit}, {})[0], explicit)
                self.assertIsNone(b.find_library({}, {"KESTREL_LIBRARY": "system"})[0])
                with self.assertRaises(b.LibraryNotFound):
                    b.find_library({}, {"KESTREL_LIBRARY": os.path.join(tmp, "nope.so")})
                for expected in (bundled, build, installed):
                    self.assertEqual(b.find_library({}, {})[0], os.path.realpath(expected))
                    os.remove(expected)
                with self.assertRaises(b.LibraryNotFound) as e:
                    b.find_library({}, {})
                self.assertIn("KESTREL_LIBRARY", str(e.exception))
            finally:
                b.HERE, b._pkg_config_libdir = saved

    def test_project_table_read_without_tomllib(self) -> None:
        b = backend()
        with open(os.path.join(PKG_ROOT, "pyproject.toml"), encoding="utf-8") as f:
            fallback = b._read_project(f.read())
        self.assertEqual(fallback["name"], "kestrel")
        import kestrel

        self.assertEqual(fallback["version"], kestrel.__version__)
        try:
            import tomllib  # type: ignore[import-not-found]
        except ImportError:
            return
        with open(os.path.join(PKG_ROOT, "pyproject.toml"), "rb") as f:
            self.assertEqual(fallback, tomllib.load(f)["project"])

    def test_wheel_is_valid(self) -> None:
        b = backend()
        library = program("KESTREL_LIBRARY")
        with tempfile.TemporaryDirectory() as tmp:
            saved = os.environ.get("KESTREL_LIBRARY")
            try:
                os.environ["KESTREL_LIBRARY"] = "system"
                pure = b.build_wheel(tmp)
                os.environ["KESTREL_LIBRARY"] = library
                binary = b.build_wheel(tmp)
            finally:
                os.environ["KESTREL_LIBRARY"] = saved or ""
                if saved is None:
                    del os.environ["KESTREL_LIBRARY"]
            self.assertTrue(pure.endswith("-py3-none-any.whl"), pure)
            self.assertRegex(binary, r"^kestrel-0\.1\.0-py3-none-linux_[a-z0-9_]+\.whl$")
            for name, has_lib in ((pure, False), (binary, True)):
                with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                    names = z.namelist()
                    self.assertEqual("kestrel/libkestrel.so" in names, has_lib)
                    self.assertIn("kestrel/completions.py", names)
                    self.assertIn("kestrel/_build_info.py", names)
                    self.assertFalse([n for n in names if "tests" in n or n.endswith(".pyc")], names)
                    record = z.read("kestrel-0.1.0.dist-info/RECORD").decode().splitlines()
                    self.assertEqual(sorted(r.split(",")[0] for r in record), sorted(names))
                    for row in record:
                        path, digest, size = row.split(",")
                        if path.endswith("RECORD"):
                            continue
                        data = z.read(path)
                        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                        self.assertEqual((digest, int(size)), (f"sha256={want}", len(data)), path)
                    meta = z.read("kestrel-0.1.0.dist-info/METADATA").decode()
                    self.assertIn("Name: kestrel\nVersion: 0.1.0\n", meta)
                    self.assertIn("Root-Is-Purelib: " + ("false" if has_lib else "true"),
                                  z.read("kestrel-0.1.0.dist-info/WHEEL").decode())
            sdist = b.build_sdist(tmp)
            self.assertEqual(sdist, "kestrel-0.1.0.tar.gz")


class PipInstallTest(unittest.TestCase):
    def test_offline_pip_install_bundles_the_library(self) -> None:
        python = pip_python()
        if python is None:
            self.skipTest("no Python with pip")
        library = program("KESTREL_LIBRARY")
        model = stories_path()
        with tempfile.TemporaryDirectory() as tmp:
            # A copy of the source without the tests; the library comes from KESTREL_LIBRARY.
            src = os.path.join(tmp, "src")
            shutil.copytree(PKG_ROOT, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__",
                                                                         "libkestrel.so"))
            target = os.path.join(tmp, "site")
            env = clean_pip_env()
            env["KESTREL_LIBRARY"] = library
            r = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--quiet", "--target", target, src],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
            self.assertEqual(r.returncode, 0, r.stdout.decode(errors="replace"))
            with open(os.path.join(target, "kestrel", "libkestrel.so"), "rb") as a, open(library, "rb") as b:
                self.assertEqual(a.read(), b.read())
            env = clean_pip_env()
            env["PYTHONPATH"] = target
            code = ("import kestrel, sys\n"
                    "with kestrel.Model(sys.argv[1], n_threads=1) as m:\n"
                    "    print(m.generate('Once upon a time', max_tokens=8, temperature=0))\n"
                    "    print(kestrel.library_path())\n"
                    "    print(kestrel._build_info.LIBRARY_SOURCE)\n")
            r = subprocess.run([python, "-c", code, model], env=env, cwd=tmp, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
            text, loaded, origin = r.stdout.decode().splitlines()
            self.assertTrue(text.startswith(", there was"), text)
            self.assertEqual(loaded, os.path.join(target, "kestrel", "libkestrel.so"))
            self.assertEqual(origin, os.path.abspath(library))


if __name__ == "__main__":
    unittest.main()
