//! Small helpers below every layer: escaping, redaction, drop guards, spawning.

pub(crate) mod defer;
pub(crate) mod escape;
pub(crate) mod redact;
pub(crate) mod spawn;
pub(crate) mod time;
