//! The attribute's arguments: `key = "..", ttl_ms = 10_000, ...`.
//!
//! Parsing keeps every value with its span; [`Config::parse`] then validates all of them in one
//! pass and reports every problem it finds, each at the narrowest span.

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream, Parser as _};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token};

use crate::diagnostics::{self, Errors};

/// What the body does when the lock is lost while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnLost {
    Abort,
    Continue,
}

/// What a contended call does once its wait budget is spent.
pub(crate) enum OnContended {
    /// Return `Err(From::from(LockError::Contended { .. }))`.
    Error,
    /// Return `Ok(())` / `Ok(None)`; the span is the argument's value, where a return type
    /// that cannot be skipped is reported.
    Skip(Span),
    /// Call this function with the same arguments instead of the body.
    Fallback(Path),
}

/// What the attribute locks beside the plain lock of its key: one share of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// `permits = N` with N ≥ 2: one permit of a semaphore of N (`permits = 1` is the plain
    /// lock).
    Permits(u32),
    /// `mode = "read"`: a reader's share (`mode = "write"` is the plain lock).
    Read,
}

/// The validated arguments.
pub(crate) struct Config {
    /// `key = ".."` as one template, or `keys = [..]`; never empty.
    pub(crate) keys: Vec<LitStr>,
    /// `keys = [..]` was given: `guard` binds the whole set.
    pub(crate) multi: bool,
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) wait_ms: Option<u64>,
    /// `hold_at_least_ms = N`: a release keeps the key until N ms after the acquire.
    pub(crate) hold_at_least_ms: Option<u64>,
    pub(crate) manager: Option<Expr>,
    /// `::lockcore` unless `crate = ".."` says otherwise.
    pub(crate) krate: Path,
    /// `None`: the manager's explicit choice, else on (decided at run time).
    pub(crate) watchdog: Option<bool>,
    pub(crate) on_lost: OnLost,
    pub(crate) guard: Option<Ident>,
    pub(crate) on_contended: OnContended,
    pub(crate) reentrant: bool,
    /// `permits = N` (N ≥ 2) or `mode = "read"`; `None` for the plain lock.
    pub(crate) share: Option<Share>,
}

/// `name = value`; the value is any expression until validation.
pub(crate) struct Arg {
    pub(crate) name: Ident,
    pub(crate) value: Expr,
}

impl Parse for Arg {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        // `parse_any` so that the keyword `crate` is accepted as a name.
        let name = Ident::parse_any(input)?;
        input.parse::<Token![=]>()?;
        let value = input.parse()?;
        Ok(Arg { name, value })
    }
}

