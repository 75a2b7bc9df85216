// `#[distributed_lock]` on native `async fn`s of a trait impl and on a trait's default method.
#![deny(warnings)]
#![allow(dead_code)]

use lockcore::{distributed_lock, LockError};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        AppError
    }
}

trait Repo {
    fn tenant(&self) -> &str;

    async fn save(&self, id: u64) -> Result<u64, AppError>;

    #[distributed_lock(key = "repo:<id>")]
    async fn touch(&self, id: u64) -> Result<(), AppError> {
        let _ = self.tenant();
        let _ = id;
        Ok(())
    }
}

struct Pg {
    tenant: String,
}

impl Repo for Pg {
    fn tenant(&self) -> &str {
        &self.tenant
    }

    #[distributed_lock(key = "repo:<self.tenant>:<id>")]
    async fn save(&self, id: u64) -> Result<u64, AppError> {
        Ok(id)
    }
}

fn main() {}
