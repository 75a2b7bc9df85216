//! Expansion snapshots and diagnostics of the whole macro.
//!
//! Each snapshot expands a `quote!`d function, formats it with prettyplease and compares it with
//! `tests/expand/NAME.expanded.rs`. Run with `LOCKMACRO_BLESS=1` to write the golden files after
//! a deliberate change, then review and commit them.

use std::path::PathBuf;

use proc_macro2::TokenStream;
use quote::quote;

use crate::expand::distributed_lock;

fn pretty(tokens: TokenStream) -> String {
    match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        Err(e) => panic!("the expansion does not parse as a file: {e}\n{tokens}"),
    }
}

pub(crate) fn snapshot(name: &str, args: TokenStream, item: TokenStream) {
    snapshot_expansion(name, distributed_lock(args, item));
}

/// Compares the prettyplease form of `expansion` with `tests/expand/NAME.expanded.rs`.
pub(crate) fn snapshot_expansion(name: &str, expansion: TokenStream) {
    let actual = pretty(expansion);
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "expand"]
        .iter()
        .collect::<PathBuf>()
        .join(format!("{name}.expanded.rs"));
    if std::env::var_os("LOCKMACRO_BLESS").is_some_and(|v| v == "1") {
        if let Err(e) = std::fs::write(&path, &actual) {
            panic!("cannot write {}: {e}", path.display());
        }
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}\nrun with LOCKMACRO_BLESS=1 to create it",
            path.display()
        )
    });
    assert!(
        expected == actual,
        "expansion of `{name}` differs from {}\n\
         run with LOCKMACRO_BLESS=1 to update it after a deliberate change\n\
         --- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

/// The `compile_error!` messages of an expansion, in order.
fn errors(args: TokenStream, item: TokenStream) -> Vec<String> {
    let file = match syn::parse2::<syn::File>(distributed_lock(args, item)) {
        Ok(file) => file,
        Err(e) => panic!("the expansion does not parse as a file: {e}"),
    };
    file.items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Macro(m)
                if m.mac
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "compile_error") =>
            {
                syn::parse2::<syn::LitStr>(m.mac.tokens.clone())
                    .ok()
                    .map(|lit| lit.value())
            }
            _ => None,
        })
        .collect()
}

fn one_error(args: TokenStream, item: TokenStream) -> String {
    let messages = errors(args, item);
    assert_eq!(
        messages.len(),
        1,
        "expected exactly one error: {messages:?}"
    );
    messages.into_iter().next().unwrap_or_default()
}

// ---- snapshots -------------------------------------------------------------------------------

#[test]
fn free_fn() {
    snapshot(
        "free_fn",
        quote!(key = "order:lock:product:<product_id>", ttl_ms = 10000),
        quote! {
            /// Creates an order.
            #[must_use]
            pub(crate) async fn create_order(product_id: u64, user_id: u64) -> Result<OrderId, AppError> {
                let stock = load_stock(product_id).await?;
                place_order(stock, user_id).await
            }
        },
    );
}

#[test]
fn method_with_self_field() {
    snapshot(
        "method_self",
        quote!(
            key = "o:<self.tenant>:<id>",
            manager = self.locks,
            wait_ms = 0,
            watchdog = false,
            on_lost = "continue",
            guard = lock,
        ),
        quote! {
            async fn place(&self, id: u64) -> Result<(), AppError> {
                tracing::info!(key = lock.key(), "placing");
                self.place_inner(id).await
            }
        },
    );
}

