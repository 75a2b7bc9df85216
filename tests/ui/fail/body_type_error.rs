#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "k:<id>")]
async fn create(id: u64) -> Result<u64, AppError> {
    Ok(id);
}

fn main() {}
