// `#[idempotent]`: argument, template and shape errors at the narrowest span, and a stored
// type that cannot be serialized.
#![allow(dead_code)]

use lockcore::{idempotent, LockError};

include!("../app_error.rs");

// unknown_placeholder
#[idempotent(key = "order:req:<request>", ttl_ms = 60_000)]
async fn unknown_placeholder(request_id: String) -> Result<u64, AppError> {
    Ok(request_id.len() as u64)
}

// missing_ttl
#[idempotent(key = "order:req:<request_id>")]
async fn missing_ttl(request_id: String) -> Result<u64, AppError> {
    Ok(request_id.len() as u64)
}

// unknown_arg
#[idempotent(key = "order:req:<request_id>", ttl_ms = 60_000, reentrant = true)]
async fn unknown_arg(request_id: String) -> Result<u64, AppError> {
    Ok(request_id.len() as u64)
}

// not_async
#[idempotent(key = "order:req:<request_id>", ttl_ms = 60_000)]
fn not_async(request_id: String) -> Result<u64, AppError> {
    Ok(request_id.len() as u64)
}

fn main() {}
