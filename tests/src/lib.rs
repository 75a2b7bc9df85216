//! Test support for the lockcore workspace: the one harness that the integration tests, the
//! examples, the benchmarks and the nemesis run share.
//!
//! | module | holds |
//! |---|---|
//! | `server` | [`RedisServer`]: a private `redis-server` per test, on a free port (never 6379) |
//! | `proxy` | [`FaultProxy`]: a TCP proxy that delays, drops and blackholes traffic |
//! | `managers` | managers, runtimes and option shorthands on a server |
//! | `probes` | raw-connection reads, writes and bounded polls for assertions |
//! | `queues` | the hand-off machinery's queues, channels and pub/sub clients |
//! | `commandstats` | `INFO commandstats` parsing |
//! | `monitor` | the `MONITOR` line parser and a blocking reader |
//! | `stats` | quantiles and Jain's index |
//! | `capture` | captured `tracing` events |
//!
//! ```no_run
//! let server = lockcore_tests::RedisServer::start();
//! let url = server.url(); // "redis://127.0.0.1:PORT/"
//! # drop(url);
//! ```

mod server;

pub use server::{INSTALL_HINT, RedisServer};

mod proxy;
pub use proxy::{Direction, FaultProxy};

mod capture;
pub mod commandstats;
mod managers;
pub mod monitor;
mod probes;
pub mod queues;
pub mod stats;

pub use capture::CapturedEvents;
pub use commandstats::*;
pub use managers::*;
pub use probes::*;
pub use queues::*;
pub use stats::*;

pub mod history;
pub mod nemesis;
