//! Turns the annotated `async fn` into "render key, acquire, run body, release".
//!
//! The generated code only calls `#krate::__private`; see the crate docs for its shape.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::visit_mut::VisitMut;
use syn::{Attribute, Ident, ReturnType, Type};

use crate::args::{Config, OnContended, OnLost, Share};
use crate::diagnostics;
use crate::item::{Func, Params};
use crate::render::keys_expr;
use crate::template::{self, Segment};

/// The whole macro. It always emits the function: on an error, the original item followed by
/// the errors, so that callers see no follow-on errors.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    always_emit(expand, args, item)
}

/// `expand(args, item)`, or on an error the original item followed by the errors.
pub(crate) fn always_emit(
    expand: fn(TokenStream, TokenStream) -> syn::Result<TokenStream>,
    args: TokenStream,
    item: TokenStream,
) -> TokenStream {
    match expand(args, item.clone()) {
        Ok(expanded) => expanded,
        Err(error) => {
            let errors = error.to_compile_error();
            // A parameter only the key used would now look unused: no follow-on warnings.
            quote!(#[allow(unused_variables)] #item #errors)
        }
    }
}

fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let (config, func) = both(Config::parse(args), Func::parse_item(item))?;
    let params = Params::of(&func.sig);
    let keys = both(
        keys_expr(&config.keys, &params),
        both(
            check_guard(&config, &params),
            check_fallback(&config, &params),
        ),
    );
    let (ret, (keys, _)) = both(return_type(&func), keys)?;
    Ok(generate(&config, &func, &params, &ret, keys))
}

/// Both values, or every error of the two.
pub(crate) fn both<A, B>(a: syn::Result<A>, b: syn::Result<B>) -> syn::Result<(A, B)> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(mut a), Err(b)) => {
            a.combine(b);
            Err(a)
        }
    }
}

/// The type the locked body returns: the declared return type of an `async fn`, or `R` of the
/// `#[async_trait]` shape's `Future<Output = R>`.
pub(crate) fn return_type(func: &Func) -> syn::Result<Type> {
    let sig = &func.sig;
    if let Some(boxed) = &func.boxed {
        return Ok(boxed.output.clone());
    }
    if sig.asyncness.is_none() {
        let message = if func.attrs.iter().any(is_test_attr) {
            diagnostics::NOT_ASYNC_UNDER_TEST
        } else {
            diagnostics::NOT_ASYNC
        };
        return Err(syn::Error::new(sig.fn_token.span, message));
    }
    match &sig.output {
        ReturnType::Type(_, ty) => Ok((**ty).clone()),
        ReturnType::Default => Err(syn::Error::new(
            sig.ident.span(),
            diagnostics::MISSING_RETURN_TYPE,
        )),
    }
}

/// `#[test]`, `#[tokio::test]`, `#[::core::prelude::v1::test]`, ...
fn is_test_attr(attr: &Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == "test")
}

/// `guard = x` must not shadow a parameter the body uses.
fn check_guard(config: &Config, params: &Params) -> syn::Result<()> {
    match &config.guard {
        Some(guard) if params.plain.contains(guard) => Err(syn::Error::new(
            guard.span(),
            diagnostics::guard_shadows_param(&guard.to_string()),
        )),
        _ => Ok(()),
    }
}

/// `fallback = path` passes every parameter on, so none may be destructured.
fn check_fallback(config: &Config, params: &Params) -> syn::Result<()> {
    let OnContended::Fallback(_) = &config.on_contended else {
        return Ok(());
    };
    match params.destructured.first() {
        Some(name) => Err(syn::Error::new(
            name.span(),
            diagnostics::fallback_destructured(&name.to_string()),
        )),
        None => Ok(()),
    }
}

fn generate(
    config: &Config,
    func: &Func,
    params: &Params,
    ret: &Type,
    keys: TokenStream,
) -> TokenStream {
    let Func {
        attrs,
        vis,
        sig,
        inner_attrs,
        stmts,
        brace,
        boxed,
    } = func;
    match boxed {
        None => {
            let wrapper = wrapper(config, params, ret, keys, brace, stmts);
            quote! {
                #(#attrs)*
                #vis #sig {
                    #(#inner_attrs)*
                    #wrapper
                }
            }
        }
        Some(boxed) => {
            let stmts = quiet_rebindings(&boxed.stmts, &key_params(config));
            let wrapper = wrapper(config, params, ret, keys, &boxed.brace, &stmts);
            let before = &boxed.before;
            let async_attrs = &boxed.attrs;
            quote! {
                #(#attrs)*
                #vis #sig {
                    #(#inner_attrs)*
                    #before
                    ::std::boxed::Box::pin(#(#async_attrs)* async move { #wrapper })
                }
            }
        }
    }
}

