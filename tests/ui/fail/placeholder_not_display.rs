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
async fn create(id: Vec<u8>) -> Result<usize, AppError> {
    Ok(id.len())
}

fn main() {}
