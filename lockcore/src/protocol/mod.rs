//! The wire format: key and channel names, the lock value, the fencing counter's place, hash
//! slots, and the Lua scripts with the one way to call them.

pub(crate) mod call;
pub(crate) mod explain;
pub(crate) mod fencing;
pub mod keyspace;
pub(crate) mod lua;
pub(crate) mod messages;
pub(crate) mod scripts;
pub(crate) mod value;
