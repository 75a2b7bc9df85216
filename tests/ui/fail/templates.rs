// Key template errors, reported at the key literal.
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");


// empty_template
#[distributed_lock(key = "")]
async fn empty_template(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// unclosed_placeholder
#[distributed_lock(key = "order:<id")]
async fn unclosed_placeholder(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// empty_placeholder
#[distributed_lock(key = "order:<>")]
async fn empty_placeholder(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// malformed_placeholder
#[distributed_lock(key = "order:<id..x>")]
async fn malformed_placeholder(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// unknown_placeholder
#[distributed_lock(key = "order:lock:product:<prodct_id>")]
async fn unknown_placeholder(product_id: u64, user_id: u64) -> Result<u64, AppError> {
    Ok(product_id + user_id)
}

// self_without_receiver
#[distributed_lock(key = "tenant:<self.tenant>")]
async fn self_without_receiver(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// destructured_param
#[distributed_lock(key = "pair:<a>")]
async fn destructured_param((a, b): (u64, u64)) -> Result<u64, AppError> {
    Ok(a + b)
}

fn main() {}
