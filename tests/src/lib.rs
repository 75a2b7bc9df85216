//! Test support for the lockcore workspace.
//!
//! The main piece is [`RedisServer`]: a private `redis-server` process per test
//! (or per test binary), on `127.0.0.1` and a free port (never 6379), with
//! `--save "" --appendonly no`, killed on drop. Integration tests, examples and
//! benchmarks all use it, so none of them needs a Redis running beforehand, only
//! `redis-server` on `PATH`.
//!
//! `LOCKCORE_TEST_SERVER=valkey` runs every server of the harness on Valkey
//! (`valkey-server`, installed by `scripts/ensure-valkey`) instead;
//! [`server_description`] says what ran.
//!
//! ```no_run
//! let server = lockcore_tests::RedisServer::start();
//! let url = server.url(); // "redis://127.0.0.1:PORT/"
//! # drop(url);
//! ```

mod admin;
mod cluster;
mod cluster_migration;
mod cluster_view;
mod flavour;
mod poll;
mod ports;
mod process;
mod sentinel;
mod server;
mod tls;
mod tls_certs;
mod url;

pub use cluster::{NODE_TIMEOUT, RedisCluster};
pub use cluster_migration::SlotMigration;
pub use cluster_view::{ClusterNode, SLOT_COUNT, key_slot};
pub use flavour::{
    INSTALL_HINT, SERVER_ENV, ServerFlavour, VALKEY_INSTALL_HINT, server_description,
    server_flavour,
};
pub use sentinel::{DOWN_AFTER, MASTER_NAME, SentinelSetup};
pub use server::RedisServer;
pub use tls::TlsServer;

mod proxy;
pub use proxy::{Direction, FaultProxy};
