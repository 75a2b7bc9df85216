//! Test support for the lockcore workspace: the one harness that the integration tests, the
//! examples, the benchmarks and the nemesis run share.
//!
//! | module | holds |
//! |---|---|
//! | `server` | [`RedisServer`]: a private `redis-server` per test, on a free port (never 6379) |
//! | `proxy` | [`FaultProxy`]: a TCP proxy that delays, drops and blackholes traffic |
//! | `postgres` | [`PostgresServer`]: a private PostgreSQL on a free port, for the fencing example |
//! | `fake_redis` | [`FakeRedis`]: a fake server that answers with whatever bytes a test chooses |
//! | `managers` | managers, runtimes and option shorthands on a server |
//! | `probes` | raw-connection reads, writes and bounded polls for assertions |
//! | `queues` | the hand-off machinery's queues, channels and pub/sub clients |
//! | `commandstats` | `INFO commandstats` parsing |
//! | `monitor` | the `MONITOR` line parser and a blocking reader |
//! | `stats` | quantiles and Jain's index |
//! | `capture` | captured `tracing` events |
//! | `heartbeats` | the fenced SQLite heartbeat table of the leader example and workload |
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
pub use ports::free_port;
mod postgres;
pub use postgres::{PG_BINDIR_ENV, POSTGRES_INSTALL_HINT, PostgresServer};
mod process;
mod sentinel;
mod server;
mod tls;
mod tls_certs;
mod url;
pub use url::secret_url_forms;

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

mod fake_redis;
pub use fake_redis::{FakeCommand, FakeRedis, FakeReply, handshake, name_of};

mod capture;
pub mod commandstats;
mod managers;
pub mod monitor;
mod probes;
pub mod queues;
pub mod stats;

pub use capture::{CapturedEvents, panic_count};
pub use commandstats::*;
pub use managers::*;
pub use probes::*;
pub use queues::*;
pub use stats::*;

pub mod heartbeats;
pub mod history;
pub mod lua;
pub mod nemesis;
