// The wrapped future stays `Send`, so a wrapped method can be `tokio::spawn`ed.
#![deny(warnings)]
#![allow(dead_code)]

use std::sync::Arc;

use lockcore::{distributed_lock, LockError, LockManager};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

struct Service {
    locks: Arc<LockManager>,
    tenant: String,
}

impl Service {
    #[distributed_lock(key = "s:<self.tenant>:<id>", manager = self.locks, guard = g)]
    async fn place(&self, id: u64) -> Result<u64, AppError> {
        tokio::task::yield_now().await;
        let _ = g.key();
        Ok(id)
    }

    #[distributed_lock(key = "s:<self.tenant>", manager = self.locks)]
    async fn owned(self: Arc<Self>) -> Result<(), AppError> {
        tokio::task::yield_now().await;
        Ok(())
    }
}

fn assert_send<T: Send>(_: T) {}

fn spawnable(service: Arc<Service>) {
    assert_send(service.place(1));
    drop(tokio::spawn(service.owned()));
}

fn main() {}
