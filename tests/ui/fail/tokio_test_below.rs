// C18: below `#[tokio::test]` the attribute sees a plain `fn`; the error says to move it up.
#![allow(dead_code)]
use lockcore::distributed_lock;

#[tokio::test]
#[distributed_lock(key = "test:one-at-a-time")]
async fn locked_test() -> Result<(), lockcore::LockError> {
    Ok(())
}

fn main() {}
