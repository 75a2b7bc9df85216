//! Every message `#[distributed_lock]` prints, kept in one place so the voice stays uniform.
//!
//! The voice is rustc's: lower case, no trailing period, code in backticks, what was expected,
//! and at most one hint.

use std::fmt::Write as _;

use proc_macro2::Span;

/// The argument names the attribute accepts, in the order the docs list them.
pub(crate) const ARG_NAMES: &[&str] = &[
    "key",
    "ttl_ms",
    "wait_ms",
    "manager",
    "crate",
    "watchdog",
    "on_lost",
    "guard",
    "keys",
    "on_contended",
    "fallback",
    "reentrant",
    "permits",
    "mode",
    "hold_at_least_ms",
];

// ---- arguments -------------------------------------------------------------------------------

pub(crate) fn unknown_arg(name: &str) -> String {
    format!(
        "unknown argument `{name}` for `#[distributed_lock]`; expected one of {}",
        backticked(ARG_NAMES.iter().copied())
    )
}

pub(crate) fn duplicate_arg(name: &str) -> String {
    format!("duplicate argument `{name}`; each argument may be given at most once")
}

pub(crate) const MISSING_KEY: &str = "`#[distributed_lock]` requires a `key` argument, \
     e.g. `#[distributed_lock(key = \"order:<order_id>\")]`, or `keys = [..]`";

pub(crate) fn exclusive_args(first: &str, second: &str) -> String {
    let hint = match (first, second) {
        ("permits", "mode") | ("mode", "permits") => {
            "`permits` makes a semaphore and `mode` a read-write lock; choose one"
        }
        ("permits" | "mode", _) | (_, "permits" | "mode") => {
            "a semaphore or a read-write lock guards one key: use `key = \"..\"`"
        }
        ("key" | "keys", _) => "use `keys = [..]` alone to lock several keys",
        _ => "a fallback is what runs when the lock is contended",
    };
    format!("`{second}` cannot be combined with `{first}`; {hint}")
}

pub(crate) const KEYS_NOT_ARRAY: &str = "expected an array of string literals for `keys`, \
     e.g. `keys = [\"acct:<from>\", \"acct:<to>\"]`";

pub(crate) const KEYS_EMPTY: &str =
    "`keys` is empty; expected at least one key template, e.g. `keys = [\"acct:<from>\"]`";

pub(crate) const ON_CONTENDED_INVALID: &str =
    "expected `\"error\"` or `\"skip\"` for `on_contended`";

pub(crate) const FALLBACK_NOT_PATH: &str =
    "expected a path to a function for `fallback`, e.g. `fallback = Self::busy`";

pub(crate) const REENTRANT_NOT_BOOL: &str = "expected `true` or `false` for `reentrant`";

pub(crate) fn fallback_destructured(name: &str) -> String {
    format!(
        "`fallback` is called with every parameter, but `{name}` is bound by a destructuring \
         pattern; take the value as a plain parameter and destructure it in the body"
    )
}

pub(crate) const KEY_NOT_STRING: &str =
    "expected a string literal for `key`, e.g. `key = \"order:<order_id>\"`";

pub(crate) fn expected_int(name: &str) -> String {
    format!("expected an integer literal for `{name}`, in milliseconds")
}

pub(crate) fn bad_int_suffix(name: &str, suffix: &str) -> String {
    format!("invalid suffix `{suffix}` for `{name}`; expected no suffix or `u64`")
}

pub(crate) fn int_out_of_range(name: &str) -> String {
    format!("`{name}` does not fit in a `u64`")
}

pub(crate) fn int_above_max(name: &str, max: u64, meaning: &str) -> String {
    format!("`{name}` is at most {max} ({meaning})")
}

pub(crate) const TTL_ZERO: &str = "`ttl_ms` must be greater than 0";

pub(crate) const PERMITS_NOT_INT: &str =
    "expected an integer literal of at least 1 for `permits`, e.g. `permits = 5`";

pub(crate) const PERMITS_ZERO: &str =
    "`permits` must be at least 1; a semaphore of 0 permits would never let anyone in";

pub(crate) const PERMITS_TOO_LARGE: &str = "`permits` does not fit in a `u32`";

pub(crate) const MODE_INVALID: &str = "expected `\"read\"` or `\"write\"` for `mode`";

pub(crate) const HOLD_ZERO: &str =
    "`hold_at_least_ms` must be greater than 0; leave it out for no minimum";

pub(crate) fn hold_above_ttl(hold_ms: u64, ttl_ms: u64) -> String {
    format!(
        "`hold_at_least_ms` ({hold_ms}) exceeds `ttl_ms` ({ttl_ms}); the ttl is the upper bound \
         of the hold, so `hold_at_least_ms` must be at most `ttl_ms`"
    )
}

pub(crate) const HOLD_WITH_SHARE: &str = "`hold_at_least_ms` is for a plain (job) lock; a semaphore's permit or a reader's share keeps no minimum, so leave out `permits` or `mode = \"read\"`";