impl Config {
    /// Parses and validates `args`, reporting every problem found, not only the first.
    pub(crate) fn parse(args: TokenStream) -> syn::Result<Config> {
        let args = Punctuated::<Arg, Token![,]>::parse_terminated.parse2(args)?;
        let mut errors = Errors::default();
        let mut seen: Vec<String> = Vec::new();
        let mut keys = None;
        let mut hold_span = Span::call_site();
        let mut config = Config {
            keys: Vec::new(), // replaced below, or an error is recorded
            multi: false,
            ttl_ms: None,
            wait_ms: None,
            hold_at_least_ms: None,
            manager: None,
            krate: syn::parse_quote!(::lockcore),
            watchdog: None,
            on_lost: OnLost::Abort,
            guard: None,
            on_contended: OnContended::Error,
            reentrant: true,
            share: None,
        };
        for Arg { name, value } in args {
            let name_str = name.to_string();
            if !diagnostics::ARG_NAMES.contains(&name_str.as_str()) {
                errors.error(name.span(), diagnostics::unknown_arg(&name_str));
                continue;
            }
            if seen.contains(&name_str) {
                errors.error(name.span(), diagnostics::duplicate_arg(&name_str));
                continue;
            }
            if let Some(other) = exclusive_with(&name_str)
                .iter()
                .find(|o| seen.iter().any(|s| s == *o))
            {
                errors.error(name.span(), diagnostics::exclusive_args(other, &name_str));
                seen.push(name_str);
                continue;
            }
            let result =
                match name_str.as_str() {
                    "key" => string(&value, diagnostics::KEY_NOT_STRING)
                        .map(|lit| keys = Some(vec![lit])),
                    "keys" => templates(&value).map(|lits| {
                        config.multi = true;
                        keys = Some(lits);
                    }),
                    "on_contended" => on_contended(&value).map(|v| config.on_contended = v),
                    "fallback" => {
                        fallback(&value).map(|p| config.on_contended = OnContended::Fallback(p))
                    }
                    "reentrant" => boolean(&value, diagnostics::REENTRANT_NOT_BOOL)
                        .map(|b| config.reentrant = b),
                    "ttl_ms" => millis(&value, "ttl_ms").and_then(|ms| {
                        if ms == 0 {
                            return Err(syn::Error::new(value.span(), diagnostics::TTL_ZERO));
                        }
                        config.ttl_ms = Some(ms);
                        Ok(())
                    }),
                    "wait_ms" => millis(&value, "wait_ms").map(|ms| config.wait_ms = Some(ms)),
                    "hold_at_least_ms" => millis(&value, "hold_at_least_ms").and_then(|ms| {
                        if ms == 0 {
                            return Err(syn::Error::new(value.span(), diagnostics::HOLD_ZERO));
                        }
                        hold_span = value.span();
                        config.hold_at_least_ms = Some(ms);
                        Ok(())
                    }),
                    "manager" => {
                        config.manager = Some(value);
                        Ok(())
                    }
                    "crate" => crate_path(&value).map(|path| config.krate = path),
                    "watchdog" => boolean(&value, diagnostics::WATCHDOG_NOT_BOOL)
                        .map(|b| config.watchdog = Some(b)),
                    "on_lost" => on_lost(&value).map(|v| config.on_lost = v),
                    "permits" => permits(&value).map(|n| {
                        config.share = (n > 1).then_some(Share::Permits(n));
                    }),
                    "mode" => mode(&value).map(|share| config.share = share),
                    // The name was checked against `ARG_NAMES` above, so this is `guard`.
                    _ => guard(&value).map(|ident| config.guard = Some(ident)),
                };
            seen.push(name_str);
            errors.ok(result);
        }
        // Without `ttl_ms` the manager's default ttl bounds it, checked at run time.
        if let (Some(hold), Some(ttl)) = (config.hold_at_least_ms, config.ttl_ms)
            && hold > ttl
        {
            errors.error(hold_span, diagnostics::hold_above_ttl(hold, ttl));
        }
        if config.hold_at_least_ms.is_some() && config.share.is_some() {
            errors.error(hold_span, diagnostics::HOLD_WITH_SHARE);
        }
        match keys {
            Some(keys) => config.keys = keys,
            // A wrong-typed `key` was already reported; don't also call it missing.
            None if !seen.iter().any(|name| name == "key" || name == "keys") => {
                errors.error(Span::call_site(), diagnostics::MISSING_KEY);
            }
            None => {}
        }
        errors.finish().map(|()| config)
    }
}

/// The literal `value` is, also when a `macro_rules!` fragment (`$key:literal`) wraps it in an
/// invisible group.
pub(crate) fn literal(value: &Expr) -> Option<&Lit> {
    match value {
        Expr::Lit(ExprLit { lit, attrs }) if attrs.is_empty() => Some(lit),
        Expr::Group(group) if group.attrs.is_empty() => literal(&group.expr),
        _ => None,
    }
}

pub(crate) fn string(value: &Expr, message: &str) -> syn::Result<LitStr> {
    match literal(value) {
        Some(Lit::Str(lit)) => Ok(lit.clone()),
        _ => Err(syn::Error::new(value.span(), message)),
    }
}

pub(crate) fn millis(value: &Expr, name: &str) -> syn::Result<u64> {
    let Some(Lit::Int(lit)) = literal(value) else {
        return Err(syn::Error::new(
            value.span(),
            diagnostics::expected_int(name),
        ));
    };
    if !matches!(lit.suffix(), "" | "u64") {
        return Err(syn::Error::new(
            lit.span(),
            diagnostics::bad_int_suffix(name, lit.suffix()),
        ));
    }
    let value = lit
        .base10_parse::<u64>()
        .map_err(|_| syn::Error::new(lit.span(), diagnostics::int_out_of_range(name)))?;
    // The runtime's limits (`LockOptions::MAX_TTL`, `LockOptions::MAX_WAIT`), checked here so
    // that an out-of-range literal fails at compile time instead of on every call.
    let (max, meaning) = match name {
        "ttl_ms" | "hold_at_least_ms" => (MAX_TTL_MS, "7 days, in milliseconds"),
        _ => (MAX_WAIT_MS, "1 hour, in milliseconds"),
    };
    if value > max {
        return Err(syn::Error::new(
            lit.span(),
            diagnostics::int_above_max(name, max, meaning),
        ));
    }
    Ok(value)
}

/// `lockcore::LockOptions::MAX_TTL` in milliseconds.
const MAX_TTL_MS: u64 = 7 * 24 * 3600 * 1000;
/// `lockcore::LockOptions::MAX_WAIT` in milliseconds.
const MAX_WAIT_MS: u64 = 3600 * 1000;

fn boolean(value: &Expr, message: &str) -> syn::Result<bool> {
    match literal(value) {
        Some(Lit::Bool(lit)) => Ok(lit.value),
        _ => Err(syn::Error::new(value.span(), message)),
    }
}

