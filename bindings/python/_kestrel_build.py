"""The package's own build backend (PEP 517), standard library only.

``pip install bindings/python`` works in a fresh ``python3 -m venv`` with no network: the build
needs nothing installed (``requires = []``: no setuptools, no ``wheel``), so pip's isolated build
environment stays empty and Debian 12's pip 23.0.1 builds the wheel offline.

The wheel carries the ``libkestrel.so`` it was built with (``kestrel/libkestrel.so``, found first
at run time after ``KESTREL_LIBRARY``), taken from, in order:

1. ``KESTREL_LIBRARY`` (environment) or ``--config-settings library=PATH``: that file; the value
   ``system`` bundles nothing (the library is then looked up on the loader's path at run time);
2. ``kestrel/libkestrel.so`` already in this folder (copied there by hand);
3. ``../../build/libkestrel.so``: the repository's default CMake build folder (``make``);
4. ``pkg-config --variable=libdir kestrel``: an installed Kestrel (``cmake --install``).

Nothing found is an error that says so. ``kestrel/_build_info.py`` in the wheel records where the
bundled library came from.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from typing import Any, Mapping, Optional

HERE = os.path.dirname(os.path.realpath(__file__))
PACKAGE = "kestrel"
LIB_NAME = "libkestrel.dylib" if sys.platform == "darwin" else "libkestrel.so"


# ---- project metadata (pyproject.toml's [project] table) ---------------------------------------
def project() -> dict[str, Any]:
    """[project] of pyproject.toml: tomllib (Python 3.11+), else a reader for this file's subset
    (``key = "string"`` and lists of strings)."""
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib  # type: ignore[import-not-found]

        return dict(tomllib.loads(raw.decode("utf-8"))["project"])
    except ImportError:
        return _read_project(raw.decode("utf-8"))


def _read_project(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    section = ""
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        if line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[] ")
            continue
        if section != "project" or "=" not in line:
            continue
        key, value = (s.strip() for s in line.split("=", 1))
        if value.startswith("["):
            while not value.rstrip().endswith("]"):
                value += " " + next(lines).strip()
            out[key] = re.findall(r'"([^"]*)"', value)
        elif value.startswith('"'):
            out[key] = value.strip('"')
        elif value.startswith("{"):
            out[key] = dict(re.findall(r'(\w+)\s*=\s*"([^"]*)"', value))
    return out


def _metadata() -> str:
    p = project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p.get("description"):
        lines.append(f"Summary: {p['description']}")
    if p.get("requires-python"):
        lines.append(f"Requires-Python: {p['requires-python']}")
    lic = p.get("license")
    if isinstance(lic, Mapping) and lic.get("text"):
        lines.append(f"License: {lic['text']}")
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    body = ""
    readme = p.get("readme")
    if isinstance(readme, str) and os.path.exists(os.path.join(HERE, readme)):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(HERE, readme), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _dist_name() -> str:
    p = project()
    return f"{re.sub(r'[-_.]+', '_', p['name'])}-{p['version']}"


# ---- the library ------------------------------------------------------------------------------
class LibraryNotFound(RuntimeError):
    pass


def _pkg_config_libdir() -> Optional[str]:
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "kestrel"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    out = r.stdout.decode().strip()
    return out if r.returncode == 0 and out else None


def find_library(config_settings: Optional[Mapping[str, Any]] = None,
                 environ: Optional[Mapping[str, str]] = None) -> tuple[Optional[str], str]:
    """(path of the libkestrel to bundle or None for "system", how it was found)."""
    env = os.environ if environ is None else environ
    explicit = (config_settings or {}).get("library") or env.get("KESTREL_LIBRARY")
    if explicit:
        if explicit == "system":
            return None, "KESTREL_LIBRARY=system: the loader's path at run time"
        if not os.path.isfile(explicit):
            raise LibraryNotFound(f"kestrel: the library {explicit!r} (KESTREL_LIBRARY / library=) does not exist")
        return os.path.abspath(explicit), "KESTREL_LIBRARY"
    tried = []
    candidates = [(os.path.join(HERE, PACKAGE, LIB_NAME), "bundled in the source"),
                  (os.path.join(HERE, "..", "..", "build", LIB_NAME), "the repository's build folder")]
    libdir = _pkg_config_libdir()
    if libdir:
        candidates.append((os.path.join(libdir, LIB_NAME), "pkg-config kestrel"))
    else:
        tried.append("pkg-config kestrel (not found)")
    for path, how in candidates:
        if os.path.isfile(path):
            return os.path.realpath(path), how
        tried.append(f"{os.path.normpath(path)} ({how}: absent)")
    raise LibraryNotFound(
        "kestrel: libkestrel.so not found; build it first (cmake -B build && cmake --build build), or set "
        "KESTREL_LIBRARY=/path/to/libkestrel.so (KESTREL_LIBRARY=system bundles none). Tried:\n  "
        + "\n  ".join(tried))


# ---- wheel ------------------------------------------------------------------------------------
def _platform_tag() -> str:
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def _package_files() -> list[tuple[str, str]]:
    """(source path, name in the wheel) of the package's modules and py.typed."""
    out = []
    src = os.path.join(HERE, PACKAGE)
    for name in sorted(os.listdir(src)):
        if (name.endswith(".py") and name != "_build_info.py") or name == "py.typed":
            out.append((os.path.join(src, name), f"{PACKAGE}/{name}"))
    return out


