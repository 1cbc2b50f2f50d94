//! The Rust example of the repository's README, compiled and run exactly as printed (build.rs
//! extracts it). Its own test binary: it changes the working directory to the models folder.

mod common;

mod example {
    include!(concat!(env!("OUT_DIR"), "/readme_example.rs"));

    /// What `main` may return: `()` or a `Result` whose error prints.
    pub trait Outcome {
        fn check(self);
    }
    impl Outcome for () {
        fn check(self) {}
    }
    impl<E: std::fmt::Debug> Outcome for Result<(), E> {
        fn check(self) {
            if let Err(e) = self {
                panic!("the README example failed: {:?}", e);
            }
        }
    }

    /// Runs the example's `main`.
    pub fn run() {
        Outcome::check(main());
    }
}

const STATUS: &str = include!(concat!(env!("OUT_DIR"), "/readme_status.rs"));

#[test]
fn readme_example_runs() {
    match STATUS {
        "found" => {}
        "absent" => {
            eprintln!("skipped: no README.md (the crate is used outside the repository)");
            return;
        }
        other => panic!("README.md: {} (expected a ```rust block after the example marker)", other),
    }
    let model = require!(common::stories_path());
    std::env::set_current_dir(model.parent().unwrap()).unwrap();
    example::run();
}
