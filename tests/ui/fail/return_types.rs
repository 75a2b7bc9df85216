// Return types the expansion cannot use, reported at the return type or at the argument that
// needs it (`on_contended = "skip"`, `fallback = path`).
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");

#[derive(Debug)]
struct NoFromError;

// return_type_not_result
#[distributed_lock(key = "k:<id>")]
async fn return_type_not_result(id: u64) -> u64 {
    id
}

// return_type_without_from
#[distributed_lock(key = "k:<id>")]
async fn return_type_without_from(id: u64) -> Result<u64, NoFromError> {
    Ok(id)
}

// skip_unsupported_return: `skip` returns `Ok(())` or `Ok(None)`, which `Result<u64, _>` has not
#[distributed_lock(key = "k:<id>", on_contended = "skip")]
async fn skip_unsupported_return(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// fallback_wrong_parameters
fn busy_no_args() -> Result<u64, AppError> {
    Ok(0)
}

#[distributed_lock(key = "k:<id>", fallback = busy_no_args)]
async fn fallback_wrong_parameters(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

// fallback_wrong_return_type
async fn busy_flag(_: u64) -> Result<bool, AppError> {
    Ok(true)
}

#[distributed_lock(key = "k:<id>", fallback = busy_flag)]
async fn fallback_wrong_return_type(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
