//! Finds libkestrel and tells cargo how to link it.
//!
//! Order: `KESTREL_LIB_DIR` (a folder holding libkestrel.so), else
//! `pkg-config --libs-only-L --libs-only-l kestrel`, else a plain `-lkestrel` on the default
//! search path. Every folder found is also put into the rpath of this crate's own test binaries
//! and exported as `DEP_KESTREL_LIB_DIRS` (`;`-separated) for dependent crates' build scripts,
//! which add the same rpath so their tests run without LD_LIBRARY_PATH.

use std::env;
use std::process::Command;

/// Link flags found for libkestrel: search folders and library names.
struct LinkPlan {
    dirs: Vec<String>,
    libs: Vec<String>,
}

fn from_env() -> Option<LinkPlan> {
    let dir = env::var("KESTREL_LIB_DIR").ok()?;
    if dir.is_empty() {
        return None;
    }
    Some(LinkPlan { dirs: vec![dir], libs: vec!["kestrel".to_string()] })
}

fn from_pkg_config() -> Option<LinkPlan> {
    let out = Command::new("pkg-config")
        .args(["--libs-only-L", "--libs-only-l", "kestrel"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let mut plan = LinkPlan { dirs: Vec::new(), libs: Vec::new() };
    for word in text.split_whitespace() {
        if let Some(dir) = word.strip_prefix("-L") {
            plan.dirs.push(dir.to_string());
        } else if let Some(lib) = word.strip_prefix("-l") {
            plan.libs.push(lib.to_string());
        }
    }
    if plan.libs.is_empty() {
        plan.libs.push("kestrel".to_string());
    }
    Some(plan)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KESTREL_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");

    let plan = from_env()
        .or_else(from_pkg_config)
        .unwrap_or(LinkPlan { dirs: Vec::new(), libs: vec!["kestrel".to_string()] });

    for dir in &plan.dirs {
        println!("cargo:rustc-link-search=native={}", dir);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    }
    for lib in &plan.libs {
        if lib == "kestrel" {
            println!("cargo:rustc-link-lib=dylib=kestrel");
        } else {
            println!("cargo:rustc-link-lib={}", lib);
        }
    }
    // Read by dependents as DEP_KESTREL_LIB_DIRS (this crate declares `links = "kestrel"`).
    println!("cargo:lib_dirs={}", plan.dirs.join(";"));
}
