//! Expansion snapshots of the policy arguments and the `#[async_trait]` shape (see
//! `snapshot_tests` for how to bless them).

use quote::quote;

use crate::snapshot_tests::snapshot;

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
