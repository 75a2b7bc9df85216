//! The annotated function, and the parameter names a key template may use.
//!
//! The item is parsed as a full [`ItemFn`] first. When that fails (half-typed code in an IDE), a
//! fallback parses only the attributes, visibility and signature and keeps the body as tokens,
//! so the expansion, and completion inside the body, still work.

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, FnArg, Ident, ItemFn, Pat, Signature, Token, Visibility, token};

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
                Ok(Func {
                    attrs: outer,
                    vis: item.vis,
                    sig: item.sig,
                    inner_attrs: inner,
                    stmts: quote::quote!(#(#stmts)*),
                    brace: item.block.brace_token,
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
        })
    }
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
