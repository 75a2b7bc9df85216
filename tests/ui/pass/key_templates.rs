// Nested fields, tuple indices, `<<`, literal braces (hash tags), `mut` parameters,
// non-ASCII names.
#![deny(warnings)]
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

struct Customer {
    id: u64,
}

struct Order {
    id: u64,
    customer: Customer,
}

#[distributed_lock(key = "order:<order.id>:customer:<order.customer.id>")]
async fn nested(order: &Order) -> Result<u64, AppError> {
    Ok(order.id)
}

#[distributed_lock(key = "pair:<pair.0>:<pair.1>")]
async fn tuple_index(pair: (u8, u16)) -> Result<u8, AppError> {
    Ok(pair.0)
}

#[distributed_lock(key = "{user:<id>}:cart")]
async fn hash_tag(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "a<<b>:<id>:{}")]
async fn escapes(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "m:<count>")]
async fn mutable(mut count: u32) -> Result<u32, AppError> {
    count += 1;
    Ok(count)
}

#[distributed_lock(key = "café:<café>")]
async fn non_ascii(café: u32) -> Result<u32, AppError> {
    Ok(café)
}

#[distributed_lock(key = "static")]
async fn no_placeholder() -> Result<(), AppError> {
    Ok(())
}

fn main() {}
