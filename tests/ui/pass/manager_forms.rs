// `manager = ..` takes a `LockManager`, a `&LockManager` or an `Arc<LockManager>`, evaluated in
// the function's scope.
#![deny(warnings)]
#![allow(dead_code)]

use std::sync::Arc;

use lockcore::{distributed_lock, LockError, LockManager};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "m:<id>", manager = locks)]
async fn by_value(locks: LockManager, id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "m:<id>", manager = locks)]
async fn by_ref(locks: &LockManager, id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "m:<id>", manager = *locks)]
async fn deref(locks: &Arc<LockManager>, id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "m:<id>", manager = locks)]
async fn arc(locks: Arc<LockManager>, id: u64) -> Result<u64, AppError> {
    let _ = locks;
    Ok(id)
}

fn main() {}
