//! The README's and the guide's Rust snippets, compiled as doc tests (`cargo test -p lockcore
//! --doc`): every page of `docs/src/SUMMARY.md`, one module each. Only rustdoc's doctest pass
//! reads this module, so the published crate builds without the repository's `docs/`.

#[cfg(feature = "macros")]
#[doc = include_str!("../README.md")]
mod readme {}

#[doc = include_str!("../../docs/src/introduction.md")]
mod introduction {}

#[doc = include_str!("../../docs/src/locks.md")]
mod locks {}

#[cfg(feature = "macros")]
#[doc = include_str!("../../docs/src/attribute.md")]
mod attribute {}

#[doc = include_str!("../../docs/src/watchdog.md")]
mod watchdog {}

#[doc = include_str!("../../docs/src/fencing.md")]
mod fencing {}

#[cfg(all(feature = "macros", feature = "idempotency"))]
#[doc = include_str!("../../docs/src/idempotency.md")]
mod idempotency {}

#[cfg(feature = "macros")]
#[doc = include_str!("../../docs/src/family.md")]
mod family {}
#[doc = include_str!("../../docs/src/jobs.md")]
mod jobs {}

#[doc = include_str!("../../docs/src/handoff.md")]
mod handoff {}

#[doc = include_str!("../../docs/src/redlock.md")]
mod redlock {}

#[doc = include_str!("../../docs/src/topologies.md")]
mod topologies {}

#[doc = include_str!("../../docs/src/sharing.md")]
mod sharing {}

#[doc = include_str!("../../docs/src/security.md")]
mod security {}

#[doc = include_str!("../../docs/src/operations.md")]
mod operations {}

#[doc = include_str!("../../docs/src/nemesis.md")]
mod nemesis {}

#[doc = include_str!("../../docs/src/benchmarks.md")]
mod benchmarks {}

#[doc = include_str!("../../docs/src/development.md")]
mod development {}
