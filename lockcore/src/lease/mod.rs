//! A held lease and what keeps it: its state, the watchdog, the first renewal after a hand-over,
//! the manager's live leases, and their telemetry.

pub(crate) mod live;
pub(crate) mod promotion;
pub(crate) mod state;
pub(crate) mod telemetry;
pub(crate) mod watchdog;
