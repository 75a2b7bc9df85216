//! Expansion snapshots of the policy arguments and the `#[async_trait]` shape (see
//! `snapshot_tests` for how to bless them).

use quote::quote;

use crate::idempotent::idempotent;
use crate::snapshot_tests::{snapshot, snapshot_expansion};

#[test]
fn keys_with_guard() {
    snapshot(
        "keys",
        quote!(
            keys = ["acct:<to>", "acct:<from>"],
            ttl_ms = 5000,
            guard = held
        ),
        quote! {
            async fn transfer(from: u64, to: u64, amount: i64) -> Result<Vec<u64>, AppError> {
                move_money(from, to, amount).await?;
                Ok(held.fencing_tokens())
            }
        },
    );
}

#[test]
fn on_contended_skip() {
    snapshot(
        "skip",
        quote!(
            key = "job:nightly",
            wait_ms = 0,
            on_contended = "skip",
            reentrant = false
        ),
        quote! {
            async fn nightly() -> Result<(), AppError> {
                run_report().await
            }
        },
    );
}

#[test]
fn fallback_method() {
    snapshot(
        "fallback",
        quote!(key = "o:<id>", manager = self.locks, fallback = Self::busy),
        quote! {
            async fn place(&self, id: u64) -> Result<String, AppError> {
                self.place_inner(id).await
            }
        },
    );
}

/// What `#[async_trait]` (0.1) makes of `async fn deposit(&self, id: u64) -> Result<u64, E>`.
#[test]
fn async_trait_shape() {
    snapshot(
        "async_trait",
        quote!(key = "acct:<self.bank>:<id>", manager = self.locks),
        quote! {
            fn deposit<'life0, 'async_trait>(
                &'life0 self,
                id: u64,
            ) -> ::core::pin::Pin<
                Box<dyn ::core::future::Future<Output = Result<u64, AppError>> + ::core::marker::Send + 'async_trait>,
            >
            where
                'life0: 'async_trait,
                Self: 'async_trait,
            {
                Box::pin(async move {
                    if let ::core::option::Option::Some(__ret) = ::core::option::Option::None::<Result<u64, AppError>> {
                        #[allow(unreachable_code)]
                        return __ret;
                    }
                    let __self = self;
                    let id = id;
                    let __ret: Result<u64, AppError> = { __self.add(id).await };
                    #[allow(unreachable_code)]
                    __ret
                })
            }
        },
    );
}

#[test]
fn idempotent_fn() {
    snapshot_expansion(
        "idempotent",
        idempotent(
            quote!(
                key = "order:req:<request_id>",
                ttl_ms = 86_400_000,
                fingerprint = body_hash
            ),
            quote! {
                async fn place_order(request_id: String, body_hash: u64) -> Result<OrderId, AppError> {
                    insert_order(&request_id).await
                }
            },
        ),
    );
}

/// The `compile_error!` messages of an `#[idempotent]` expansion.
fn idempotent_errors(
    args: proc_macro2::TokenStream,
    item: proc_macro2::TokenStream,
) -> Vec<String> {
    let expanded = idempotent(args, item).to_string();
    expanded
        .match_indices("compile_error")
        .map(|(at, _)| {
            expanded[at..]
                .split('"')
                .nth(1)
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[test]
fn idempotent_diagnostics() {
    let item = quote!(
        async fn f(id: u64) -> Result<u64, E> {
            Ok(id)
        }
    );
    assert_eq!(
        idempotent_errors(quote!(key = "k:<idd>", ttl_ms = 5), item.clone()),
        ["unknown parameter `idd` in key template; available: `id`"]
    );
    let missing = idempotent_errors(quote!(), item.clone());
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(missing[0].contains("requires a `key`") && missing[1].contains("requires `ttl_ms`"));
    assert!(
        idempotent_errors(quote!(key = "k", ttl_ms = 5, wait = 1), item)[0]
            .starts_with("unknown argument `wait` for `#[idempotent]`")
    );
    let not_async = quote!(
        fn f(id: u64) -> Result<u64, E> {
            Ok(id)
        }
    );
    assert_eq!(
        idempotent_errors(quote!(key = "k", ttl_ms = 5), not_async),
        ["`#[idempotent]` requires an `async fn`"]
    );
}
