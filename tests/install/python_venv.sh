#!/usr/bin/env bash
# The Python binding installed as bindings/python/README.md says, in a fresh `python3 -m venv`
# with pip's index off and its configuration ignored (so nothing can come from the network or a
# local wheel folder), once per interpreter given; then, with only the venv's python (no
# PYTHONPATH, no KESTREL_LIBRARY, no LD_LIBRARY_PATH), from the folder holding the model: the
# binding README's example and the repository README's Python example, as printed.
#
# usage: python_venv.sh SOURCE_DIR LIBRARY PYTHON...   (exit 77: skipped, no test data / no venv)
# LIBRARY is the build's libkestrel.so, given to the install as KESTREL_LIBRARY (the README's
# command finds build/libkestrel.so by itself; a ctest build folder may be elsewhere).
set -euo pipefail
src=$1
library=$2
shift 2
models=${KESTREL_TESTDATA:-$src/../shared/testdata}/models
skip() {
  echo "python_venv: $1"
  [ "${KESTREL_REQUIRE_TESTDATA:-0}" = 1 ] && exit 1
  exit 77
}
[ -f "$models/stories260K-f32.gguf" ] || skip "$models/stories260K-f32.gguf not found"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A fenced block right after a marker line, as printed.
block() {  # file, marker, fence
  awk -v m="$2" -v f="$3" '$0 == m {on=1; next} on && $0 == f {inside=1; next} inside && /^```$/ {exit} inside {print}' "$1"
}
install_cmds=$(block "$src/bindings/python/README.md" '<!-- install: sh (run by the tests) -->' '```sh')
[ -n "$install_cmds" ] || { echo "python_venv: no install block in bindings/python/README.md"; exit 1; }
block "$src/bindings/python/README.md" '<!-- example: python (run by the tests) -->' '```python' >"$tmp/binding_example.py"
block "$src/README.md" '<!-- example: python (run by the tests) -->' '```python' >"$tmp/readme_example.py"
for f in binding_example.py readme_example.py; do
  grep -q 'import kestrel' "$tmp/$f" || { echo "python_venv: no Python example for $f"; exit 1; }
done

# Nothing from this shell's Python or pip setup leaks into the installs and runs.
for v in $(env | grep -o '^PIP_[A-Z_]*') PYTHONPATH PYTHONHOME KESTREL_LIBRARY LD_LIBRARY_PATH VIRTUAL_ENV; do
  unset "$v"
done
export PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

status=0
n=0
declare -A seen=()
for python in "$@"; do
  exe=$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null) || continue
  [ -z "${seen[$exe]:-}" ] || continue
  seen[$exe]=1
  if ! "$exe" -c 'import ensurepip, venv' 2>/dev/null; then
    echo "python_venv: $exe has no venv/ensurepip (Debian: apt-get install python3-venv), skipped"
    continue
  fi
  n=$((n + 1))
  work=$tmp/work$n
  mkdir -p "$work/bin" "$work/repo"
  ln -s "$exe" "$work/bin/python3"  # `python3` in the README's commands is this interpreter
  ln -s "$src/bindings" "$work/repo/bindings"
  echo "== $exe ($("$exe" --version 2>&1))"
  if ! (cd "$work/repo" && PATH=$work/bin:$PATH KESTREL_LIBRARY=$library bash -euxo pipefail -c "$install_cmds") \
      >"$work/install.log" 2>&1; then
    echo "python_venv: the README's install failed with $exe:"; cat "$work/install.log"; status=1; continue
  fi
  venv_python=$work/repo/.venv/bin/python
  echo "ok: installed with $("$venv_python" -m pip --version)"
  # Where the installed package loads its library from: inside the venv, not the build.
  where=$(cd "$models" && "$venv_python" -c 'import kestrel; print(kestrel.library_path())')
  case $where in
    "$work/repo/.venv/"*) echo "ok: library $where" ;;
    *) echo "python_venv: the installed package loaded $where, not its own copy"; status=1 ;;
  esac
  for f in binding_example.py readme_example.py; do
    if ! out=$(cd "$models" && "$venv_python" "$tmp/$f" 2>"$work/stderr"); then
      echo "python_venv: $f failed with $exe:"; cat "$work/stderr"; status=1; continue
    fi
    case $out in
      ", there was"*) echo "ok: $f: $(printf '%s' "$out" | head -c 72 | tr '\n' ' ')..." ;;
      *) echo "python_venv: $f printed '$out'"; status=1 ;;
    esac
  done
done
[ "$n" -gt 0 ] || skip "no interpreter with venv among: $*"
exit $status
