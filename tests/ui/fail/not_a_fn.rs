#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "k")]
struct Order {
    id: u64,
}

fn main() {}
