"""Shared helpers of the binding tests: test data, programs from the build, the stories model."""

from __future__ import annotations

import functools
import os
import unittest
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))


def testdata_root() -> str:
    """KESTREL_TESTDATA, else the build's default, else ../shared/testdata next to the source."""
    for var in ("KESTREL_TESTDATA", "KESTREL_TESTDATA_DEFAULT"):
        if os.environ.get(var):
            return os.environ[var]
    return os.path.normpath(os.path.join(SOURCE_ROOT, "..", "shared", "testdata"))


def require(path: str, what: str = "test data") -> str:
    """``path`` if it exists; else skips the test, or fails it under KESTREL_REQUIRE_TESTDATA=1."""
    if os.path.exists(path):
        return path
    message = f"missing {what}: {path}"
    if os.environ.get("KESTREL_REQUIRE_TESTDATA") == "1":
        raise AssertionError(message + " (KESTREL_REQUIRE_TESTDATA=1)")
    raise unittest.SkipTest(message)


def testdata(*parts: str) -> str:
    """A file under the test data folder (see ``require``)."""
    return require(os.path.join(testdata_root(), *parts))


def program(var: str) -> str:
    """The path in environment variable ``var`` (set by CMake); skips the test when unset."""
    path = os.environ.get(var)
    if not path:
        raise unittest.SkipTest(f"{var} is not set (run the tests through ctest)")
    return require(path, var)


def stories_path() -> str:
    return testdata("models", "stories260K-f32.gguf")


@functools.lru_cache(maxsize=None)
def shared_stories() -> "object":
    """One stories260K model shared by the tests of a process (a tiny model: one thread)."""
    import kestrel

    return kestrel.Model(stories_path(), n_threads=1)


def cli_output(model: str, prompt: str, n: int, extra: Optional[list[str]] = None) -> str:
    """What ``kestrel run -m MODEL -p PROMPT -n N --temp 0`` prints on stdout."""
    import subprocess

    cmd = [program("KESTREL_CLI"), "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1"]
    out = subprocess.run(cmd + (extra or []), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, check=True)
    return out.stdout.decode("utf-8", errors="replace")
