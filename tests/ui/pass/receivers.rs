// Every receiver form, `Self::CONST` in the body, an associated fn with no `self`.
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
    tenant: String,
    locks: LockManager,
    placed: u32,
}

impl Service {
    const LIMIT: u32 = 10;

    #[distributed_lock(key = "o:<self.tenant>:<id>", manager = self.locks)]
    async fn by_ref(&self, id: u64) -> Result<u64, AppError> {
        Ok(id + u64::from(Self::LIMIT))
    }

    #[distributed_lock(key = "o:<self.tenant>", manager = self.locks, ttl_ms = 500)]
    async fn by_mut(&mut self) -> Result<u32, AppError> {
        self.placed += 1;
        Ok(self.placed)
    }

    #[distributed_lock(key = "o:<self.tenant>", manager = self.locks)]
    async fn consumed(self) -> Result<String, AppError> {
        Ok(self.tenant)
    }

    #[distributed_lock(key = "o:<self.tenant>", manager = self.locks)]
    async fn consumed_mut(mut self) -> Result<u32, AppError> {
        self.placed += Self::LIMIT;
        Ok(self.placed)
    }

    #[distributed_lock(key = "o:<self.tenant>", manager = self.locks, wait_ms = 0)]
    async fn arc(self: Arc<Self>) -> Result<Arc<Self>, AppError> {
        Ok(self)
    }

    #[distributed_lock(key = "o:<self.tenant>")]
    async fn explicit_ref(self: &Self) -> Result<u32, AppError> {
        Ok(Self::LIMIT)
    }

    #[distributed_lock(key = "o:<tenant>:<id>")]
    async fn associated(tenant: &str, id: u64) -> Result<String, AppError> {
        Ok(format!("{tenant}:{id}:{}", Self::LIMIT))
    }
}

fn main() {}
