// Items the attribute cannot wrap: one per rule, each reported at the narrowest span.
#![allow(dead_code)]

use async_trait::async_trait;
use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");

// not_a_fn
#[distributed_lock(key = "k")]
struct Order {
    id: u64,
}

// missing_body
trait Repo {
    #[distributed_lock(key = "k:<id>")]
    async fn save(&self, id: u64) -> Result<u64, LockError>;
}

// not_async
#[distributed_lock(key = "k:<id>")]
fn not_async(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// missing_return_type
#[distributed_lock(key = "k:<id>")]
async fn missing_return_type(id: u64) {
    let _ = id;
}

// tokio_test_below: below `#[tokio::test]` the attribute sees a plain `fn`; the error
// says to move it up.
#[tokio::test]
#[distributed_lock(key = "test:one-at-a-time")]
async fn tokio_test_below() -> Result<(), lockcore::LockError> {
    Ok(())
}

// on_impl: above `#[async_trait]` the attribute sees the impl block; the error says to put it
// on the method.
#[async_trait]
trait Accounts {
    async fn deposit(&self, id: u64) -> Result<u64, AppError>;
}

struct Bank;

#[distributed_lock(key = "acct:<id>")]
#[async_trait]
impl Accounts for Bank {
    async fn deposit(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

fn main() {}
