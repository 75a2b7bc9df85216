//! `#[distributed_lock]` written inside a `macro_rules!` body: the key template
//! (`"mr:<id>"`) is the macro's own text, the parameter it names comes from the caller. The
//! placeholder resolves to the caller's parameter (its hygiene is kept), and the generated fn
//! locks the rendered key.

use lockcore::{LockError, LockManager, distributed_lock};
use lockcore_tests::*;

/// Defines `async fn $name(locks: &LockManager, $id: u64)` that locks `mr:<id>` and, in its
/// body, checks that the lock is held.
macro_rules! locked_by_id {
    ($name:ident, $id:ident) => {
        #[distributed_lock(key = "mr:<id>", ttl_ms = 5_000, wait_ms = 0, manager = locks)]
        async fn $name(locks: &LockManager, $id: u64) -> Result<String, LockError> {
            let other = locks
                .try_acquire(&format!("mr:{}", $id), &opts(1_000, 0))
                .await?;
            assert!(other.is_none(), "the body runs under the lock");
            Ok(format!("done {}", $id))
        }
    };
}

locked_by_id!(job_by_id, id);

/// The same with the key and a field path given by the macro's caller.
macro_rules! locked_with_key {
    ($name:ident, $key:literal, $arg:ident : $ty:ty) => {
        #[distributed_lock(key = $key, ttl_ms = 5_000, wait_ms = 0, manager = locks)]
        async fn $name(locks: &LockManager, $arg: $ty) -> Result<(), LockError> {
            let _ = &$arg;
            Ok(())
        }
    };
}

struct Order {
    id: u32,
}

locked_with_key!(order_lock, "mr:order:<order.id>", order: Order);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_written_inside_macro_rules_names_the_callers_parameter() {
    let (_server, locks, mut raw) = start_with_manager().await;
    assert_eq!(job_by_id(&locks, 7).await.expect("locked"), "done 7");
    assert!(
        !exists(&mut raw, &full("mr:7")).await,
        "released after the body"
    );
    let held = must_acquire(&locks, "mr:8", &opts(5_000, 0)).await;
    assert!(
        matches!(job_by_id(&locks, 8).await, Err(LockError::Contended { .. })),
        "the generated fn locks the rendered key"
    );
    held.release().await.expect("release");
    order_lock(&locks, Order { id: 3 }).await.expect("locked");
}
