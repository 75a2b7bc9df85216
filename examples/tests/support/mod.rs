//! The example binaries that `cargo test` builds beside these tests
//! (`target/<profile>/examples/NAME`).

use std::path::PathBuf;
use std::process::Command;

/// The binary of example `name`, built (in this test's profile) if it is not current.
pub(crate) fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/<profile>/deps/<this test> -> target/<profile>/examples/<name>
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir layout");
    // Make sure the example is built and current, in this test's profile (a no-op when it is).
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "-q", "-p", "lockcore-examples", "--example", name]);
    if profile.ends_with("release") {
        build.arg("--release");
    }
    let built = build.status().expect("run cargo build");
    assert!(built.success(), "cargo build --example {name} failed");
    let bin = profile.join("examples").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run `cargo test -p lockcore-examples` (it builds the examples) or \
         `cargo build -p lockcore-examples --example {name}` first",
        bin.display()
    );
    bin
}

/// Runs example `name` with `args` to its end; returns its stdout's last line, after checking
/// that it exited successfully (the examples check their own outcome).
pub(crate) fn last_line(name: &str, args: &[&str]) -> String {
    let output = Command::new(example_binary(name))
        .args(args)
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{name} {args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.lines().last().unwrap_or_default().to_owned()
}

/// The value of `name=` in a `key=value` line.
pub(crate) fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|word| word.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}
