//! Redis distributed locks for async Rust (tokio).
//!
//! A [`LockManager`] hands out leases on Redis keys: `SET key value NX PX ttl` to acquire, a
//! Lua compare-and-delete to release, a fair queue in Redis that hands the lock to the next
//! waiter, a watchdog that renews the lease while the work runs, and a fencing token per
//! acquisition that a resource can use to refuse a holder paused past its lease. The
//! [`distributed_lock`] attribute wraps an `async fn` in all of that, with its key template
//! checked at compile time.
//!
//! ```no_run
//! use std::time::Duration;
//! use lockcore::{LockError, LockManager, LockOptions};
//!
//! # async fn demo() -> Result<(), LockError> {
//! let locks = LockManager::connect("redis://127.0.0.1:6379/").await?;
//! let opts = LockOptions::new(Duration::from_secs(10)).wait(Duration::from_secs(2));
//! let guard = locks.acquire("order:lock:product:42", &opts).await?;
//! // ... read the stock row, check it, write it back; pass guard.fencing_token() along ...
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Map
//!
//! | item | what |
//! |---|---|
//! | [`LockManager`], [`LockManagerBuilder`] | the handle that hands out locks, and how it is built: one node, Redlock, Redis Cluster, Sentinel, TLS, `WAIT` for replicas |
//! | [`LockOptions`] | lease TTL, wait budget, backoff, watchdog, hand-off |
//! | [`LockGuard`], [`MultiGuard`] | a held lease (or several, from [`LockManager::acquire_many`]): release, extend, fencing token, loss signal |
//! | [`Semaphore`], [`RwLock`] | leased permits (at most N holders of a key) and fair read-write locks, from [`LockManager::semaphore`] and [`LockManager::rw_lock`] |
//! | [`Leadership`], [`Holder`] | leader election ([`LockManager::campaign`]: a term per leader, a loss signal, resign) and who holds a key now ([`LockManager::holder`]) |
//! | [`LockError`] | every way a call can fail, with predicates such as [`LockError::is_contended`] |
//! | [`distributed_lock`] | the attribute (feature `macros`, on by default) |
//! | [`FencingCounter`], [`FencedRedis`], [`FenceGate`], [`StaleWrite`], [`FenceError`] | where fencing tokens are minted, and resource-side checks |
//! | `Idempotency`, `LockManager::idempotent`, `idempotent` | idempotency keys (feature `idempotency`) |
//! | [`set_default_manager`], [`default_manager`] | the process-wide manager the attribute uses by default |
//! | [`keyspace`] | the lock value format (token and holder metadata) and the names of lockcore's own keys and channels, for tools such as `lockctl` |
//! | [`redact_url`], [`DEFAULT_KEY_PREFIX`] | URLs with passwords masked; the default prefix `lock:` |
//!
//! # Layout
//!
//! Inside, the crate is in layers; every module imports only from the layers below it:
//!
//! | layer | modules | holds |
//! |---|---|---|
//! | facade | `lib.rs`, `__private` | this re-export list; what the attribute's expansion calls |
//! | features | `features::{multi, semaphore, rwlock, reentrancy, idempotency, fenced, election, holder}` | what builds on the manager: several keys, semaphores and read-write locks, reentrancy, idempotency records, fenced resources, leader election, who holds a key |
//! | API | `manager`, `builder`, `guard`, `global`, `shared` | the handles users hold |
//! | leases | `lease::{state, watchdog, promotion, live, telemetry}` | a held lease and what keeps it: renewal, the first renewal after a hand-over, the manager's live leases, spans and metrics |
//! | backend | `backend::{mod, topology, single, redlock, waiting, handoff, migration, late, backoff, replicas, renew, vote, cleanup, round_trip, read, shares}` | single node or Redlock, told what to do: open a topology, acquire (the waiting loop runs the backend's plan: the fair queue with direct grant, or backoff), release, renew |
//! | protocol | `protocol::{keyspace, value, messages, fencing, scripts, lua, call, explain}` | the wire format: key and channel names, the lock value, the hand-off's messages, one Lua file per script (`protocol/lua/*.lua`) and the one way to call them |
//! | transport | `transport::{connect, node, runtime_watch, sentinel, tls, slot}` | connections (one server, Redis Cluster, a Sentinel-resolved primary) re-made on lockcore's background runtime once theirs shut down, TLS, cluster slots; runs no lock script |
//! | base | `error`, `options`, `util::{time, escape, redact, defer, spawn, background}` | errors, options, small helpers every layer uses, and the process-wide background runtime that work moves to once its runtime shut down |
//!
//! # Features
//!
//! | feature | what |
//! |---|---|
//! | `macros` (default) | re-exports `#[distributed_lock]` (and `#[idempotent]` with `idempotency`) from `lockmacro` |
//! | `tls` | `rediss://` through rustls with the ring provider; `LockManagerBuilder::tls_root_ca_pem` and `tls_client_cert_pem` |
//! | `metrics` | counters and histograms through the `metrics` facade, labelled by key template |
//! | `idempotency` | `LockManager::idempotent`, `Idempotency` and `#[lockcore::idempotent]` (serde) |
//!
//! # The guide
//!
//! The repository's guide (`docs/`, an mdBook: `mdbook serve docs`) explains what the API
//! reference does not, one chapter each: locks and guards (`docs/src/locks.md`), the attribute
//! (`attribute.md`), the watchdog (`watchdog.md`), fencing tokens with the SQL pattern
//! (`fencing.md`), idempotency keys (`idempotency.md`), semaphores and read-write locks
//! (`family.md`), job locks and leader election (`jobs.md`), the hand-off queue (`handoff.md`),
//! Redlock (`redlock.md`), topologies with TLS and the ACL rule (`topologies.md`), sharing
//! locks with other clients (`sharing.md`), security notes (`security.md`), operations:
//! `lockctl`, tracing and metrics (`operations.md`), the proof under faults (`nemesis.md`) and
//! the benchmarks (`benchmarks.md`).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs, missing_debug_implementations)]

