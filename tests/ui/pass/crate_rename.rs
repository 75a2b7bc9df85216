// `crate = ".."`: lockcore reached through another name.
#![deny(warnings)]
#![allow(dead_code)]

extern crate lockcore as my_locks;

use my_locks::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

#[distributed_lock(key = "a:<id>", crate = "my_locks")]
async fn relative(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

#[distributed_lock(key = "a:<id>", crate = "::my_locks")]
async fn absolute(id: u64) -> Result<u64, AppError> {
    Ok(id)
}

mod facade {
    // What the expansion names: `__private`, and the guard types `guard = ..` binds.
    pub use ::my_locks::{LockGuard, MultiGuard, __private};
}

mod nested {
    use super::AppError;

    #[lockcore::distributed_lock(key = "a:<id>", crate = "crate::facade", guard = g)]
    pub(crate) async fn through_facade(id: u64) -> Result<String, AppError> {
        Ok(format!("{}:{id}", g.key()))
    }

    #[lockcore::distributed_lock(keys = ["a:<id>", "b:<id>"], crate = "crate::facade", guard = g)]
    pub(crate) async fn set_through_facade(id: u64) -> Result<usize, AppError> {
        Ok(g.guards().len() + id as usize)
    }
}

fn main() {}
