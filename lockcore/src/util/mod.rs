//! Small helpers below every layer: escaping, redaction, drop guards, spawning, the background
//! runtime.

pub(crate) mod background;
pub(crate) mod defer;
pub(crate) mod escape;
pub(crate) mod redact;
pub(crate) mod spawn;
pub(crate) mod time;
