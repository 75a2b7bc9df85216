//! [`Lua`]: one of lockcore's scripts, assembled from the files in `lua/` (its body, with the
//! helper files it `@include`s and lockcore's own constants written in), with the commands it
//! runs (named when an ACL refuses one) and its own `SCRIPT LOAD`.

use redis::Script;

/// The helper files a script may `-- @include`: their name (the file's, without `.lua`) and text.
const HELPERS: [(&str, &str); 10] = [
    ("value_of", include_str!("lua/value_of.lua")),
    ("fencing", include_str!("lua/fencing.lua")),
    ("not_a_lock", include_str!("lua/not_a_lock.lua")),
    ("queue", include_str!("lua/queue.lua")),
    ("entries", include_str!("lua/entries.lua")),
    ("shares", include_str!("lua/shares.lua")),
    ("hand_over", include_str!("lua/hand_over.lua")),
    ("enqueue", include_str!("lua/enqueue.lua")),
    ("decimal", include_str!("lua/decimal.lua")),
    ("hold", include_str!("lua/hold.lua")),
];

/// `body` with each `-- @include NAME` line replaced by that helper's text, and each `@NAME@`
/// by the value of constant `NAME` from `constants`.
fn assemble(body: &str, constants: &[(&str, String)]) -> String {
    let mut code = String::with_capacity(body.len() * 3);
    for line in body.lines() {
        match line.trim_start().strip_prefix("-- @include ") {
            Some(name) => {
                let helper = HELPERS.iter().find(|(known, _)| *known == name.trim());
                code.push_str(helper.map_or("", |(_, text)| text));
            }
            None => {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
    for (name, value) in constants {
        code = code.replace(&format!("@{name}@"), value);
    }
    code
}

/// A Lua script: its source, for a `SCRIPT LOAD` on one node, and its redis-rs handle (the
/// SHA1 that `EVALSHA` sends), which it dereferences to.
pub(crate) struct Lua {
    code: String,
    script: Script,
    commands: &'static str,
}

impl Lua {
    /// The script of the file text `body`, with `constants` written in; it runs `commands`
    /// (upper case, comma-separated).
    pub(crate) fn new(body: &str, constants: &[(&str, String)], commands: &'static str) -> Self {
        let code = assemble(body, constants);
        Lua {
            script: Script::new(&code),
            code,
            commands,
        }
    }

    /// The commands the script runs, for an ACL refusal inside it: Redis reports only "the user
    /// executing the script can't run this command", without naming the command.
    pub(crate) fn commands(&self) -> &'static str {
        self.commands
    }

    /// `SCRIPT LOAD` of this script.
    pub(crate) fn load_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(&self.code);
        cmd
    }

    /// `SCRIPT LOAD` of this script on `conn`.
    pub(crate) async fn load_on(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<()> {
        let reply: redis::Value = self.load_cmd().query_async(conn).await?;
        self.check_loaded(&reply)
    }

    /// A `SCRIPT LOAD` reply other than this script's SHA1 is an error. redis-rs' own loader
    /// (`Script::load_async`, and `invoke_async` after `NOSCRIPT`) asserts it instead, which
    /// panics a debug build on a server's reply.
    pub(crate) fn check_loaded(&self, reply: &redis::Value) -> redis::RedisResult<()> {
        let hash: &[u8] = match reply {
            redis::Value::BulkString(hash) => hash,
            redis::Value::SimpleString(hash) => hash.as_bytes(),
            _ => &[],
        };
        if hash == self.get_hash().as_bytes() {
            return Ok(());
        }
        Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the server answered `SCRIPT LOAD` with another value than the script's SHA1",
            format!("expected {}, got {reply:?}", self.get_hash()),
        )))
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;

    fn deref(&self) -> &Script {
        &self.script
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_and_constants_are_written_in() {
        let code = assemble("a\n-- @include decimal\nb @X@\n", &[("X", "7".to_owned())]);
        assert!(code.starts_with("a\n"));
        assert!(code.contains("local function below(a, b)"));
        assert!(code.ends_with("b 7\n"), "{code}");
    }

    #[test]
    fn every_include_of_every_file_is_known() {
        for (name, text) in crate::protocol::scripts::FILES {
            for line in text.lines() {
                if let Some(include) = line.trim_start().strip_prefix("-- @include ") {
                    assert!(
                        HELPERS
                            .iter()
                            .any(|(known, _)| *known == include.trim() && !known.is_empty()),
                        "{name} includes {include}"
                    );
                }
            }
        }
    }
}
