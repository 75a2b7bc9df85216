//! Turns the annotated `async fn` into "render key, acquire, run body, release".
//!
//! The generated code only calls `#krate::__private`; see the crate docs for its shape.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::visit_mut::VisitMut;
use syn::{Attribute, Ident, LitStr, Member, ReturnType, Type};

use crate::args::{Config, OnLost};
use crate::diagnostics::{self, Errors};
use crate::item::{Func, Params};
use crate::template::{self, Segment};

/// The whole macro. It always emits the function: on an error, the original item followed by
/// the errors, so that callers see no follow-on errors.
pub(crate) fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    match expand(args, item.clone()) {
        Ok(expanded) => expanded,
        Err(error) => {
            let errors = error.to_compile_error();
            quote!(#item #errors)
        }
    }
}

fn expand(args: TokenStream, item: TokenStream) -> syn::Result<TokenStream> {
    let (config, func) = both(Config::parse(args), Func::parse_item(item))?;
    let params = Params::of(&func.sig);
    let key = both(
        key_expr(&config.key, &params),
        check_guard(&config, &params),
    );
    let (ret, (key, ())) = both(return_type(&func), key)?;
    Ok(generate(&config, &func, ret, key))
}

/// Both values, or every error of the two.
fn both<A, B>(a: syn::Result<A>, b: syn::Result<B>) -> syn::Result<(A, B)> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(mut a), Err(b)) => {
            a.combine(b);
            Err(a)
        }
    }
}

