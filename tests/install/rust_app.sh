#!/usr/bin/env bash
# A tiny application crate outside the workspace, depending on the `kestrel` crate by path, whose
# main.rs is the repository README's Rust example as printed, built offline the two ways
# bindings/rust/README.md documents and run from the model's folder with no LD_LIBRARY_PATH:
#   static: `features = ["static"]` (libkestrel.a linked in: no libkestrel.so needed at all);
#   rpath:  shared, with the application's own `.cargo/config.toml` rpath to the library folder.
#
# usage: rust_app.sh SOURCE_DIR CARGO TARGET_DIR lib-dir DIR      (KESTREL_LIB_DIR=DIR: a build)
#        rust_app.sh SOURCE_DIR CARGO TARGET_DIR pkg-config PREFIX (an installed prefix found
#                                                                  through PKG_CONFIG_PATH)
# TARGET_DIR keeps cargo's output between runs. Exit 77: skipped (no test data).
set -euo pipefail
src=$1
cargo=$2
target=$3
mode=$4
where=$5
models=${KESTREL_TESTDATA:-$src/../shared/testdata}/models
if [ ! -f "$models/stories260K-f32.gguf" ]; then
  echo "rust_app: $models/stories260K-f32.gguf not found"
  [ "${KESTREL_REQUIRE_TESTDATA:-0}" = 1 ] && exit 1
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset LD_LIBRARY_PATH KESTREL_LIB_DIR KESTREL_STATIC RUSTFLAGS CARGO_BUILD_RUSTFLAGS CARGO_TARGET_DIR
case $mode in
  lib-dir) export KESTREL_LIB_DIR=$where; libdir=$where ;;
  pkg-config) export PKG_CONFIG_PATH=$where/lib/pkgconfig; libdir=$(pkg-config --variable=libdir kestrel) ;;
  *) echo "rust_app: unknown mode $mode"; exit 2 ;;
esac

marker='<!-- example: rust (compiled and run by the tests) -->'
awk -v m="$marker" '$0 == m {on=1; next} on && /^```rust$/ {inside=1; next} inside && /^```$/ {exit} inside {print}' \
  "$src/README.md" >"$tmp/main.rs"
grep -q 'kestrel::' "$tmp/main.rs" || { echo "rust_app: no Rust example in README.md"; exit 1; }

status=0
app() {  # name, dependency line, [.cargo/config.toml text]
  local dir=$tmp/$1
  mkdir -p "$dir/src" "$dir/.cargo"
  printf '[package]\nname = "kestrel-app-%s"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n%s\n' \
    "$1" "$2" >"$dir/Cargo.toml"
  cp "$tmp/main.rs" "$dir/src/main.rs"
  [ -z "${3:-}" ] || printf '%s\n' "$3" >"$dir/.cargo/config.toml"
  if ! (cd "$dir" && CARGO_TARGET_DIR=$target/$1 "$cargo" build --offline --quiet) >"$tmp/$1.log" 2>&1; then
    echo "rust_app: $1: cargo build failed:"; cat "$tmp/$1.log"; status=1; return 1
  fi
  bin=$target/$1/debug/kestrel-app-$1
}
run() {  # name
  local out
  if ! out=$(cd "$models" && env -u LD_LIBRARY_PATH "$bin" 2>"$tmp/stderr"); then
    echo "rust_app: $1 failed to run:"; cat "$tmp/stderr"; status=1; return
  fi
  case $out in
    ", there was"*) echo "ok: $1 ($mode): $(printf '%s' "$out" | head -c 72 | tr '\n' ' ')..." ;;
    *) echo "rust_app: $1 printed '$out'"; status=1 ;;
  esac
}

crate=$src/bindings/rust/kestrel
if app static "kestrel = { path = \"$crate\", features = [\"static\"] }"; then
  if readelf -d "$bin" | grep -q 'libkestrel'; then
    echo "rust_app: static: the binary still needs libkestrel.so:"; readelf -d "$bin" | grep NEEDED; status=1
  fi
  run static
fi
config="[build]
rustflags = [\"-C\", \"link-arg=-Wl,-rpath,$libdir\"]"
if app rpath "kestrel = { path = \"$crate\" }" "$config"; then
  readelf -d "$bin" | grep -q 'NEEDED.*libkestrel\.so' || { echo "rust_app: rpath: libkestrel.so not linked"; status=1; }
  run rpath
fi
exit $status
