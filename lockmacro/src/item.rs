//! The annotated function, and the parameter names a key template may use.
//!
//! The item is parsed as a full [`ItemFn`] first. When that fails (half-typed code in an IDE), a
//! fallback parses only the attributes, visibility and signature and keeps the body as tokens,
//! so the expansion, and completion inside the body, still work.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{
    Attribute, Expr, FnArg, GenericArgument, Ident, ItemFn, Pat, PathArguments, ReturnType,
    Signature, Stmt, Token, Type, TypeParamBound, Visibility, token,
};

use crate::diagnostics;

/// An `fn` item split into the parts the expansion re-emits.
pub(crate) struct Func {
    /// Outer attributes, docs included, as written.
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// The body's leading `#![..]` attributes; they must stay first in the new body.
    pub(crate) inner_attrs: Vec<Attribute>,
    /// The body's statements, without the braces.
    pub(crate) stmts: TokenStream,
    /// The body's own braces: the generated inner block reuses them, so that rustc reports a
    /// type error of the block (a trailing `;`) inside the body, not at the attribute.
    pub(crate) brace: token::Brace,
    /// The `#[async_trait]` shape: a plain `fn` whose body ends in `Box::pin(async move { .. })`.
    pub(crate) boxed: Option<Boxed>,
}

/// A fn as `#[async_trait]` writes it: `fn f(..) -> Pin<Box<dyn Future<Output = R> + Send + 'a>>`
/// whose last statement is `Box::pin(async move { .. })` (tracing-attributes' `AsyncInfo`
/// recognises the same shape). The lock is taken inside the boxed future.
pub(crate) struct Boxed {
    /// The statements before `Box::pin(..)`.
    pub(crate) before: TokenStream,
    /// Attributes on the `async move` block.
    pub(crate) attrs: Vec<Attribute>,
    /// The `async` block's statements (the body to lock) and braces.
    pub(crate) stmts: Vec<Stmt>,
    pub(crate) brace: token::Brace,
    /// `R` of `Future<Output = R>` in the return type.
    pub(crate) output: Type,
}

impl Func {
    pub(crate) fn parse_item(item: TokenStream) -> syn::Result<Func> {
        match syn::parse2::<ItemFn>(item.clone()) {
            Ok(item) => {
                let (inner, outer) = item
                    .attrs
                    .into_iter()
                    .partition::<Vec<_>, _>(|attr| matches!(attr.style, syn::AttrStyle::Inner(_)));
                let stmts = &item.block.stmts;
                let boxed = boxed(&item.sig, stmts);
                Ok(Func {
                    attrs: outer,
                    vis: item.vis,
                    sig: item.sig,
                    inner_attrs: inner,
                    stmts: quote::quote!(#(#stmts)*),
                    brace: item.block.brace_token,
                    boxed,
                })
            }
            Err(_) => syn::parse2::<Func>(item),
        }
    }
}

/// The fallback parse: the body stays as raw tokens.
impl Parse for Func {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let not_a_fn = |e: syn::Error| syn::Error::new(e.span(), diagnostics::NOT_A_FN);
        let attrs = input.call(Attribute::parse_outer)?;
        // `impl ..` / `trait ..` (e.g. `#[distributed_lock]` written above `#[async_trait]`):
        // say where the attribute goes.
        let ahead = input.fork();
        let _: Visibility = ahead.parse()?;
        let _: Option<Token![unsafe]> = ahead.parse()?;
        if ahead.peek(Token![impl]) || ahead.peek(Token![trait]) {
            return Err(syn::Error::new(ahead.span(), diagnostics::ON_IMPL));
        }
        let vis = input.parse().map_err(not_a_fn)?;
        let sig = input.parse().map_err(not_a_fn)?;
        if input.peek(Token![;]) {
            let semi = input.parse::<Token![;]>()?;
            return Err(syn::Error::new(semi.span, diagnostics::NO_BODY));
        }
        let body;
        let brace = syn::braced!(body in input);
        Ok(Func {
            attrs,
            vis,
            sig,
            inner_attrs: body.call(Attribute::parse_inner)?,
            stmts: body.parse()?,
            brace,
            boxed: None,
        })
    }
}

