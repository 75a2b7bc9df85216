// Type errors inside a locked body are reported inside the body.
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");


// body_type_error
#[distributed_lock(key = "k:<id>")]
async fn body_type_error(id: u64) -> Result<u64, AppError> {
    Ok(id);
}

fn main() {}
