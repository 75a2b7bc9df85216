// Argument errors: one fn per rule; every message is reported at the argument.
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");


// missing_key
#[distributed_lock(ttl_ms = 5000)]
async fn missing_key(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// unknown_arg
#[distributed_lock(key = "k:<id>", ttl = 5000)]
async fn unknown_arg(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// duplicate_arg
#[distributed_lock(key = "k:<id>", ttl_ms = 5000, ttl_ms = 6000)]
async fn duplicate_arg(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// key_not_string
#[distributed_lock(key = order_id)]
async fn key_not_string(order_id: u64) -> Result<u64, AppError> {
    Ok(order_id)
}

// ttl_not_int
#[distributed_lock(key = "k:<id>", ttl_ms = "10s")]
async fn ttl_not_int(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// ttl_too_large
#[distributed_lock(key = "k:<id>", ttl_ms = 604_800_001)]
async fn ttl_too_large(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// ttl_zero
#[distributed_lock(key = "k:<id>", ttl_ms = 0)]
async fn ttl_zero(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// watchdog_not_bool
#[distributed_lock(key = "k:<id>", watchdog = "on")]
async fn watchdog_not_bool(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// on_lost_invalid
#[distributed_lock(key = "k:<id>", on_lost = "retry")]
async fn on_lost_invalid(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// guard_not_ident
#[distributed_lock(key = "k:<id>", guard = "g")]
async fn guard_not_ident(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// crate_not_string
#[distributed_lock(key = "k:<id>", crate = lockcore)]
async fn crate_not_string(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// crate_bad_path
#[distributed_lock(key = "k:<id>", crate = "lock core")]
async fn crate_bad_path(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// key_and_keys
#[distributed_lock(key = "k:<id>", keys = ["k:<id>"])]
async fn key_and_keys(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// keys_empty
#[distributed_lock(keys = [])]
async fn keys_empty(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// keys_not_array
#[distributed_lock(keys = "k:<id>")]
async fn keys_not_array(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// keys_element_not_string
#[distributed_lock(keys = ["k:<id>", id])]
async fn keys_element_not_string(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// on_contended_invalid
#[distributed_lock(key = "k:<id>", on_contended = "wait")]
async fn on_contended_invalid(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// fallback_and_on_contended
#[distributed_lock(key = "k:<id>", on_contended = "skip", fallback = busy)]
async fn fallback_and_on_contended(id: u64) -> Result<(), AppError> {
    Ok(())
}

fn busy(_: u64) -> Result<(), AppError> {
    Ok(())
}

// fallback_not_path
#[distributed_lock(key = "k:<id>", fallback = "busy")]
async fn fallback_not_path(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// fallback_destructured
#[distributed_lock(key = "k:<id>", fallback = busy_pair)]
async fn fallback_destructured(id: u64, (a, b): (u64, u64)) -> Result<u64, AppError> {
    Ok(id + a + b)
}

fn busy_pair(_: u64, _: (u64, u64)) -> Result<u64, AppError> {
    Ok(0)
}

// reentrant_not_bool
#[distributed_lock(key = "k:<id>", reentrant = "yes")]
async fn reentrant_not_bool(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
