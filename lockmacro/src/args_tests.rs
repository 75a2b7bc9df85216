//! Unit tests of the argument parser and its validation.

use quote::quote;

use super::*;

fn parse(args: TokenStream) -> Result<Config, Vec<String>> {
    Config::parse(args).map_err(|e| e.into_iter().map(|e| e.to_string()).collect())
}

fn error(args: TokenStream) -> String {
    match parse(args) {
        Ok(_) => String::from("<no error>"),
        Err(messages) => messages.join("\n"),
    }
}

#[test]
fn defaults() {
    let Ok(config) = parse(quote!(key = "k:<id>")) else {
        panic!("expected a config");
    };
    assert_eq!(config.keys.len(), 1);
    assert_eq!(config.keys[0].value(), "k:<id>");
    assert!(!config.multi);
    assert!(config.reentrant);
    assert!(matches!(config.on_contended, OnContended::Error));
    assert!(config.ttl_ms.is_none());
    assert!(config.wait_ms.is_none());
    assert!(config.manager.is_none());
    let krate = &config.krate;
    assert_eq!(quote!(#krate).to_string(), quote!(::lockcore).to_string());
    assert_eq!(config.watchdog, None);
    assert_eq!(config.on_lost, OnLost::Abort);
    assert!(config.guard.is_none());
}

#[test]
fn all_arguments_in_any_order() {
    let Ok(config) = parse(quote!(
        guard = g,
        on_lost = "continue",
        watchdog = false,
        crate = "::my::lock",
        manager = self.locks,
        wait_ms = 0,
        ttl_ms = 10_000u64,
        key = "k",
    )) else {
        panic!("expected a config");
    };
    assert_eq!(config.ttl_ms, Some(10_000));
    assert_eq!(config.wait_ms, Some(0));
    let manager = config.manager;
    assert_eq!(quote!(#manager).to_string(), quote!(self.locks).to_string());
    let krate = config.krate;
    assert_eq!(quote!(#krate).to_string(), quote!(::my::lock).to_string());
    assert_eq!(config.watchdog, Some(false));
    assert_eq!(config.on_lost, OnLost::Continue);
    assert_eq!(config.guard.map(|g| g.to_string()).as_deref(), Some("g"));
}

#[test]
fn durations_above_the_runtime_limits() {
    assert_eq!(
        error(quote!(key = "k", ttl_ms = 604_800_001)),
        "`ttl_ms` is at most 604800000 (7 days, in milliseconds)"
    );
    assert_eq!(
        error(quote!(key = "k", wait_ms = 3_600_001)),
        "`wait_ms` is at most 3600000 (1 hour, in milliseconds)"
    );
    assert!(Config::parse(quote!(key = "k", ttl_ms = 604_800_000, wait_ms = 3_600_000)).is_ok());
}

#[test]
fn missing_key() {
    assert!(error(quote!()).contains("requires a `key` argument"));
    assert!(error(quote!(ttl_ms = 5)).contains("requires a `key` argument"));
}

#[test]
fn unknown_and_duplicate() {
    assert_eq!(
        error(quote!(key = "k", ttl = 5)),
        "unknown argument `ttl` for `#[distributed_lock]`; expected one of `key`, `ttl_ms`, \
         `wait_ms`, `manager`, `crate`, `watchdog`, `on_lost`, `guard`, `keys`, \
         `on_contended`, `fallback`, `reentrant`, `hold_at_least_ms`"
    );
    assert_eq!(
        error(quote!(key = "k", key = "j")),
        "duplicate argument `key`; each argument may be given at most once"
    );
}

#[test]
fn literal_types() {
    assert_eq!(error(quote!(key = 5)), diagnostics::KEY_NOT_STRING);
    assert_eq!(
        error(quote!(key = "k", ttl_ms = "5")),
        "expected an integer literal for `ttl_ms`, in milliseconds"
    );
    assert_eq!(
        error(quote!(key = "k", wait_ms = -1)),
        "expected an integer literal for `wait_ms`, in milliseconds"
    );
    assert_eq!(
        error(quote!(key = "k", ttl_ms = 5i32)),
        "invalid suffix `i32` for `ttl_ms`; expected no suffix or `u64`"
    );
    assert_eq!(
        error(quote!(key = "k", ttl_ms = 99999999999999999999999)),
        "`ttl_ms` does not fit in a `u64`"
    );
    assert_eq!(error(quote!(key = "k", ttl_ms = 0)), diagnostics::TTL_ZERO);
    assert_eq!(
        error(quote!(key = "k", watchdog = "yes")),
        diagnostics::WATCHDOG_NOT_BOOL
    );
    assert_eq!(
        error(quote!(key = "k", on_lost = "retry")),
        diagnostics::ON_LOST_INVALID
    );
    assert_eq!(
        error(quote!(key = "k", guard = a.b)),
        diagnostics::GUARD_NOT_IDENT
    );
    assert_eq!(
        error(quote!(key = "k", guard = self)),
        diagnostics::GUARD_NOT_IDENT
    );
}

#[test]
fn crate_path_errors() {
    assert_eq!(
        error(quote!(key = "k", crate = lockcore)),
        diagnostics::CRATE_NOT_STRING
    );
    assert_eq!(
        error(quote!(key = "k", crate = "not a path")),
        "`not a path` is not a valid path for `crate`; expected a path like `::lockcore`"
    );
    assert!(error(quote!(key = "k", crate = "a::<T>")).contains("not a valid path"));
}

#[test]
fn every_error_is_reported() {
    let messages = match parse(quote!(key = 1, ttl_ms = 0, nope = 1, ttl_ms = 3)) {
        Ok(_) => Vec::new(),
        Err(messages) => messages,
    };
    assert_eq!(messages.len(), 4, "{messages:?}");
}

#[test]
fn policies_and_key_sets() {
    let Ok(config) = parse(quote!(
        keys = ["a:<x>", "b"],
        on_contended = "skip",
        reentrant = false
    )) else {
        panic!("expected a config");
    };
    assert!(config.multi);
    assert_eq!(config.keys.len(), 2);
    assert!(!config.reentrant);
    assert!(matches!(config.on_contended, OnContended::Skip(_)));
    let Ok(config) = parse(quote!(key = "k", fallback = Self::busy)) else {
        panic!("expected a config");
    };
    assert!(matches!(config.on_contended, OnContended::Fallback(_)));
}

#[test]
fn policy_and_key_set_errors() {
    assert_eq!(
        error(quote!(key = "a", keys = ["b"])),
        diagnostics::exclusive_args("key", "keys")
    );
    assert_eq!(error(quote!(keys = [])), diagnostics::KEYS_EMPTY);
    assert_eq!(error(quote!(keys = "a")), diagnostics::KEYS_NOT_ARRAY);
    assert_eq!(error(quote!(keys = ["a", 1])), diagnostics::KEYS_NOT_ARRAY);
    assert_eq!(
        error(quote!(key = "a", on_contended = "wait")),
        diagnostics::ON_CONTENDED_INVALID
    );
    assert_eq!(
        error(quote!(key = "a", on_contended = "skip", fallback = f)),
        diagnostics::exclusive_args("on_contended", "fallback")
    );
    assert_eq!(
        error(quote!(key = "a", fallback = "f")),
        diagnostics::FALLBACK_NOT_PATH
    );
    assert_eq!(
        error(quote!(key = "a", reentrant = 1)),
        diagnostics::REENTRANT_NOT_BOOL
    );
}

#[test]
fn syntax_errors_come_from_syn() {
    assert_eq!(error(quote!(key)), "expected `=`");
    assert_eq!(error(quote!(key = "a" ttl_ms = 1)), "expected `,`");
}

#[test]
fn hold_at_least_is_at_most_the_ttl() {
    let Ok(config) = parse(quote!(key = "job", ttl_ms = 5000, hold_at_least_ms = 5000)) else {
        panic!("a minimum equal to the ttl is accepted");
    };
    assert_eq!(config.hold_at_least_ms, Some(5000));
    assert!(
        parse(quote!(key = "job", hold_at_least_ms = 60_000)).is_ok(),
        "no ttl_ms: checked at run time"
    );
    assert_eq!(
        error(quote!(key = "job", ttl_ms = 5000, hold_at_least_ms = 5001)),
        diagnostics::hold_above_ttl(5001, 5000)
    );
    assert_eq!(
        error(quote!(hold_at_least_ms = 9000, key = "job", ttl_ms = 5000)),
        diagnostics::hold_above_ttl(9000, 5000),
        "in any order"
    );
    assert_eq!(
        error(quote!(key = "job", hold_at_least_ms = 0)),
        diagnostics::HOLD_ZERO
    );
    assert_eq!(
        error(quote!(key = "job", hold_at_least_ms = 604_800_001)),
        "`hold_at_least_ms` is at most 604800000 (7 days, in milliseconds)"
    );
}
