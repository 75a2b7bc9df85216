#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "pair:<a>")]
async fn create((a, b): (u64, u64)) -> Result<u64, AppError> {
    Ok(a + b)
}

fn main() {}