/// The parameter names the key templates use.
fn key_params(config: &Config) -> Vec<String> {
    config
        .keys
        .iter()
        .filter_map(|key| template::parse(&key.value()).ok())
        .flatten()
        .filter_map(|segment| match segment {
            Segment::Placeholder(path) => path.into_iter().next(),
            Segment::Literal(_) => None,
        })
        .collect()
}

/// async-trait moves each parameter into its future with `let x = x;`. A parameter that only
/// the key uses is read before that, so its rebinding is allowed to go unused.
fn quiet_rebindings(stmts: &[syn::Stmt], used: &[String]) -> TokenStream {
    let rebinds_used = |stmt: &syn::Stmt| {
        let syn::Stmt::Local(local) = stmt else {
            return false;
        };
        let (syn::Pat::Ident(pat), Some(init)) = (&local.pat, &local.init) else {
            return false;
        };
        let syn::Expr::Path(value) = &*init.expr else {
            return false;
        };
        value.path.is_ident(&pat.ident) && used.iter().any(|name| pat.ident == name)
    };
    stmts
        .iter()
        .map(|stmt| {
            if rebinds_used(stmt) {
                quote!(#[allow(unused_variables)] #stmt)
            } else {
                quote!(#stmt)
            }
        })
        .collect()
}

/// The statements that lock, run `stmts` (in the user's `brace`) and release.
fn wrapper(
    config: &Config,
    params: &Params,
    ret: &Type,
    keys: TokenStream,
    brace: &syn::token::Brace,
    stmts: &TokenStream,
) -> TokenStream {
    let krate = &config.krate;
    let private = quote!(#krate::__private);

    // Locals are `mixed_site`: the body can neither see nor shadow them.
    let local = |name: &str| Ident::new(name, Span::mixed_site());
    let lock_var = local("__lock");
    let outcome_var = local("__lock_outcome");
    let ret_var = local("__lock_ret");
    let value = local("__lock_value");
    let error = local("__lock_error");

    // Spanned at the return type: a return type without `E: From<LockError>` is reported there.
    let ret_span = ret.span();
    let ret = erase_impl_trait(ret);
    let from_lock_error =
        quote_spanned!(ret_span=> <#ret as #private::LockResult>::from_lock_error);

    let manager = match &config.manager {
        Some(expr) => quote_spanned!(expr.span()=> #private::manager(&(#expr))),
        None => quote!(#private::default_manager()),
    };
    let option = |value: Option<TokenStream>| match value {
        Some(value) => quote!(::core::option::Option::Some(#value)),
        None => quote!(::core::option::Option::None),
    };
    let ttl_ms = option(config.ttl_ms.map(millis));
    let wait_ms = option(config.wait_ms.map(millis));
    let watchdog = option(config.watchdog.map(|on| quote!(#on)));
    let reentrant = config.reentrant;
    // The templates as written: holder metadata and metric labels (never the rendered key).
    let templates: Vec<String> = config.keys.iter().map(syn::LitStr::value).collect();
    let key_template = syn::LitStr::new(&templates.join(", "), Span::call_site());
    let on_lost = match config.on_lost {
        OnLost::Abort => quote!(Abort),
        OnLost::Continue => quote!(Continue),
    };
    let contended = match &config.on_contended {
        OnContended::Error => quote! {
            ::core::result::Result::Err(#error) => return #from_lock_error(#error),
        },
        // Spanned at `"skip"`: a return type that cannot be skipped is reported there.
        OnContended::Skip(span) => {
            // At `"skip"`: a return type that cannot be skipped is reported there.
            let skip = respan(quote!(#private::skip(#error, #key_template)), *span);
            quote! {
                ::core::result::Result::Err(#error) => return #skip,
            }
        }
        OnContended::Fallback(path) => {
            let receiver = params.receiver.then(|| quote!(self,));
            let args = &params.plain;
            // Every token at the path: a fallback with other parameters or another return
            // type is reported there.
            let call = respan(
                quote! {
                    {
                        #[allow(unused_imports)]
                        use #private::FallbackFuture as _;
                        return #private::Fallback(#path(#receiver #(#args),*)).resolve().await;
                    }
                },
                path.span(),
            );
            quote! {
                ::core::result::Result::Err(#error) if #private::fallback(&#error, #key_template) => #call
                ::core::result::Result::Err(#error) => return #from_lock_error(#error),
            }
        }
    };
    let guard_binding = config.guard.as_ref().map(|guard| {
        if config.multi {
            quote!(let #guard: &#krate::MultiGuard = #lock_var.guards();)
        } else {
            quote!(let #guard: &#krate::LockGuard = #lock_var.guard();)
        }
    });
    let body = pinned_body(&ret, ret_span, brace, stmts, &ret_var);

    // A share (`permits = N`, `mode = "read"`) is one more argument to another entry point, and
    // only a job lock's expansion names its minimum hold; the plain lock's stays as it was.
    let (lock_fn, hold, share) = match (config.share, config.hold_at_least_ms) {
        (Some(Share::Permits(n)), _) => (
            quote!(lock_shared),
            TokenStream::new(),
            Some(quote!(#private::Share::Permits(#n),)),
        ),
        (Some(Share::Read), _) => (
            quote!(lock_shared),
            TokenStream::new(),
            Some(quote!(#private::Share::Read,)),
        ),
        (None, Some(ms)) => {
            let ms = millis(ms);
            (quote!(lock_job), quote!(#ms,), None)
        }
        (None, None) => (quote!(lock), TokenStream::new(), None),
    };
    quote! {
        let #lock_var = match #private::#lock_fn(
            #manager,
            #keys,
            #hold
            #private::Settings {
                ttl_ms: #ttl_ms,
                wait_ms: #wait_ms,
                watchdog: #watchdog,
                reentrant: #reentrant,
                on_lost: #private::OnLost::#on_lost,
                key_template: #key_template,
            },
            #share
        )
        .await
        {
            ::core::result::Result::Ok(#value) => #value,
            #contended
        };
        #guard_binding
        let #outcome_var = #lock_var.run(async move #body).await;
        match #lock_var.finish(#outcome_var).await {
            ::core::result::Result::Ok(#value) => #value,
            ::core::result::Result::Err(#error) => #from_lock_error(#error),
        }
    }
}

/// The body's block for `async move #body`: the user's braces around the user's statements,
/// after an unreachable early return of the declared type `ret` (at `ret_span`). It pins the
/// block's type, so that type errors land on the user's code rather than on the generated code.
pub(crate) fn pinned_body(
    ret: &Type,
    ret_span: Span,
    brace: &syn::token::Brace,
    stmts: &TokenStream,
    ret_var: &Ident,
) -> TokenStream {
    let pin_return_type = quote_spanned! {ret_span=>
        #[allow(unreachable_code, clippy::diverging_sub_expression, clippy::empty_loop)]
        if false {
            let #ret_var: #ret = loop {};
            return #ret_var;
        }
    };
    let mut body = TokenStream::new();
    brace.surround(&mut body, |body| {
        body.extend(pin_return_type);
        body.extend(stmts.clone());
    });
    body
}

/// `tokens` located at `span` (groups included); names keep resolving as before (hygiene).
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let proc_macro2::TokenTree::Group(group) = &token {
                let mut respanned =
                    proc_macro2::Group::new(group.delimiter(), respan(group.stream(), span));
                respanned.set_span(group.span().located_at(span));
                token = proc_macro2::TokenTree::Group(respanned);
            } else {
                token.set_span(token.span().located_at(span));
            }
            token
        })
        .collect()
}

/// `10000u64`.
pub(crate) fn millis(ms: u64) -> TokenStream {
    // The literal keeps the macro's span: lints about how the user wrote theirs (`10_000`)
    // must not fire on the generated `10000u64`.
    let lit = proc_macro2::Literal::u64_suffixed(ms);
    quote!(#lit)
}

/// `impl Trait` → `_`, so the type can annotate a `let` and name a `<T as Trait>` path.
pub(crate) fn erase_impl_trait(ty: &Type) -> Type {
    struct Eraser;
    impl VisitMut for Eraser {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(impl_trait) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: syn::Token![_](impl_trait.span()),
                });
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    let mut ty = ty.clone();
    Eraser.visit_type_mut(&mut ty);
    ty
}
