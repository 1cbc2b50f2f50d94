#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds against it what a user would: the C and
# C++ examples with pkg-config and with find_package(Kestrel) (shared and static), README's C
# example exactly as printed, the C example linked statically through pkg-config (`cc -static`
# with kestrel.pc's --static flags, and kestrel-static.pc), and, when cargo is found ($CARGO, else
# ~/.cargo/bin/cargo, else PATH), a Rust application on the installed prefix
# (tests/install/rust_app.sh). Each must run and print text from the stories model; so must the
# installed CLI. usage: run.sh BUILD_DIR SOURCE_DIR   (exit 77: skipped, no test data)
set -euo pipefail
build=$1
src=$2
models=${KESTREL_TESTDATA:-$src/../shared/testdata}/models
if [ ! -f "$models/stories260K-f32.gguf" ]; then
  echo "install: $models/stories260K-f32.gguf not found"
  [ "${KESTREL_REQUIRE_TESTDATA:-0}" = 1 ] && exit 1
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/kestrel.h include/kestrel.hpp lib/libkestrel.a lib/pkgconfig/kestrel.pc \
         lib/cmake/Kestrel/KestrelConfig.cmake bin/kestrel; do
  [ -e "$prefix/$f" ] || { echo "install: $f was not installed"; exit 1; }
done
ls "$prefix"/lib/libkestrel.so* >/dev/null

# The shared library exports exactly the functions kestrel.h declares.
exported=$(nm -D --defined-only "$prefix"/lib/libkestrel.so | awk '{print $3}' | sort)
declared=$(grep -o '^KESTREL_API [^(]*(' "$prefix/include/kestrel.h" | grep -o 'kestrel_[a-z0-9_]*($' | tr -d '(' | sort)
if [ "$exported" != "$declared" ]; then
  echo "install: libkestrel.so exports differ from kestrel.h:"
  diff <(echo "$declared") <(echo "$exported") || true
  exit 1
fi

# pkg-config, shared library.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
libdir=$(pkg-config --variable=libdir kestrel)
read -r -a flags <<<"$(pkg-config --cflags --libs kestrel)"
cc -std=c99 -Wall -Werror "$src/examples/c/generate.c" "${flags[@]}" -Wl,-rpath,"$libdir" -o "$tmp/c_pkgconfig"
c++ -std=c++17 -Wall -Werror "$src/examples/cpp/generate.cpp" "${flags[@]}" -Wl,-rpath,"$libdir" -o "$tmp/cpp_pkgconfig"
# pkg-config, static library: `cc -static` with kestrel.pc's --static flags (a fully static
# program), and kestrel-static.pc (libkestrel.a; the system libraries stay shared).
read -r -a static_flags <<<"$(pkg-config --static --cflags --libs kestrel)"
cc -std=c99 -static "$src/examples/c/generate.c" "${static_flags[@]}" -o "$tmp/c_pkgconfig_full_static"
read -r -a kstatic_flags <<<"$(pkg-config --cflags --libs kestrel-static)"
cc -std=c99 -Wall -Werror "$src/examples/c/generate.c" "${kstatic_flags[@]}" -o "$tmp/c_pkgconfig_static"
read -r -a kstatic_flags <<<"$(pkg-config --static --cflags --libs kestrel-static)"
c++ -std=c++17 -Wall -Werror "$src/examples/cpp/generate.cpp" "${kstatic_flags[@]}" -o "$tmp/cpp_pkgconfig_static"
# README's C example, as printed.
awk '/^<!-- example: c /{on=1; next} on && /^```c$/{inside=1; next} inside && /^```$/{exit} inside{print}' \
  "$src/README.md" >"$tmp/readme.c"
[ -s "$tmp/readme.c" ] || { echo "install: no C example found in README.md"; exit 1; }
cc -std=c99 "$tmp/readme.c" "${flags[@]}" -Wl,-rpath,"$libdir" -o "$tmp/readme_c"

# find_package(Kestrel), shared and static.
cmake -S "$src/examples" -B "$tmp/examples" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/examples" -j 2 >/dev/null

status=0
check() {  # name, then the command; it must succeed and print at least 40 bytes of text
  local name=$1; shift
  local out
  if ! out=$(cd "$models" && "$@" 2>"$tmp/stderr"); then
    echo "install: $name failed:"; cat "$tmp/stderr"; status=1; return
  fi
  if [ "${#out}" -lt 40 ]; then
    echo "install: $name printed too little: '$out'"; status=1; return
  fi
  echo "ok: $name: $(printf '%s' "$out" | head -c 72 | tr '\n' ' ')..."
}
check "C, pkg-config" "$tmp/c_pkgconfig" stories260K-f32.gguf "Once upon a time"
check "C++, pkg-config" "$tmp/cpp_pkgconfig" stories260K-f32.gguf "Once upon a time"
check "README C example" "$tmp/readme_c"
for p in generate_c generate_cpp generate_c_static generate_cpp_static; do
  check "$p, find_package" "$tmp/examples/$p" stories260K-f32.gguf "Once upon a time"
done
check "installed CLI" "$prefix/bin/kestrel" run -m stories260K-f32.gguf -p "Once upon a time" -n 24 --temp 0
for p in c_pkgconfig_full_static c_pkgconfig_static cpp_pkgconfig_static; do
  check "$p" "$tmp/$p" stories260K-f32.gguf "Once upon a time"
done
if readelf -d "$tmp/c_pkgconfig_full_static" | grep -q NEEDED; then
  echo "install: c_pkgconfig_full_static (cc -static) needs shared libraries:"
  readelf -d "$tmp/c_pkgconfig_full_static" | grep NEEDED; status=1
fi
for p in examples/generate_c_static examples/generate_cpp_static c_pkgconfig_static cpp_pkgconfig_static; do
  if readelf -d "$tmp/$p" | grep -q 'NEEDED.*libkestrel'; then
    echo "install: $p needs libkestrel.so"; status=1
  fi
done

# A Rust application on the installed prefix (pkg-config), static and with its own rpath.
cargo=${CARGO:-}
[ -n "$cargo" ] || { [ -x "$HOME/.cargo/bin/cargo" ] && cargo=$HOME/.cargo/bin/cargo; } || cargo=$(command -v cargo || true)
if [ -n "$cargo" ]; then
  bash "$(dirname "$0")/rust_app.sh" "$src" "$cargo" "$build/cargo-app-install" pkg-config "$prefix" || status=1
else
  echo "install: cargo not found, the Rust application is not built"
fi
exit $status
