// Signatures survive: generics with a where-clause, lifetimes, `impl Trait` arguments and
// return types, visibility, docs and attributes, inner attributes.
#![deny(warnings)]
#![allow(dead_code)]

use std::fmt::Display;

use lockcore::{distributed_lock, LockError};

#[derive(Debug)]
pub struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

type AppResult<T> = Result<T, AppError>;

pub trait Job {
    fn id(&self) -> u64;
}

/// Docs stay on the function.
#[must_use]
#[allow(clippy::needless_lifetimes)]
#[distributed_lock(key = "job:<name>", ttl_ms = 10_000, wait_ms = 250)]
pub(crate) async fn generic<'a, J, T: Display + Send>(name: T, job: &'a J) -> Result<&'a J, AppError>
where
    J: Job + Sync,
{
    #![allow(unused_variables)]
    let unused = job.id();
    Ok(job)
}

#[distributed_lock(key = "s:<x>")]
async fn borrowed<'a>(x: &'a str) -> Result<&'a str, AppError> {
    Ok(x)
}

#[distributed_lock(key = "s:<x>")]
async fn elided(x: &str) -> Result<&str, AppError> {
    Ok(x)
}

#[distributed_lock(key = "d:<item>")]
async fn impl_trait_arg(item: impl Display, extra: impl Into<u64>) -> Result<u64, AppError> {
    Ok(extra.into())
}

#[distributed_lock(key = "d:<item>")]
async fn impl_trait_return(item: u64) -> Result<impl Display, AppError> {
    Ok(item)
}

#[distributed_lock(key = "d:<item>")]
async fn alias_return(item: u64) -> AppResult<u64> {
    if item == 0 {
        return Err(AppError);
    }
    let checked = std::convert::identity::<AppResult<u64>>(Ok(item))?;
    Ok(checked)
}

#[distributed_lock(key = "d:<item>")]
async unsafe fn unsafe_async(item: u64) -> Result<u64, AppError> {
    Ok(item)
}

fn main() {}
