// Placeholders the compiler rejects: a missing field, a value without `Display`.
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

include!("../app_error.rs");


// placeholder_no_such_field
#[distributed_lock(key = "k:<order.idd>")]
async fn placeholder_no_such_field(order: Order) -> Result<u64, AppError> {
    Ok(order.id)
}

struct Order {
    id: u64,
}

// placeholder_not_display
#[distributed_lock(key = "k:<id>")]
async fn placeholder_not_display(id: Vec<u8>) -> Result<usize, AppError> {
    Ok(id.len())
}

fn main() {}
