// A broken attribute still emits the function: callers, the key's parameter and the body see
// no follow-on errors (no "cannot find function", no unused variable), only the one error.
#![deny(unused)]

use lockcore::{distributed_lock, LockError};

#[distributed_lock(key = "order:<prodct_id>", ttl_ms = 10_000)]
async fn create_order(product_id: u64, user_id: u64) -> Result<u64, LockError> {
    Ok(product_id + user_id)
}

async fn caller() -> Result<u64, LockError> {
    create_order(1, 2).await
}

fn main() {
    let _ = caller();
}
