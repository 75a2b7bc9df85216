// C18: above `#[tokio::test]`, the lock wraps the test body and the test stays a test.
#![deny(warnings)]
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

#[distributed_lock(key = "test:one-at-a-time")]
#[tokio::test]
async fn locked_test() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