pub(crate) const WATCHDOG_NOT_BOOL: &str = "expected `true` or `false` for `watchdog`";

pub(crate) const ON_LOST_INVALID: &str = "expected `\"abort\"` or `\"continue\"` for `on_lost`";

pub(crate) const CRATE_NOT_STRING: &str =
    "expected a string literal path for `crate`, e.g. `crate = \"::lockcore\"`";

pub(crate) fn crate_bad_path(value: &str) -> String {
    format!("`{value}` is not a valid path for `crate`; expected a path like `::lockcore`")
}

pub(crate) const GUARD_NOT_IDENT: &str = "expected an identifier for `guard`, e.g. `guard = lock`";

pub(crate) fn guard_shadows_param(name: &str) -> String {
    format!("`guard = {name}` would shadow the parameter `{name}`; choose another name")
}

// ---- the annotated item ----------------------------------------------------------------------

pub(crate) const NOT_A_FN: &str = "`#[distributed_lock]` can only be applied to an `async fn`";

pub(crate) const ON_IMPL: &str = "`#[distributed_lock]` goes on a method, not on an impl or trait \
     block; with `#[async_trait]`, keep `#[async_trait]` on the block and put \
     `#[distributed_lock]` on the method";

pub(crate) const NO_BODY: &str = "`#[distributed_lock]` requires a function body";

pub(crate) const NOT_ASYNC: &str = "`#[distributed_lock]` requires an `async fn`";

pub(crate) const NOT_ASYNC_UNDER_TEST: &str = "`#[distributed_lock]` requires an `async fn`; \
     place it above `#[tokio::test]`, which turns the `async fn` into a plain `fn`";

pub(crate) const MISSING_RETURN_TYPE: &str = "`#[distributed_lock]` requires the return type \
     `Result<T, E>` where `E: From<lockcore::LockError>`";

// ---- #[idempotent] ---------------------------------------------------------------------------

pub(crate) fn idempotent_unknown_arg(name: &str, names: &[&str]) -> String {
    format!(
        "unknown argument `{name}` for `#[idempotent]`; expected one of {}",
        backticked(names.iter().copied())
    )
}

pub(crate) const IDEMPOTENT_MISSING_KEY: &str = "`#[idempotent]` requires a `key` argument, \
     e.g. `#[idempotent(key = \"order:req:<request_id>\", ttl_ms = 86_400_000)]`";

pub(crate) const IDEMPOTENT_MISSING_TTL: &str = "`#[idempotent]` requires `ttl_ms`: how long \
     the stored result is kept, in milliseconds, e.g. `ttl_ms = 86_400_000`";

pub(crate) const IDEMPOTENT_NOT_ASYNC: &str = "`#[idempotent]` requires an `async fn`";

pub(crate) const IDEMPOTENT_RETURN_TYPE: &str = "`#[idempotent]` requires the return type \
     `Result<T, E>` where `T: Serialize + DeserializeOwned` and `E: From<lockcore::LockError>`";

// ---- key templates ---------------------------------------------------------------------------

pub(crate) const TEMPLATE_EMPTY: &str = "key template is empty";

pub(crate) const TEMPLATE_UNCLOSED: &str =
    "unclosed `<` in key template; write `<<` for a literal `<`";

pub(crate) const TEMPLATE_EMPTY_PLACEHOLDER: &str =
    "empty placeholder `<>` in key template; name a parameter, e.g. `<order_id>`";

pub(crate) fn template_malformed(placeholder: &str) -> String {
    format!(
        "invalid placeholder `<{placeholder}>` in key template; \
         expected a parameter name with optional fields, e.g. `<order.id>`"
    )
}

pub(crate) fn template_bad_field(field: &str, placeholder: &str) -> String {
    format!("invalid field `{field}` in key template placeholder `<{placeholder}>`")
}

pub(crate) fn unknown_param(name: &str, available: &[String]) -> String {
    if available.is_empty() {
        format!("unknown parameter `{name}` in key template; the function has no parameters")
    } else {
        format!(
            "unknown parameter `{name}` in key template; available: {}",
            backticked(available.iter().map(String::as_str))
        )
    }
}

pub(crate) const SELF_WITHOUT_RECEIVER: &str =
    "key template uses `self`, but the function has no `self` parameter";

pub(crate) fn destructured_param(name: &str) -> String {
    format!(
        "`{name}` is bound by a destructuring pattern and cannot be used in the key template; \
         take the value as a plain parameter and destructure it in the body"
    )
}

// ---- plumbing --------------------------------------------------------------------------------

/// `` `a`, `b`, `c` ``
fn backticked<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for (i, name) in names.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        // Writing to a `String` cannot fail.
        let _ = write!(out, "`{name}`");
    }
    out
}

/// Collects every error of one expansion, so that the user sees them all at once.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn error(&mut self, span: Span, message: impl std::fmt::Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Keeps the value of `result`, or records its error.
    pub(crate) fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    /// `Err` with every recorded error combined, if there was any.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}