#[test]
fn generic_fn_with_where_clause() {
    snapshot(
        "generic_where",
        quote!(key = "job:<job.id.0>", crate = "::my_locks"),
        quote! {
            pub async fn run<'a, J: Job + 'a, F>(job: &'a J, done: impl FnOnce(u64) -> F) -> Result<impl Display + 'a, J::Error>
            where
                F: Future<Output = ()> + Send,
            {
                #![allow(clippy::let_underscore_future)]
                let _ = done(1);
                job.run().await
            }
        },
    );
}

#[test]
fn hash_tag_key() {
    snapshot(
        "hash_tag",
        quote!(key = "{user:<id>}:cart<<v2>"),
        quote! {
            async fn add_to_cart(id: UserId, item: Item) -> Result<Cart, Error> {
                cart(id).add(item).await
            }
        },
    );
}

#[test]
fn literal_key_needs_no_format() {
    let expanded = pretty(distributed_lock(
        quote!(key = "maintenance"),
        quote!(
            async fn f() -> Result<(), E> {
                Ok(())
            }
        ),
    ));
    assert!(
        expanded.contains(r#"::std::string::String::from("maintenance")"#),
        "{expanded}"
    );
}

// ---- diagnostics -----------------------------------------------------------------------------

fn item() -> TokenStream {
    quote!(
        async fn f(product_id: u64, user_id: u64) -> Result<(), E> {
            Ok(())
        }
    )
}

#[test]
fn errors_keep_the_original_fn() {
    let item = quote!(
        fn f() -> Result<(), E> {
            Ok(())
        }
    );
    let expanded = distributed_lock(quote!(key = "k"), item.clone());
    let kept = quote!(#[allow(unused_variables)] #item);
    assert!(expanded.to_string().starts_with(&kept.to_string()));
    assert_eq!(errors(quote!(key = "k"), item).len(), 1);
}

#[test]
fn shape_errors() {
    assert_eq!(
        one_error(
            quote!(key = "k"),
            quote!(
                fn f() -> Result<(), E> {
                    Ok(())
                }
            )
        ),
        "`#[distributed_lock]` requires an `async fn`"
    );
    assert!(
        one_error(
            quote!(key = "k"),
            quote!(
                #[::core::prelude::v1::test]
                fn f() -> Result<(), E> {
                    Ok(())
                }
            )
        )
        .contains("place it above `#[tokio::test]`")
    );
    assert_eq!(
        one_error(
            quote!(key = "k"),
            quote!(
                async fn f() {}
            )
        ),
        diagnostics::MISSING_RETURN_TYPE
    );
    assert_eq!(
        one_error(
            quote!(key = "k"),
            quote!(
                struct S;
            )
        ),
        diagnostics::NOT_A_FN
    );
    assert_eq!(
        one_error(
            quote!(key = "k"),
            quote!(
                async fn f() -> Result<(), E>;
            )
        ),
        diagnostics::NO_BODY
    );
}

#[test]
fn fallback_keeps_a_broken_body() {
    // `let x = ;` does not parse as a block, but the signature does.
    let expanded = distributed_lock(
        quote!(key = "k:<id>"),
        quote!(async fn f(id: u64) -> Result<(), E> { #![allow(unused)] let x = ; }),
    )
    .to_string();
    assert!(expanded.contains("__private :: lock"), "{expanded}");
    assert!(expanded.contains("let x = ;"), "{expanded}");
    let inner_attr = expanded.find("# ! [allow (unused)]");
    let key = expanded.find("let __lock =");
    assert!(inner_attr.is_some() && inner_attr < key, "{expanded}");
}

use crate::diagnostics;

#[test]
fn template_errors() {
    let cases = [
        ("", diagnostics::TEMPLATE_EMPTY.to_owned()),
        ("k:<product_id", diagnostics::TEMPLATE_UNCLOSED.to_owned()),
        ("k:<>", diagnostics::TEMPLATE_EMPTY_PLACEHOLDER.to_owned()),
        ("k:<a..b>", diagnostics::template_malformed("a..b")),
        ("k:<1x>", diagnostics::template_malformed("1x")),
        (
            "k:<prodct_id>",
            "unknown parameter `prodct_id` in key template; available: `product_id`, `user_id`"
                .to_owned(),
        ),
        ("k:<self.x>", diagnostics::SELF_WITHOUT_RECEIVER.to_owned()),
        (
            "k:<product_id.type>",
            "invalid field `type` in key template placeholder `<product_id.type>`".to_owned(),
        ),
    ];
    for (template, expected) in cases {
        assert_eq!(
            one_error(quote!(key = #template), item()),
            expected,
            "{template}"
        );
    }
}

#[test]
fn unknown_name_twice_is_one_error() {
    assert_eq!(errors(quote!(key = "<x>:<x>:<y>"), item()).len(), 2);
}

#[test]
fn available_lists_self_and_says_when_there_is_nothing() {
    assert_eq!(
        one_error(
            quote!(key = "<nope>"),
            quote!(
                async fn f(&self, (a, b): (u8, u8), id: u8) -> Result<(), E> {
                    Ok(())
                }
            )
        ),
        "unknown parameter `nope` in key template; available: `self`, `id`"
    );
    assert_eq!(
        one_error(
            quote!(key = "<nope>"),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            )
        ),
        "unknown parameter `nope` in key template; the function has no parameters"
    );
}

#[test]
fn destructured_params() {
    for item in [
        quote!(
            async fn f((a, b): (u32, u32)) -> Result<(), E> {
                Ok(())
            }
        ),
        quote!(
            async fn f(Point { x: a, y }: Point) -> Result<(), E> {
                Ok(())
            }
        ),
        quote!(
            async fn f(&Wrapper(ref a): &Wrapper) -> Result<(), E> {
                Ok(())
            }
        ),
        quote!(
            async fn f([a, ..]: [u8; 4]) -> Result<(), E> {
                Ok(())
            }
        ),
    ] {
        assert_eq!(
            one_error(quote!(key = "<a>"), item),
            diagnostics::destructured_param("a")
        );
    }
}

#[test]
fn every_receiver_form_provides_self() {
    for receiver in [
        quote!(&self),
        quote!(&mut self),
        quote!(self),
        quote!(mut self),
        quote!(self: Arc<Self>),
        quote!(&'a self),
    ] {
        let item = quote!(async fn f(#receiver) -> Result<(), E> { Ok(()) });
        assert!(
            errors(quote!(key = "<self.id>"), item).is_empty(),
            "{receiver}"
        );
    }
}

#[test]
fn guard_must_not_shadow_a_parameter() {
    assert_eq!(
        one_error(quote!(key = "k", guard = user_id), item()),
        diagnostics::guard_shadows_param("user_id")
    );
}

#[test]
fn arg_and_shape_errors_are_reported_together() {
    let messages = errors(
        quote!(key = "k", ttl_ms = 0, bogus = 1),
        quote!(
            struct S;
        ),
    );
    assert_eq!(messages.len(), 3, "{messages:?}");
}
