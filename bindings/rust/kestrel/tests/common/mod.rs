//! Shared helpers of the integration tests: locating test data (skip when missing unless
//! KESTREL_REQUIRE_TESTDATA=1), loading the tiny models, running the CLI.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use kestrel::{Model, ModelOptions};

/// Returns early from a test when an `Option` is `None` (the helper already said why).
#[macro_export]
macro_rules! require {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return,
        }
    };
}

/// `$KESTREL_TESTDATA`, else `../shared/testdata` next to the repository (as the C tests).
pub fn testdata_root() -> PathBuf {
    if let Ok(p) = std::env::var("KESTREL_TESTDATA") {
        if !p.is_empty() {
            return PathBuf::from(p);
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../../shared/testdata")
}

fn required() -> bool {
    std::env::var("KESTREL_REQUIRE_TESTDATA").map(|v| v == "1").unwrap_or(false)
}

/// A file under the test data root, or `None` (skipped, or a panic with
/// KESTREL_REQUIRE_TESTDATA=1) when it is missing.
pub fn testdata_file(rel: &str) -> Option<PathBuf> {
    let p = testdata_root().join(rel);
    if p.is_file() {
        return Some(p);
    }
    if required() {
        panic!("missing test data {} (KESTREL_REQUIRE_TESTDATA=1)", p.display());
    }
    eprintln!("skipped: missing test data {}", p.display());
    None
}

/// The path of models/stories260K-f32.gguf, if present.
pub fn stories_path() -> Option<PathBuf> {
    testdata_file("models/stories260K-f32.gguf")
}

/// Options for the tiny test models: one thread.
pub fn tiny_options() -> ModelOptions {
    ModelOptions::new().n_threads(1)
}

/// stories260K (F32) with one thread, if present.
pub fn stories() -> Option<Model> {
    let path = stories_path()?;
    Some(Model::load_with(&path, &tiny_options()).expect("load stories260K"))
}

/// `$KESTREL_CLI run -m MODEL -p PROMPT -n N --temp 0 -t 1` stdout, or `None` (skipped, or a
/// panic with KESTREL_REQUIRE_TESTDATA=1) without KESTREL_CLI.
pub fn cli_greedy(model: &Path, prompt: &str, n: i32) -> Option<String> {
    cli_greedy_with(model, prompt, n, &[])
}

/// `cli_greedy` with extra arguments for `kestrel run` (e.g. `--parse-special`).
pub fn cli_greedy_with(model: &Path, prompt: &str, n: i32, extra: &[&str]) -> Option<String> {
    let cli = match std::env::var("KESTREL_CLI") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            if required() {
                panic!("KESTREL_CLI is not set (KESTREL_REQUIRE_TESTDATA=1)");
            }
            eprintln!("skipped: KESTREL_CLI is not set");
            return None;
        }
    };
    let out = Command::new(&cli)
        .arg("run")
        .arg("-m")
        .arg(model)
        .args(["-p", prompt, "-n", &n.to_string(), "--temp", "0", "-t", "1"])
        .args(extra)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {}", cli, e));
    assert!(out.status.success(), "kestrel run failed: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).expect("UTF-8 output"))
}

/// A file in a temporary folder unique to this test process.
pub fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kestrel-rust-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write temp file");
    p
}