/// The declared return type of an `async fn`.
fn return_type(func: &Func) -> syn::Result<&Type> {
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        let message = if func.attrs.iter().any(is_test_attr) {
            diagnostics::NOT_ASYNC_UNDER_TEST
        } else {
            diagnostics::NOT_ASYNC
        };
        return Err(syn::Error::new(sig.fn_token.span, message));
    }
    match &sig.output {
        ReturnType::Type(_, ty) => Ok(ty),
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

/// The expression that renders the key: `::std::format!("..", a, self.b.c)`.
///
/// Placeholder expressions carry the key literal's span, so that a missing `Display` impl or
/// field is reported on the key.
fn key_expr(key: &LitStr, params: &Params) -> syn::Result<TokenStream> {
    let span = key.span();
    let segments = template::parse(&key.value()).map_err(|e| syn::Error::new(span, e.message()))?;
    let mut errors = Errors::default();
    let mut reported = Vec::new();
    let mut args = Vec::new();
    for segment in &segments {
        let Segment::Placeholder(path) = segment else {
            continue;
        };
        match placeholder_expr(path, params, span) {
            Ok(arg) => args.push(arg),
            // The same unknown name twice is one error.
            Err(e) if !reported.contains(&e.to_string()) => {
                reported.push(e.to_string());
                errors.push(e);
            }
            Err(_) => {}
        }
    }
    errors.finish()?;
    if args.is_empty() {
        // Literal text only; `<<` has been unescaped by the parser.
        let text: String = segments
            .iter()
            .filter_map(|segment| match segment {
                Segment::Literal(text) => Some(text.as_str()),
                Segment::Placeholder(_) => None,
            })
            .collect();
        let text = LitStr::new(&text, span);
        return Ok(quote_spanned!(span=> ::std::string::String::from(#text)));
    }
    let format = LitStr::new(&template::format_string(&segments), span);
    Ok(quote_spanned!(span=> ::std::format!(#format, #(#args),*)))
}

/// `<a.b.0>` → `a.b.0`, checked against the parameters.
fn placeholder_expr(path: &[String], params: &Params, span: Span) -> syn::Result<TokenStream> {
    let error = |message: String| syn::Error::new(span, message);
    let Some((first, fields)) = path.split_first() else {
        // `template::parse` never yields an empty placeholder.
        return Err(error(diagnostics::TEMPLATE_EMPTY_PLACEHOLDER.to_owned()));
    };
    let root = if first == "self" {
        if !params.receiver {
            return Err(error(diagnostics::SELF_WITHOUT_RECEIVER.to_owned()));
        }
        quote_spanned!(span=> self)
    } else if let Some(param) = params.plain.iter().find(|param| *param == first) {
        let mut param = param.clone();
        param.set_span(span);
        quote!(#param)
    } else if params.destructured.iter().any(|name| name == first) {
        return Err(error(diagnostics::destructured_param(first)));
    } else {
        return Err(error(diagnostics::unknown_param(
            first,
            &params.available(),
        )));
    };
    // Fields resolve like the user's own code but sit at the key literal. Their span is marked
    // as macro-made so that rustc doesn't suggest rewriting the literal into a field name.
    let field_span = Span::mixed_site().located_at(span);
    let fields = fields
        .iter()
        .map(|field| {
            let member = syn::parse_str::<Member>(field)
                .map_err(|_| error(diagnostics::template_bad_field(field, &path.join("."))))?;
            Ok(match member {
                Member::Named(mut ident) => {
                    ident.set_span(field_span);
                    Member::Named(ident)
                }
                Member::Unnamed(index) => Member::Unnamed(syn::Index {
                    index: index.index,
                    span: field_span,
                }),
            })
        })
        .collect::<syn::Result<Vec<_>>>()?;
    Ok(quote!(#root #(.#fields)*))
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

fn generate(config: &Config, func: &Func, ret: &Type, key: TokenStream) -> TokenStream {
    let Func {
        attrs,
        vis,
        sig,
        inner_attrs,
        stmts,
    } = func;
    let krate = &config.krate;
    let private = quote!(#krate::__private);

    // Locals are `mixed_site`: the body can neither see nor shadow them.
    let local = |name: &str| Ident::new(name, Span::mixed_site());
    let key_var = local("__lock_key");
    let manager_var = local("__lock_manager");
    let options_var = local("__lock_options");
    let guard_var = local("__lock_guard");
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
        None => quote! {
            match #private::default_manager() {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#error) => return #from_lock_error(#error),
            }
        },
    };
    // The template as written: holder metadata and metric labels (never the rendered key).
    let template = LitStr::new(&config.key.value(), Span::call_site());
    let ttl = millis(config.ttl_ms);
    let wait = millis(config.wait_ms);
    let watchdog = config.watchdog;
    let on_lost = match config.on_lost {
        OnLost::Abort => quote!(Abort),
        OnLost::Continue => quote!(Continue),
    };
    let guard_binding = config
        .guard
        .as_ref()
        .map(|guard| quote!(let #guard: &#krate::LockGuard = &#guard_var;));
    // An unreachable early return of the declared type pins the body's type, so that type
    // errors land on the user's code rather than on the generated code.
    let pin_return_type = quote_spanned! {ret_span=>
        #[allow(unreachable_code, clippy::diverging_sub_expression, clippy::empty_loop)]
        if false {
            let #ret_var: #ret = loop {};
            return #ret_var;
        }
    };

    quote! {
        #(#attrs)*
        #vis #sig {
            #(#inner_attrs)*
            let #key_var: ::std::string::String = #key;
            let #manager_var: #krate::LockManager = #manager;
            let #options_var = #private::with_key_template(
                #private::options(&#manager_var, #ttl, #wait, #watchdog),
                #template,
            );
            let #guard_var = match #private::acquire(&#manager_var, &#key_var, &#options_var).await {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#error) => return #from_lock_error(#error),
            };
            #guard_binding
            let #outcome_var = #private::run_body(
                &#guard_var,
                #private::OnLost::#on_lost,
                async move {
                    #pin_return_type
                    #stmts
                },
            )
            .await;
            match #private::finish(#guard_var, #outcome_var).await {
                ::core::result::Result::Ok(#value) => #value,
                ::core::result::Result::Err(#error) => #from_lock_error(#error),
            }
        }
    }
}

/// `Some(10000u64)` or `None`.
fn millis(ms: Option<u64>) -> TokenStream {
    match ms {
        // The literal keeps the macro's span: lints about how the user wrote theirs (`10_000`)
        // must not fire on the generated `10000u64`.
        Some(ms) => {
            let lit = proc_macro2::Literal::u64_suffixed(ms);
            quote!(::core::option::Option::Some(#lit))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// `impl Trait` → `_`, so the type can annotate a `let` and name a `<T as Trait>` path.
fn erase_impl_trait(ty: &Type) -> Type {
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
