#![allow(dead_code)]

use lockcore::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "k:<id>")]
async fn create(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn main() {}
