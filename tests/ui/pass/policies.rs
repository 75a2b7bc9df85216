// The policy arguments and the `#[async_trait]` shape compile in every receiver form.
#![deny(warnings)]

use async_trait::async_trait;
use lockcore::{distributed_lock, LockError, LockManager, MultiGuard};

include!("../app_error.rs");

struct Service {
    locks: LockManager,
    name: String,
}

impl Service {
    #[distributed_lock(keys = ["acct:<from>", "acct:<to>", "acct:<from>"], manager = self.locks, guard = held)]
    async fn transfer(&self, from: u64, to: u64) -> Result<Vec<u64>, AppError> {
        let held: &MultiGuard = held;
        Ok(held.fencing_tokens())
    }

    #[distributed_lock(key = "job:<self.name>", manager = self.locks, on_contended = "skip")]
    async fn nightly(&self) -> Result<(), AppError> {
        Ok(())
    }

    #[distributed_lock(key = "job:<self.name>", manager = self.locks, ttl_ms = 60_000, wait_ms = 0, on_contended = "skip", hold_at_least_ms = 60_000)]
    async fn scheduled(&self) -> Result<(), AppError> {
        Ok(())
    }

    #[distributed_lock(key = "job:<id>", manager = self.locks, on_contended = "skip", reentrant = false)]
    async fn maybe(&mut self, id: u64) -> Result<Option<u64>, AppError> {
        self.name.push('x');
        Ok(Some(id))
    }

    #[distributed_lock(key = "job:<id>", manager = self.locks, fallback = Self::busy)]
    async fn with_fallback(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }

    async fn busy(&self, id: u64) -> Result<u64, AppError> {
        Ok(id + self.name.len() as u64)
    }
}

#[async_trait]
trait Jobs {
    async fn run(&self, id: u64) -> Result<u64, AppError>;
    async fn run_mut(&mut self, id: u64) -> Result<(), AppError>;
    async fn default_method(&self, id: u64) -> Result<u64, AppError>;
}

#[async_trait]
impl Jobs for Service {
    #[distributed_lock(key = "o:<self.name>:<id>", manager = self.locks, guard = g)]
    async fn run(&self, id: u64) -> Result<u64, AppError> {
        Ok(g.fencing_token() + id)
    }

    #[distributed_lock(key = "o:<id>", manager = self.locks, fallback = Self::busy_mut)]
    async fn run_mut(&mut self, id: u64) -> Result<(), AppError> {
        self.name.push('y');
        Ok(())
    }

    #[distributed_lock(keys = ["a:<id>", "b:<id>"], manager = self.locks)]
    async fn default_method(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

impl Service {
    fn busy_mut(&mut self, _id: u64) -> Result<(), AppError> {
        Ok(())
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let _ = |s: &'static Service, m: &'static mut Service| {
        assert_send(s.transfer(1, 2));
        assert_send(s.nightly());
        assert_send(s.run(1));
        assert_send(s.with_fallback(1));
        assert_send(m.run_mut(1));
    };
}