def _dist_info_files(tag: str, purelib: bool) -> dict[str, bytes]:
    wheel = (f"Wheel-Version: 1.0\nGenerator: kestrel _kestrel_build\n"
             f"Root-Is-Purelib: {'true' if purelib else 'false'}\nTag: {tag}\n")
    return {"METADATA": _metadata().encode("utf-8"), "WHEEL": wheel.encode(), "top_level.txt": b"kestrel\n"}


def _write_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]]) -> str:
    library, how = find_library(config_settings)
    tag = f"py3-none-{_platform_tag()}" if library else "py3-none-any"
    dist = _dist_name()
    name = f"{dist}-{tag}.whl"
    files: list[tuple[str, bytes]] = []
    for path, arc in _package_files():
        with open(path, "rb") as f:
            files.append((arc, f.read()))
    if library:
        with open(library, "rb") as f:
            files.append((f"{PACKAGE}/{LIB_NAME}", f.read()))
    info = (f'"""Written by the build (_kestrel_build.py): where the bundled library came from."""\n'
            f"LIBRARY_SOURCE = {library!r}\nFOUND_BY = {how!r}\nBUNDLED = {library is not None!r}\n")
    files.append((f"{PACKAGE}/_build_info.py", info.encode()))
    for fname, data in _dist_info_files(tag, library is None).items():
        files.append((f"{dist}.dist-info/{fname}", data))
    record_name = f"{dist}.dist-info/RECORD"
    record = "\n".join([_record_line(a, d) for a, d in files] + [f"{record_name},,"]) + "\n"
    files.append((record_name, record.encode()))
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = (0o755 if arc.endswith(".so") else 0o644) << 16
            z.writestr(zi, data)
    sys.stderr.write(f"kestrel: {name}: library {library or 'not bundled'} ({how})\n")
    return name


# ---- PEP 517 hooks ------------------------------------------------------------------------------
def get_requires_for_build_wheel(config_settings: Optional[Mapping[str, Any]] = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Mapping[str, Any]] = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, config_settings)


def build_sdist(sdist_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    """The sources (no library: the wheel built from it looks for one as above)."""
    dist = _dist_name()
    name = f"{dist}.tar.gz"
    members = ["pyproject.toml", "README.md", "_kestrel_build.py"] + [arc for _, arc in _package_files()]
    pkg_info = _metadata().encode("utf-8")
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for arc in members:
            t.add(os.path.join(HERE, arc), arcname=f"{dist}/{arc}", recursive=False)
        ti = tarfile.TarInfo(f"{dist}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
