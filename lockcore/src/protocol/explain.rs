//! Why a script failed, in words an operator can act on: an ACL refusal inside a script names
//! the script's commands and the ACL rule to grant.

use crate::protocol::lua::Lua;

/// `error` from invoking `script`, with the script's commands named when the ACL refused one
/// of them (see the ACL rule in the guide, `docs/src/topologies.md`).
pub(crate) fn explain(script: &Lua, error: redis::RedisError) -> redis::RedisError {
    let text = error.to_string();
    // Redis 7.0: "... can't run this command ..."; Valkey 8: "ACL failure in script: user .. has
    // no permissions to run the '..' command".
    if text.contains("can't publish to the channel") || text.contains("no permissions to access") {
        return redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
            "NOPERM: the ACL user may not use a lockcore key or channel",
            format!(
                "every key and channel lockcore uses is under the manager's prefix: grant `~<prefix>*` and `&<prefix>*` as in lockcore's guide (\"Topologies\", \"ACL\"). Redis said: {text}"
            ),
        ));
    }
    if !text.contains("can't run this command") && !text.contains("no permissions to run") {
        return error;
    }
    redis::RedisError::from((
        redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm),
        "NOPERM: the ACL user may not run a command of a lockcore script",
        format!(
            "the script runs {}; grant them as in lockcore's guide (\"Topologies\", \"ACL\"). Redis said: {text}",
            script.commands()
        ),
    ))
}
