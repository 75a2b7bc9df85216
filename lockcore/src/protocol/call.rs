//! [`Call`]: the one way lockcore calls a script: `EVALSHA` in one command buffer, the script
//! loaded (on the one node that refused it) and the call sent again on `NOSCRIPT`, an ACL
//! refusal [`explain`](crate::protocol::explain::explain)ed.

use crate::protocol::explain::explain;
use crate::protocol::lua::Lua;
use crate::transport::node::Node;

/// One `EVALSHA` of a script, written straight into one command buffer of the right size
/// (redis-rs' `ScriptInvocation` allocates a buffer per key and argument, then copies them
/// all into the command). On a `NOSCRIPT` reply it loads the script on the node that serves the
/// call's first key, and only there, then sends the command again: redis-rs' `invoke_async`
/// sends that `SCRIPT LOAD` to every node of a cluster and so waits for the slowest shard.
pub(crate) struct Call<'s> {
    script: &'s Lua,
    cmd: redis::Cmd,
    keys: usize,
}

impl<'s> Call<'s> {
    /// A call with `keys` keys, about `args` keys and arguments in all, of about `bytes` bytes.
    pub(crate) fn new(script: &'s Lua, keys: usize, args: usize, bytes: usize) -> Self {
        let mut cmd = redis::Cmd::with_capacity(3 + args, 64 + bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        Call { script, cmd, keys }
    }

    /// Appends a key or an argument, in order: the keys first.
    pub(crate) fn arg(&mut self, arg: impl redis::ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }

    /// The script and its `EVALSHA` command, for a pipeline that sends more after it (the
    /// replicas' `WAIT`).
    pub(crate) fn parts(&self) -> (&'s Lua, &redis::Cmd) {
        (self.script, &self.cmd)
    }

    /// Sends the call; errors are [`explain`]ed.
    pub(crate) async fn invoke<T: redis::FromRedisValue>(
        &self,
        node: &mut Node,
    ) -> redis::RedisResult<T> {
        let reply = match self.cmd.query_async(node).await {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                match self.load(node).await {
                    Ok(()) => self.cmd.query_async(node).await,
                    Err(load) => Err(load),
                }
            }
            other => other,
        };
        reply.map_err(|e| explain(self.script, e))
    }

    /// `SCRIPT LOAD` on the node that serves the first key (every node without a key).
    pub(crate) async fn load(&self, node: &mut Node) -> redis::RedisResult<()> {
        // The command is `EVALSHA sha numkeys key..`: the first key is its fourth word.
        let first_key = (self.keys > 0)
            .then(|| self.cmd.args_iter().nth(3))
            .flatten()
            .and_then(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            });
        match first_key {
            Some(key) => {
                let reply: redis::Value = node.query_for_key(&key, self.script.load_cmd()).await?;
                self.script.check_loaded(&reply)
            }
            None => self.script.load_on(node).await,
        }
    }

    /// Sends the call on any connection (a resource's, not a lock node), and again after
    /// loading the script there when the server answers `NOSCRIPT`. Errors are not explained.
    pub(crate) async fn send<T: redis::FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> redis::RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.script.load_on(conn).await?;
                self.cmd.query_async(conn).await
            }
            other => other,
        }
    }
}

/// Loads every script into the node's script cache (`SCRIPT LOAD`), so that the first burst of
/// acquires does not each meet `NOSCRIPT` and load the script again.
pub(crate) async fn preload_on(
    conn: &mut impl redis::aio::ConnectionLike,
) -> redis::RedisResult<()> {
    for script in crate::protocol::scripts::lock_scripts() {
        script.load_on(conn).await?;
    }
    Ok(())
}
