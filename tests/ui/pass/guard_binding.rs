// `guard = g` binds `&LockGuard` in the body; `watchdog` and `on_lost` are accepted.
#![deny(warnings)]
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError, LockGuard};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "g:<id>", guard = lock, watchdog = false, on_lost = "continue")]
async fn reads_its_key(id: u64) -> Result<String, AppError> {
    let guard: &LockGuard = lock;
    Ok(format!("{}:{id}", guard.key()))
}

#[distributed_lock(key = "g:<id>", guard = lock, watchdog = true, on_lost = "abort")]
async fn passes_it_on(id: u64) -> Result<u64, AppError> {
    helper(lock).await;
    Ok(id)
}

async fn helper(guard: &LockGuard) {
    let _ = guard.key();
}

fn main() {}
