"""Finding the library, freeing everything (no leak over many loads), cleanup at exit."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import unittest
from unittest import mock

import kestrel
from kestrel import _handles

from ._util import stories_path

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise unittest.SkipTest("no VmRSS in /proc/self/status")


def run_python(code: str, env_update: dict[str, str], cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(env_update)
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=60)


class LeakTest(unittest.TestCase):
    def cycle(self, i: int) -> None:
        with kestrel.Model(stories_path(), n_threads=1) as m:
            m.tokenize("Once upon a time")
            with m.context(n_ctx=32, n_threads=1) as ctx:
                ctx.decode(m.tokenize("Hello"))
            if i % 10 == 0:  # the engine (a worker thread) too, and an abandoned stream
                m.generate("Hi", max_tokens=4, temperature=0)
                next(m.stream("Hi", max_tokens=50, temperature=0))
            m.detokenizer()  # never closed: freed with the model

    def test_no_leak_over_200_load_free_cycles(self) -> None:
        for i in range(30):
            self.cycle(i)
        gc.collect()
        before = rss_kib()
        for i in range(200):
            self.cycle(i)
        gc.collect()
        growth = rss_kib() - before
        self.assertLess(growth, 8 * 1024, f"RSS grew by {growth} KiB over 200 load/free cycles")

    def test_unclosed_objects_are_freed_at_exit(self) -> None:
        code = f"""
            import kestrel
            m = kestrel.Model({stories_path()!r}, n_threads=1)
            ctx = m.context(n_ctx=32)
            gen = m.stream("Once", max_tokens=100000, stop_at_eog=False)
            print(next(gen) is not None)
            keep = (m, ctx, gen)   # never closed: cleaned up at interpreter exit
        """
        r = run_python(code, {})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "True")


class LibraryLookupTest(unittest.TestCase):
    def test_loaded_from_kestrel_library(self) -> None:
        if os.environ.get("KESTREL_LIBRARY"):
            self.assertEqual(os.path.realpath(kestrel.library_path()), os.path.realpath(os.environ["KESTREL_LIBRARY"]))

    def test_bad_kestrel_library_is_a_clear_error(self) -> None:
        r = run_python("""
            import kestrel
            try:
                kestrel.Model("x.gguf")
            except kestrel.LibraryNotFoundError as e:
                print("ERR", e)
        """, {"KESTREL_LIBRARY": "/nonexistent/libkestrel.so"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ERR KESTREL_LIBRARY='/nonexistent/libkestrel.so'", r.stdout)

    def test_found_without_kestrel_library(self) -> None:
        lib = os.environ.get("KESTREL_LIBRARY")
        if not lib:
            self.skipTest("KESTREL_LIBRARY is not set")
        env = {"KESTREL_LIBRARY": "", "LD_LIBRARY_PATH": os.path.dirname(lib)}
        r = run_python("import kestrel; print(kestrel.api_version(), kestrel.library_path())", env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(f"{kestrel.API_VERSION} "), r.stdout)


if __name__ == "__main__":
    unittest.main()


class FreeOrderTest(unittest.TestCase):
    """A dependent closed by its own thread while the model closes is freed before the model."""

    def test_model_waits_for_a_child_freed_by_another_thread(self) -> None:
        order: list[str] = []
        child_free_started = threading.Event()
        finish_child_free = threading.Event()

        class FakeLib:
            def kestrel_context_free(self, ptr: int) -> None:
                child_free_started.set()
                finish_child_free.wait(10)
                order.append("context")

            def kestrel_model_free(self, ptr: int) -> None:
                order.append("model")

        with mock.patch.object(_handles, "lib", lambda: FakeLib()):
            model = _handles.ModelHandles(1)
            child = _handles.Owned(2, "kestrel_context_free", "context")
            model.adopt(child)
            closer = threading.Thread(target=model.disown, args=(child,))  # Context.close()
            closer.start()
            self.assertTrue(child_free_started.wait(10))
            releaser = threading.Thread(target=model.release)  # Model.close() meanwhile
            releaser.start()
            releaser.join(0.2)
            self.assertTrue(releaser.is_alive(), "the model was freed while its context was being freed")
            finish_child_free.set()
            closer.join(10)
            releaser.join(10)
        self.assertEqual(order, ["context", "model"])
