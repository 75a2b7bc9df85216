//! `#[idempotent(key = "order:req:<request_id>", ttl_ms = 86_400_000)]`: the body runs once per
//! rendered key; later calls return the stored `Ok` value. The generated code calls
//! `#krate::__private::idempotent`, which calls `LockManager::idempotent`.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::Parser as _;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned as _;
use syn::{Expr, LitStr, Path, ReturnType, Token};

use crate::args::{Arg, crate_path, millis, string};
use crate::diagnostics::{self, Errors};
use crate::expand::{always_emit, both, erase_impl_trait, millis as millis_lit, pinned_body};
use crate::item::{Func, Params};
use crate::render::key_expr;

/// The argument names `#[idempotent]` accepts.
const ARG_NAMES: &[&str] = &[
    "key",
    "ttl_ms",
    "wait_ms",
    "manager",
    "crate",
    "fingerprint",
];

struct Config {
    key: LitStr,
    ttl_ms: u64,
    wait_ms: Option<u64>,
    manager: Option<Expr>,
    krate: Path,
    fingerprint: Option<Expr>,
}

/// The whole macro; on an error the original item is emitted with the errors.
pub(crate) fn idempotent(args: TokenStream, item: TokenStream) -> TokenStream {
    always_emit(expand, args, item)
}

fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let (config, func) = both(parse(args), Func::parse_item(item))?;
    let params = Params::of(&func.sig);
    let (key, ret) = both(key_expr(&config.key, &params), return_type(&func))?;
    Ok(generate(&config, &func, &ret, key))
}

fn parse(args: TokenStream) -> syn::Result<Config> {
    let args = Punctuated::<Arg, Token![,]>::parse_terminated.parse2(args)?;
    let mut errors = Errors::default();
    let mut seen: Vec<String> = Vec::new();
    let (mut key, mut ttl_ms, mut wait_ms, mut manager, mut fingerprint) =
        (None, None, None, None, None);
    let mut krate: Path = syn::parse_quote!(::lockcore);
    for Arg { name, value } in args {
        let name_str = name.to_string();
        if !ARG_NAMES.contains(&name_str.as_str()) {
            errors.error(
                name.span(),
                diagnostics::idempotent_unknown_arg(&name_str, ARG_NAMES),
            );
            continue;
        }
        if seen.contains(&name_str) {
            errors.error(name.span(), diagnostics::duplicate_arg(&name_str));
            continue;
        }
        let result = match name_str.as_str() {
            "key" => string(&value, diagnostics::KEY_NOT_STRING).map(|lit| key = Some(lit)),
            "ttl_ms" => millis(&value, "ttl_ms").and_then(|ms| {
                if ms == 0 {
                    return Err(syn::Error::new(value.span(), diagnostics::TTL_ZERO));
                }
                ttl_ms = Some(ms);
                Ok(())
            }),
            "wait_ms" => millis(&value, "wait_ms").map(|ms| wait_ms = Some(ms)),
            "manager" => {
                manager = Some(value);
                Ok(())
            }
            "crate" => crate_path(&value).map(|path| krate = path),
            // Checked against `ARG_NAMES` above, so this is `fingerprint`.
            _ => {
                fingerprint = Some(value);
                Ok(())
            }
        };
        seen.push(name_str);
        errors.ok(result);
    }
    let has = |name: &str| seen.iter().any(|seen| seen == name);
    if key.is_none() && !has("key") {
        errors.error(Span::call_site(), diagnostics::IDEMPOTENT_MISSING_KEY);
    }
    if ttl_ms.is_none() && !has("ttl_ms") {
        errors.error(Span::call_site(), diagnostics::IDEMPOTENT_MISSING_TTL);
    }
    errors.finish()?;
    match (key, ttl_ms) {
        (Some(key), Some(ttl_ms)) => Ok(Config {
            key,
            ttl_ms,
            wait_ms,
            manager,
            krate,
            fingerprint,
        }),
        // Both were reported above.
        _ => Err(syn::Error::new(
            Span::call_site(),
            diagnostics::IDEMPOTENT_MISSING_KEY,
        )),
    }
}

fn return_type(func: &Func) -> syn::Result<syn::Type> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            diagnostics::IDEMPOTENT_NOT_ASYNC,
        ));
    }
    match &sig.output {
        ReturnType::Type(_, ty) => Ok((**ty).clone()),
        ReturnType::Default => Err(syn::Error::new(
            sig.ident.span(),
            diagnostics::IDEMPOTENT_RETURN_TYPE,
        )),
    }
}

fn generate(config: &Config, func: &Func, ret: &syn::Type, key: TokenStream) -> TokenStream {
    let Func {
        attrs,
        vis,
        sig,
        inner_attrs,
        stmts,
        brace,
        ..
    } = func;
    let krate = &config.krate;
    let private = quote!(#krate::__private);
    let local = |name: &str| syn::Ident::new(name, Span::mixed_site());
    let (value, error, ret_var) = (
        local("__idem_value"),
        local("__idem_error"),
        local("__idem_ret"),
    );
    let ret_span = ret.span();
    let ret = erase_impl_trait(ret);
    let from_lock_error =
        quote_spanned!(ret_span=> <#ret as #private::LockResult>::from_lock_error);
    let manager = match &config.manager {
        Some(expr) => quote_spanned!(expr.span()=> #private::manager(&(#expr))),
        None => quote!(#private::default_manager()),
    };
    let ttl_ms = millis_lit(config.ttl_ms);
    let wait_ms = match config.wait_ms {
        Some(ms) => {
            let ms = millis_lit(ms);
            quote!(::core::option::Option::Some(#ms))
        }
        None => quote!(::core::option::Option::None),
    };
    let fingerprint = match &config.fingerprint {
        Some(expr) => quote_spanned!(expr.span()=>
            ::core::option::Option::Some(::std::string::ToString::to_string(&(#expr)))),
        None => quote!(::core::option::Option::None),
    };
    let body = pinned_body(&ret, ret_span, brace, stmts, &ret_var);
    quote! {
        #(#attrs)*
        #vis #sig {
            #(#inner_attrs)*
            match #private::idempotent(
                #manager,
                #key,
                #private::Record {
                    ttl_ms: #ttl_ms,
                    wait_ms: #wait_ms,
                    fingerprint: #fingerprint,
                },
                async move #body,
            )
            .await
            {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#error) => #from_lock_error(#error),
            }
        }
    }
}
