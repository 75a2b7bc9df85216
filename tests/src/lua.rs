//! Lua fixtures of the tests and benchmarks, one file each under `lua/` (its header says its
//! keys, arguments and reply): what naive clients and benchmark floors run, never lockcore's
//! protocol, whose scripts live in `lockcore/src/protocol/lua/`.

/// `lua/compare_and_delete.lua`.
pub const COMPARE_AND_DELETE: &str = include_str!("lua/compare_and_delete.lua");
/// `lua/set_nx_incr.lua`.
pub const SET_NX_INCR: &str = include_str!("lua/set_nx_incr.lua");
/// `lua/raw_hand_over.lua`.
pub const RAW_HAND_OVER: &str = include_str!("lua/raw_hand_over.lua");
/// `lua/raw_claim.lua`.
pub const RAW_CLAIM: &str = include_str!("lua/raw_claim.lua");
/// `lua/fenced_claim.lua`.
pub const FENCED_CLAIM: &str = include_str!("lua/fenced_claim.lua");
/// `lua/set_nx_px.lua`.
pub const SET_NX_PX: &str = include_str!("lua/set_nx_px.lua");
/// `lua/exists.lua`.
pub const EXISTS: &str = include_str!("lua/exists.lua");
