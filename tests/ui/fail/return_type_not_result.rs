#![allow(dead_code)]

use lockcore::distributed_lock;

#[distributed_lock(key = "k:<id>")]
async fn create(id: u64) -> u64 {
    id
}

fn main() {}
