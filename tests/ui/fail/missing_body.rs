#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

trait Repo {
    #[distributed_lock(key = "k:<id>")]
    async fn save(&self, id: u64) -> Result<u64, LockError>;
}

fn main() {}