/// The arguments that cannot be given together with `name`.
fn exclusive_with(name: &str) -> &'static [&'static str] {
    match name {
        "key" => &["keys"],
        "keys" => &["key", "permits", "mode"],
        "fallback" => &["on_contended"],
        "on_contended" => &["fallback"],
        "permits" => &["keys", "mode"],
        "mode" => &["keys", "permits"],
        _ => &[],
    }
}

/// `permits = N`: an integer literal ≥ 1 that fits a `u32`.
fn permits(value: &Expr) -> syn::Result<u32> {
    let Some(Lit::Int(lit)) = literal(value) else {
        return Err(syn::Error::new(value.span(), diagnostics::PERMITS_NOT_INT));
    };
    if !matches!(lit.suffix(), "" | "u32") {
        return Err(syn::Error::new(
            lit.span(),
            diagnostics::bad_int_suffix("permits", lit.suffix()).replace("`u64`", "`u32`"),
        ));
    }
    match lit.base10_parse::<u64>() {
        Ok(0) => Err(syn::Error::new(lit.span(), diagnostics::PERMITS_ZERO)),
        Ok(n) => u32::try_from(n)
            .map_err(|_| syn::Error::new(lit.span(), diagnostics::PERMITS_TOO_LARGE)),
        Err(_) => Err(syn::Error::new(lit.span(), diagnostics::PERMITS_TOO_LARGE)),
    }
}

/// `mode = "read"` (a reader's share) or `mode = "write"` (the plain lock: `None`).
fn mode(value: &Expr) -> syn::Result<Option<Share>> {
    match literal(value) {
        Some(Lit::Str(lit)) if lit.value() == "read" => Ok(Some(Share::Read)),
        Some(Lit::Str(lit)) if lit.value() == "write" => Ok(None),
        _ => Err(syn::Error::new(value.span(), diagnostics::MODE_INVALID)),
    }
}

/// `["a:<x>", "b:<y>"]`: at least one string literal.
fn templates(value: &Expr) -> syn::Result<Vec<LitStr>> {
    let Expr::Array(array) = value else {
        return Err(syn::Error::new(value.span(), diagnostics::KEYS_NOT_ARRAY));
    };
    if array.elems.is_empty() {
        return Err(syn::Error::new(value.span(), diagnostics::KEYS_EMPTY));
    }
    let mut errors = Errors::default();
    let lits: Vec<LitStr> = array
        .elems
        .iter()
        .filter_map(|elem| errors.ok(string(elem, diagnostics::KEYS_NOT_ARRAY)))
        .collect();
    errors.finish().map(|()| lits)
}

fn on_contended(value: &Expr) -> syn::Result<OnContended> {
    match literal(value) {
        Some(Lit::Str(lit)) if lit.value() == "error" => Ok(OnContended::Error),
        Some(Lit::Str(lit)) if lit.value() == "skip" => Ok(OnContended::Skip(lit.span())),
        _ => Err(syn::Error::new(
            value.span(),
            diagnostics::ON_CONTENDED_INVALID,
        )),
    }
}

fn fallback(value: &Expr) -> syn::Result<Path> {
    match value {
        Expr::Path(path) if path.attrs.is_empty() && path.qself.is_none() => Ok(path.path.clone()),
        _ => Err(syn::Error::new(
            value.span(),
            diagnostics::FALLBACK_NOT_PATH,
        )),
    }
}

fn on_lost(value: &Expr) -> syn::Result<OnLost> {
    match literal(value) {
        Some(Lit::Str(lit)) if lit.value() == "abort" => Ok(OnLost::Abort),
        Some(Lit::Str(lit)) if lit.value() == "continue" => Ok(OnLost::Continue),
        _ => Err(syn::Error::new(value.span(), diagnostics::ON_LOST_INVALID)),
    }
}

/// `"::my_lockcore"` → a path whose tokens carry the literal's span.
pub(crate) fn crate_path(value: &Expr) -> syn::Result<Path> {
    let lit = string(value, diagnostics::CRATE_NOT_STRING)?;
    lit.parse_with(Path::parse_mod_style)
        .map_err(|_| syn::Error::new(lit.span(), diagnostics::crate_bad_path(&lit.value())))
}

fn guard(value: &Expr) -> syn::Result<Ident> {
    let ident = match value {
        Expr::Path(path) if path.attrs.is_empty() && path.qself.is_none() => path.path.get_ident(),
        _ => None,
    };
    match ident {
        Some(ident)
            if !matches!(
                ident.to_string().as_str(),
                "self" | "Self" | "crate" | "super"
            ) =>
        {
            Ok(ident.clone())
        }
        _ => Err(syn::Error::new(value.span(), diagnostics::GUARD_NOT_IDENT)),
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