mod backend;
mod builder;
mod error;
mod features;
mod global;
mod guard;
mod lease;
mod manager;
mod options;
mod protocol;
mod shared;
mod transport;
mod util;

#[doc(hidden)]
pub mod __private;

/// The README's and the guide's Rust snippets, compiled as doc tests.
#[cfg(doctest)]
mod guide;

pub use builder::LockManagerBuilder;
pub use error::LockError;
pub use features::admin;
pub use features::election::Leadership;
pub use features::fenced::gate::FenceGate;
pub use features::fenced::redis::FencedRedis;
pub use features::fenced::stale::{FenceError, StaleWrite};
pub use features::holder::Holder;
#[cfg(feature = "idempotency")]
#[cfg_attr(docsrs, doc(cfg(feature = "idempotency")))]
pub use features::idempotency::Idempotency;
pub use features::multi::MultiGuard;
pub use features::rwlock::RwLock;
pub use features::semaphore::Semaphore;
pub use global::{default_manager, set_default_manager};
pub use guard::LockGuard;
pub use manager::LockManager;
pub use options::LockOptions;
pub use protocol::fencing::FencingCounter;
pub use protocol::keyspace::{self, DEFAULT_KEY_PREFIX};
/// The redis-rs crate lockcore is built on, for [`LockManagerBuilder::client`] and
/// [`LockError::Redis`]: use it (or the same major version) where a `redis` type meets lockcore.
pub use redis;
pub use util::redact::redact_url;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use lockmacro::distributed_lock;
#[cfg(all(feature = "macros", feature = "idempotency"))]
#[cfg_attr(docsrs, doc(cfg(all(feature = "macros", feature = "idempotency"))))]
pub use lockmacro::idempotent;
