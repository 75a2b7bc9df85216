// Above `#[tokio::test]`, the lock wraps the test body and the test stays a test.
#![deny(warnings)]
#![allow(dead_code)]

use lockcore::distributed_lock;

#[distributed_lock(key = "test:one-at-a-time")]
#[tokio::test]
async fn locked_test() -> Result<(), lockcore::LockError> {
    Ok(())
}

fn main() {}
