// `permits = N` and `mode = "read" | "write"` compile with the other arguments, in a method and
// in a free fn, and keep the future `Send`.
#![deny(warnings)]

use lockcore::{distributed_lock, LockError, LockGuard, LockManager};

include!("../app_error.rs");

struct Gateway {
    locks: LockManager,
}

impl Gateway {
    #[distributed_lock(key = "card-processor", permits = 5, manager = self.locks, guard = permit, watchdog = true)]
    async fn charge(&self, cents: u64) -> Result<u64, AppError> {
        let permit: &LockGuard = permit;
        Ok(permit.fencing_token() + cents)
    }

    #[distributed_lock(key = "card-processor", permits = 5, manager = self.locks, on_contended = "skip", wait_ms = 0)]
    async fn maybe_charge(&self) -> Result<(), AppError> {
        Ok(())
    }

    #[distributed_lock(key = "prices:<region>", mode = "read", manager = self.locks, ttl_ms = 2_000)]
    async fn price(&self, region: u32) -> Result<u32, AppError> {
        Ok(region)
    }

    #[distributed_lock(key = "prices:<region>", mode = "write", manager = self.locks, fallback = Self::busy)]
    async fn set_price(&self, region: u32) -> Result<u32, AppError> {
        Ok(region)
    }

    async fn busy(&self, region: u32) -> Result<u32, AppError> {
        Ok(region + 1)
    }
}

#[distributed_lock(key = "single", permits = 1)]
async fn plain(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let _ = |g: &'static Gateway| {
        assert_send(g.charge(1));
        assert_send(g.maybe_charge());
        assert_send(g.price(1));
        assert_send(g.set_price(1));
        assert_send(plain(1));
    };
}