/// The `#[async_trait]` shape of a plain `fn`, if it has it.
fn boxed(sig: &Signature, stmts: &[Stmt]) -> Option<Boxed> {
    if sig.asyncness.is_some() {
        return None;
    }
    let ReturnType::Type(_, ret) = &sig.output else {
        return None;
    };
    let output = future_output(ret)?;
    let (last, before) = stmts.split_last()?;
    let Stmt::Expr(Expr::Call(call), None) = last else {
        return None;
    };
    let Expr::Path(func) = &*call.func else {
        return None;
    };
    let is_box_pin = {
        let segments: Vec<String> = func
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        segments.ends_with(&["Box".to_owned(), "pin".to_owned()])
    };
    let (Some(Expr::Async(block)), 1, true) = (call.args.first(), call.args.len(), is_box_pin)
    else {
        return None;
    };
    block.capture?;
    Some(Boxed {
        before: quote::quote!(#(#before)*),
        attrs: block.attrs.clone(),
        stmts: block.block.stmts.clone(),
        brace: block.block.brace_token,
        output,
    })
}

/// `R` in `Pin<Box<dyn Future<Output = R> + ..>>` (any path ending in `Future`).
fn future_output(ty: &Type) -> Option<Type> {
    let bounds = match ty {
        Type::TraitObject(object) => &object.bounds,
        Type::ImplTrait(imp) => &imp.bounds,
        Type::Paren(paren) => return future_output(&paren.elem),
        Type::Group(group) => return future_output(&group.elem),
        Type::Path(path) => {
            // `Pin<..>`, `Box<..>`, `core::pin::Pin<..>`: look into the last type argument.
            let last = path.path.segments.last()?;
            let PathArguments::AngleBracketed(args) = &last.arguments else {
                return None;
            };
            return args.args.iter().find_map(|arg| match arg {
                GenericArgument::Type(ty) => future_output(ty),
                _ => None,
            });
        }
        _ => return None,
    };
    bounds.iter().find_map(|bound| {
        let TypeParamBound::Trait(bound) = bound else {
            return None;
        };
        let last = bound.path.segments.last()?;
        if last.ident != "Future" {
            return None;
        }
        let PathArguments::AngleBracketed(args) = &last.arguments else {
            return None;
        };
        args.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" => Some(assoc.ty.clone()),
            _ => None,
        })
    })
}

/// The names a key template may start a placeholder with.
pub(crate) struct Params {
    /// The function has a `self` receiver, in any form.
    pub(crate) receiver: bool,
    /// Parameters bound by a plain identifier pattern (`x: T`, `mut x: T`), in order.
    pub(crate) plain: Vec<Ident>,
    /// Names bound inside destructuring patterns (`(a, b): (u32, u32)`).
    pub(crate) destructured: Vec<Ident>,
}

impl Params {
    pub(crate) fn of(sig: &Signature) -> Params {
        let mut params = Params {
            receiver: false,
            plain: Vec::new(),
            destructured: Vec::new(),
        };
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => params.receiver = true,
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(pat) => {
                        params.plain.push(pat.ident.clone());
                        if let Some((_, sub)) = &pat.subpat {
                            bindings(sub, &mut params.destructured);
                        }
                    }
                    pat => bindings(pat, &mut params.destructured),
                },
            }
        }
        params
    }

    /// Every name a placeholder may start with, for the "available" list.
    pub(crate) fn available(&self) -> Vec<String> {
        let receiver = self.receiver.then(|| "self".to_owned());
        receiver
            .into_iter()
            .chain(self.plain.iter().map(ToString::to_string))
            .collect()
    }
}

/// Every identifier `pat` binds.
fn bindings(pat: &Pat, out: &mut Vec<Ident>) {
    match pat {
        Pat::Ident(pat) => {
            out.push(pat.ident.clone());
            if let Some((_, sub)) = &pat.subpat {
                bindings(sub, out);
            }
        }
        Pat::Reference(pat) => bindings(&pat.pat, out),
        Pat::Paren(pat) => bindings(&pat.pat, out),
        Pat::Type(pat) => bindings(&pat.pat, out),
        Pat::Tuple(pat) => pat.elems.iter().for_each(|p| bindings(p, out)),
        Pat::TupleStruct(pat) => pat.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Slice(pat) => pat.elems.iter().for_each(|p| bindings(p, out)),
        Pat::Or(pat) => pat.cases.iter().for_each(|p| bindings(p, out)),
        Pat::Struct(pat) => pat.fields.iter().for_each(|f| bindings(&f.pat, out)),
        _ => {}
    }
}
