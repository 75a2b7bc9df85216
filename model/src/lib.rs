//! A model of lockcore's single-node protocol, checked exhaustively with
//! [stateright](https://docs.rs/stateright), and tied to the scripts by a differential test.
//!
//! - [`store`]: one Redis server's keyspace, with keys that expire by the server's clock;
//! - [`scripts`]: each Lua script of `lockcore/src/protocol/lua/` re-stated as one atomic step
//!   over the store (the differential test holds them to the real scripts);
//! - [`client`]: a lockcore client as the model runs it: the waiting acquire of
//!   `backend/waiting.rs` (queue entry, push, re-check), the guard's deadline (its belief),
//!   renewal, release, and the faults it meets;
//! - [`system`]: the stateright [`Model`](stateright::Model): the server, the clients, the
//!   network between them, the clock, and the properties;
//! - [`trace`]: a counterexample as a readable trace.
//!
//! The guide's chapter "The protocol, model-checked" (`docs/src/model.md`) says what is
//! covered and how to run the checks.

pub mod client;
pub mod scripts;
pub mod store;
pub mod system;
pub mod trace;
