//! Finds libkestrel and tells cargo how to link it.
//!
//! Where: `KESTREL_LIB_DIR` (a folder holding libkestrel.so / libkestrel.a), else
//! `pkg-config kestrel`, else the linker's default search path.
//!
//! How: shared by default. With the `static` feature (or `KESTREL_STATIC=1`) libkestrel.a is
//! linked into the crate (`static=kestrel`, which cargo carries into every binary that depends on
//! this crate), with the system libraries it needs (libstdc++, libpcre2-8, libm, pthread, CUDA's
//! static runtime in a CUDA build) read from kestrel.pc's `--static` flags (`KESTREL_LIB_DIR`'s
//! kestrel.pc or pkgconfig/kestrel.pc, else pkg-config's) or a built-in list. An application
//! built that way runs without LD_LIBRARY_PATH wherever libkestrel was installed.
//!
//! Shared: every folder found is put into the rpath of this crate's own tests and exported as
//! `DEP_KESTREL_LIB_DIRS` (`;`-separated) for dependent crates' build scripts, which add the
//! same rpath to their own tests. Cargo passes no link argument of a dependency to an
//! application's binary: an application linking a libkestrel.so outside the loader's path needs
//! its own rpath (bindings/rust/README.md) or the `static` feature.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Link flags found for libkestrel: search folders and library names.
struct LinkPlan {
    dirs: Vec<String>,
    libs: Vec<String>,
}

/// What libkestrel.a needs when no kestrel.pc says (a CPU build).
const STATIC_DEPS: [&str; 4] = ["stdc++", "pcre2-8", "m", "pthread"];

fn lib_dir_env() -> Option<String> {
    env::var("KESTREL_LIB_DIR").ok().filter(|d| !d.is_empty())
}

/// `pkg-config ARGS...`'s -L folders and -l names, or None when it fails.
fn pkg_config(args: &[&str]) -> Option<LinkPlan> {
    let out = Command::new("pkg-config").args(args).output().ok()?;
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
    Some(plan)
}

/// `pkg-config --variable=libdir kestrel`.
fn pkg_config_libdir() -> Option<String> {
    let out = Command::new("pkg-config").args(["--variable=libdir", "kestrel"]).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_string();
    if out.status.success() && !dir.is_empty() {
        Some(dir)
    } else {
        None
    }
}

fn shared_plan() -> LinkPlan {
    if let Some(dir) = lib_dir_env() {
        return LinkPlan { dirs: vec![dir], libs: vec!["kestrel".to_string()] };
    }
    let mut plan = pkg_config(&["--libs-only-L", "--libs-only-l", "kestrel"])
        .unwrap_or(LinkPlan { dirs: Vec::new(), libs: Vec::new() });
    if plan.libs.is_empty() {
        plan.libs.push("kestrel".to_string());
    }
    plan
}

/// libkestrel.a's folder first, then what kestrel.pc's `--static` flags add.
fn static_plan() -> LinkPlan {
    let static_flags = ["--static", "--libs-only-L", "--libs-only-l"];
    let (dir, pc) = match lib_dir_env() {
        Some(dir) => {
            let pc = [Path::new(&dir).join("kestrel.pc"), Path::new(&dir).join("pkgconfig/kestrel.pc")]
                .into_iter()
                .find(|p| p.is_file());
            let found = pc.and_then(|p| {
                println!("cargo:rerun-if-changed={}", p.display());
                let mut args = static_flags.to_vec();
                args.push(p.to_str()?);
                pkg_config(&args)
            });
            (Some(dir), found)
        }
        None => {
            let mut args = static_flags.to_vec();
            args.push("kestrel");
            (pkg_config_libdir(), pkg_config(&args))
        }
    };
    let mut plan = LinkPlan { dirs: dir.into_iter().collect(), libs: vec!["kestrel".to_string()] };
    match pc {
        Some(found) => {
            // A build folder's kestrel.pc names an install prefix that does not exist yet: keep
            // only folders that do (CUDA's, for cudart_static).
            for d in found.dirs {
                if Path::new(&d).is_dir() && !plan.dirs.contains(&d) {
                    plan.dirs.push(d);
                }
            }
            plan.libs.extend(found.libs.into_iter().filter(|l| l != "kestrel"));
        }
        None => plan.libs.extend(STATIC_DEPS.iter().map(|s| s.to_string())),
    }
    plan
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in ["KESTREL_LIB_DIR", "KESTREL_STATIC", "PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR"] {
        println!("cargo:rerun-if-env-changed={}", var);
    }
    let link_static = env::var_os("CARGO_FEATURE_STATIC").is_some()
        || env::var("KESTREL_STATIC").map(|v| v == "1").unwrap_or(false);

    if link_static {
        let plan = static_plan();
        let archive = plan.dirs.first().map(|d| PathBuf::from(d).join("libkestrel.a"));
        match &archive {
            // Relink when the library is rebuilt: its objects are copied into this crate.
            Some(a) if a.is_file() => println!("cargo:rerun-if-changed={}", a.display()),
            Some(a) => panic!("kestrel-sys (static): {} not found (KESTREL_LIB_DIR or pkg-config kestrel)", a.display()),
            None => {}
        }
        for dir in &plan.dirs {
            println!("cargo:rustc-link-search=native={}", dir);
        }
        for lib in &plan.libs {
            if lib == "kestrel" {
                println!("cargo:rustc-link-lib=static=kestrel");
            } else {
                println!("cargo:rustc-link-lib={}", lib);
            }
        }
        println!("cargo:lib_dirs=");
        println!("cargo:static=1");
        return;
    }

    let plan = shared_plan();
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
