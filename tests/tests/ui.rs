//! trybuild UI tests for `#[distributed_lock]`.
//!
//! - `ui/pass/*.rs` must compile (their `main` is trivial and never touches Redis).
//! - `ui/fail/*.rs` hold one theme each (arguments, templates, item shapes, return types, the
//!   body, follow-on errors), one small fn per rule; the `.stderr` beside each file is the catalogue
//!   of the macro's messages, pinned to the workspace toolchain (rustc 1.95).
//!
//! After a deliberate change of a message, regenerate with
//! `TRYBUILD=overwrite cargo test -p lockcore-tests --test ui` and read every changed `.stderr`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("ui/pass/*.rs");
    t.compile_fail("ui/fail/*.rs");
}
