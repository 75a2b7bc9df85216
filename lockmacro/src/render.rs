//! Key templates rendered into expressions: `"o:<self.tenant>:<id>"` →
//! `::std::format!("o:{}:{}", self.tenant, id)`, with every placeholder checked against the
//! function's parameters.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::{LitStr, Member};

use crate::diagnostics::{self, Errors};
use crate::item::Params;
use crate::template::{self, Segment};

/// Every key template rendered: `[::std::format!(..), ..]`.
pub(crate) fn keys_expr(templates: &[LitStr], params: &Params) -> syn::Result<TokenStream> {
    let mut errors = Errors::default();
    let keys: Vec<TokenStream> = templates
        .iter()
        .filter_map(|template| errors.ok(key_expr(template, params)))
        .collect();
    errors.finish()?;
    Ok(quote!([#(#keys),*]))
}

/// The expression that renders the key: `::std::format!("..", a, self.b.c)`.
///
/// Placeholder expressions are located at the key literal, so that a missing `Display` impl or
/// field is reported on the key; the parameter keeps its own hygiene.
pub(crate) fn key_expr(key: &LitStr, params: &Params) -> syn::Result<TokenStream> {
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
        // The parameter's own hygiene, at the key literal: a template written inside a
        // `macro_rules!` body still names the caller's parameter, and errors point at the key.
        let mut param = param.clone();
        param.set_span(param.span().located_at(span));
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
