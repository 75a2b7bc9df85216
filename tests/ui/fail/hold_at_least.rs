// `hold_at_least_ms` errors: one fn per rule; every message is reported at the argument's value.
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");

// hold_above_ttl
#[distributed_lock(key = "job:<id>", ttl_ms = 5000, hold_at_least_ms = 6000)]
async fn hold_above_ttl(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// hold_zero
#[distributed_lock(key = "job:<id>", ttl_ms = 5000, hold_at_least_ms = 0)]
async fn hold_zero(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// hold_not_int
#[distributed_lock(key = "job:<id>", hold_at_least_ms = "1000")]
async fn hold_not_int(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// hold_above_max
#[distributed_lock(key = "job:<id>", hold_at_least_ms = 604_800_001)]
async fn hold_above_max(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// hold_with_share
#[distributed_lock(key = "job:<id>", permits = 3, hold_at_least_ms = 1000)]
async fn hold_with_permits(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "job:<id>", mode = "read", hold_at_least_ms = 1000)]
async fn hold_with_read(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
