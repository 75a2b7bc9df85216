// `permits` and `mode`: one small fn per rule.
use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");

#[distributed_lock(key = "pool", permits = 0)]
async fn zero_permits() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], permits = 3)]
async fn permits_with_keys() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "pool", permits = "3")]
async fn permits_not_an_integer() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "pool", permits = 5_000_000_000)]
async fn permits_too_large() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "prices", mode = "shared")]
async fn unknown_mode() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(key = "prices", permits = 2, mode = "read")]
async fn mode_with_permits() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], mode = "read")]
async fn mode_with_keys() -> Result<(), AppError> {
    Ok(())
}

fn main() {}
