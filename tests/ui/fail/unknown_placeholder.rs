#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "order:lock:product:<prodct_id>")]
async fn create_order(product_id: u64, user_id: u64) -> Result<u64, AppError> {
    Ok(product_id + user_id)
}

fn main() {}
