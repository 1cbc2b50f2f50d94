#!/usr/bin/env bash
# Installs what Kestrel needs from Debian's packages (Debian 12 or similar), idempotently: a
# package already installed is left alone, and nothing runs when all are there.
#   tools/dev/install-deps.sh           what the build and `make demo` need
#   tools/dev/install-deps.sh --test    also what the test suite needs (bindings, server, CI)
#   tools/dev/install-deps.sh --list    print the packages it would check, install nothing
# Used by `make demo`, `make test` and .ci/run. Asks for sudo only when not root.
set -euo pipefail
cd "$(dirname "$0")/../.."

# The build: compilers, CMake + Ninja, the libraries the library and CLI link, and doctest (a
# header the default configuration's test targets need).
BUILD_PKGS=(build-essential cmake ninja-build pkg-config python3
            nlohmann-json3-dev libpcre2-dev libcli11-dev libedit-dev doctest-dev)
# The tests: the Python binding in a venv; the Rust binding (cargo); the server tests
# (node with the pinned OpenAI/Anthropic clients, Chromium for the web page, promtool for
# /metrics); clang and its runtime for the fuzz targets.
TEST_PKGS=(python3-venv python3-setuptools python3-pip python3-wheel
           cargo rustc nodejs npm chromium prometheus clang libclang-rt-14-dev)

want=("${BUILD_PKGS[@]}")
with_tests=0
for a in "$@"; do
  case "$a" in
    --test) with_tests=1; want+=("${TEST_PKGS[@]}") ;;
    --list) printf '%s\n' "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}"; exit 0 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown option '$a' (try --help)" >&2; exit 2 ;;
  esac
done

if ! command -v dpkg-query >/dev/null; then
  echo "install-deps: no dpkg here; install the equivalents of: ${want[*]}" >&2
  exit 0
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm may come from elsewhere (nvm, nodesource): any working pair will do.
if command -v node >/dev/null && command -v npm >/dev/null; then
  keep=(); for p in "${missing[@]}"; do [[ $p == nodejs || $p == npm ]] || keep+=("$p"); done
  missing=("${keep[@]+"${keep[@]}"}")
fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]} (apt-get)" >&2
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: not root and no sudo: install them as root" >&2; exit 1; }
    echo "install-deps: not root, so asking sudo" >&2
    SUDO=(sudo)
  fi
  "${SUDO[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${missing[@]}"
fi

# The server tests' pinned npm clients (tests/server/package-lock.json).
if [ $with_tests = 1 ] && { [ ! -d tests/server/node_modules ] || [ tests/server/package-lock.json -nt tests/server/node_modules ]; }; then
  npm ci --prefix tests/server --no-audit --no-fund --loglevel=error
fi
