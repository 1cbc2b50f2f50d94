//! 1. Puts the library folders `kestrel-sys` found into the rpath of this crate's tests and
//!    examples (so they run without LD_LIBRARY_PATH).
//! 2. Extracts the Rust example of the repository's README (the fenced block after
//!    `<!-- example: rust (compiled and run by the tests) -->`) into
//!    `$OUT_DIR/readme_example.rs` for the `readme` test, which compiles and runs it as printed.
//!    `$OUT_DIR/readme_status.rs` says `"found"`, `"absent"` (no README: the crate is used
//!    outside the repository; the test skips) or `"no example"` (the test fails); without the
//!    example a stub `main` is written.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const MARKER: &str = "<!-- example: rust (compiled and run by the tests) -->";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KESTREL_README");
    if let Ok(dirs) = env::var("DEP_KESTREL_LIB_DIRS") {
        for dir in dirs.split(';').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
        }
    }

    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let readme = readme_path();
    let example = readme.as_ref().and_then(|p| {
        println!("cargo:rerun-if-changed={}", p.display());
        fs::read_to_string(p).ok()
    });
    let stub = || "fn main() {}\n".to_string();
    let (code, status) = match example {
        Some(text) => match extract(&text) {
            Some(code) => (code, "found"),
            None => (stub(), "no example"),
        },
        None => (stub(), "absent"),
    };
    fs::write(out.join("readme_example.rs"), code).expect("write readme_example.rs");
    fs::write(out.join("readme_status.rs"), format!("{:?}", status)).expect("write readme_status.rs");
}

/// `$KESTREL_README`, else the repository's README.md three folders up, if it exists.
fn readme_path() -> Option<PathBuf> {
    if let Ok(p) = env::var("KESTREL_README") {
        if !p.is_empty() {
            return Some(PathBuf::from(p));
        }
    }
    let dir = env::var("CARGO_MANIFEST_DIR").ok()?;
    let p = Path::new(&dir).join("../../../README.md");
    if p.is_file() {
        Some(p)
    } else {
        None
    }
}

/// The body of the first ```rust fence after the marker line.
fn extract(readme: &str) -> Option<String> {
    let after = &readme[readme.find(MARKER)? + MARKER.len()..];
    let mut lines = after.lines().skip_while(|l| l.trim().is_empty());
    if lines.next()?.trim() != "```rust" {
        return None;
    }
    let mut code = String::new();
    for line in lines {
        if line.trim_start().starts_with("```") {
            return Some(code);
        }
        code.push_str(line);
        code.push('\n');
    }
    None
}
