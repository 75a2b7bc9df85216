//! [`FencedRedis`]: a Redis key written only with a fencing token at least as new as the newest
//! one it has accepted (`lua/fenced_set.lua`), and the fencing rule for every kind of resource.

use redis::{FromRedisValue, ToRedisArgs};

use crate::features::fenced::stale::{FenceError, StaleWrite};
use crate::protocol::call::Call;
use crate::protocol::scripts::FENCED_SET;

/// A Redis key written only with a fencing token at least as new as the newest one it has
/// accepted; and the fencing rule for every kind of resource.
///
/// A lease cannot stop a holder that was paused past its TTL (a GC pause, `SIGSTOP`, a swapped
/// out VM, a slow network) from writing after the next holder took over: when it wakes up it
/// still believes it holds the lock. The fix (Martin Kleppmann, "How to do distributed locking",
/// 2016) is on the *resource*: every write carries the holder's
/// [`fencing_token`](crate::guard::LockGuard::fencing_token), the resource remembers the newest token
/// it accepted, and it rejects a write whose token is older. The paused holder's token is older
/// than its successor's, so its late write is rejected instead of clobbering the newer one.
///
/// Three forms of the check, one per kind of resource:
///
/// | resource | check |
/// |---|---|
/// | a Redis key | [`FencedRedis`]: one Lua script compares and writes atomically |
/// | a SQL row | the `UPDATE ... WHERE fence <= ?token` pattern below (no Rust type needed) |
/// | in-process state | [`FenceGate`](crate::FenceGate): a value behind a mutex together with its fence |
///
/// # The rule: reject older, accept equal
/// A write with token `t` is accepted when `t >= latest` (the resource's stored token; 0 when it
/// has none) and then stores `t` as the new `latest`; it is rejected, with [`StaleWrite`], when
/// `t < latest`. Every acquisition mints a distinct token, so an equal token can only come from
/// the same lease: one holder may write several times under one lock, and may retry a write
/// whose reply was lost, without tripping over its own fence. A rejection therefore always means
/// that a *newer* holder has already written (`presented < latest`).
///
/// # The SQL pattern
/// Keep the fence next to the data, in the same row, and make the comparison part of the
/// `UPDATE`, so that the check and the write are one atomic statement:
///
/// ```sql
/// ALTER TABLE stock ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
///
/// UPDATE stock SET qty = ?1, fence = ?2 WHERE id = ?3 AND fence <= ?2;
/// -- 1 row changed: written.  0 rows changed: stale write (a newer holder wrote), reject it.
/// ```
///
/// Read the row and check `fence` yourself only inside the same transaction as the write (and
/// at an isolation level that stops a concurrent writer in between); the single-statement form
/// above needs neither. SQLite stores `INTEGER` as `i64`: tokens from Redis `INCR` fit.
///
/// # What fencing does not do
/// - The resource knows only the tokens it has seen. If the new holder has not written yet, the
///   paused holder's late write is still accepted (it is then simply the latest write). The
///   guarantee is: once a holder with token `n` has written, no write with a token below `n`
///   ever lands.
/// - A resource that forgets its fence (in-memory state lost on restart while the data stays)
///   accepts stale writes again: persist the fence with the data ([`FencedRedis`] and the SQL
///   pattern do), or restore it with [`FenceGate::with_latest`](crate::FenceGate::with_latest).
/// - Tokens are comparable only when they come from the same counter: the same Redis, the same
///   key prefix, and (with [`FencingCounter::PerSlot`](crate::protocol::fencing::FencingCounter::PerSlot)) the same
///   lock key. They stop being monotonic if the counter is lost: Redis restarted without
///   persistence (use AOF with `appendfsync always`), a replica promoted before it received the
///   latest `INCR`, or the counter evicted under an `allkeys-*` `maxmemory-policy` (the manager
///   logs a warning for that one).
///
/// # The Redis form
/// The key is a hash with two fields: `value` (the data, any single Redis argument) and `fence`
/// (the token of the latest accepted write, a decimal `u64`). [`set`](Self::set) runs one Lua
/// script (`EVALSHA`, falling back to `EVAL` on `NOSCRIPT`) that compares and writes
/// atomically: no other write can come in between. The key may live on any Redis, not
/// necessarily the one that holds the locks; the handle holds no connection, pass one to each
/// call (any [`redis::aio::ConnectionLike`], e.g. a `MultiplexedConnection` or a
/// `ConnectionManager`).
///
/// ```no_run
/// # async fn demo(
/// #     locks: lockcore::LockManager,
/// #     mut conn: redis::aio::MultiplexedConnection,
/// # ) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use lockcore::{FenceError, FencedRedis, LockOptions};
///
/// let stock = FencedRedis::new("stock:42");
/// let guard = locks.acquire("stock:42", &LockOptions::new(Duration::from_secs(5))).await?;
/// // ... a GC pause here may outlast the lease ...
/// match stock.set(&mut conn, guard.fencing_token(), 7).await {
///     Ok(()) => {}
///     Err(FenceError::Stale(stale)) => eprintln!("{stale}"), // a newer holder has written
///     Err(other) => return Err(other.into()),
/// }
/// let current: Option<(u32, u64)> = stock.get(&mut conn).await?; // (value, fence)
/// # let _ = current;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencedRedis {
    key: String,
}

impl FencedRedis {
    /// A handle to the resource key `key`, used byte for byte (no prefix is added). On Redis
    /// Cluster the key may be in any slot: the script touches this one key only.
    pub fn new(key: impl Into<String>) -> Self {
        FencedRedis { key: key.into() }
    }

    /// The resource's Redis key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Writes `value` with `fencing_token` if no newer token has been accepted: sets the hash
    /// fields `value` and `fence` when `fencing_token >= fence` (a missing key or field counts
    /// as fence 0). One round trip.
    ///
    /// # Errors
    /// - [`FenceError::Stale`] when the key holds a newer fence; nothing is written, and the
    ///   error carries the stored token as `latest`.
    /// - [`FenceError::Redis`] when `value` does not encode to exactly one Redis argument
    ///   (checked before any network call), when the key is not a hash (`WRONGTYPE`), or on a
    ///   connection failure.
    pub async fn set<C>(
        &self,
        conn: &mut C,
        fencing_token: u64,
        value: impl ToRedisArgs,
    ) -> Result<(), FenceError>
    where
        C: redis::aio::ConnectionLike,
    {
        if fencing_token == crate::protocol::fencing::NO_FENCING_TOKEN {
            return Err(FenceError::Stale(StaleWrite::fencing_off(&self.key, 0)));
        }
        let [value] = <[Vec<u8>; 1]>::try_from(value.to_redis_args()).map_err(|args| {
            FenceError::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "a fenced value must encode to exactly one Redis argument",
                format!(
                    "the value for `{}` encodes to {} arguments",
                    self.key,
                    args.len()
                ),
            )))
        })?;
        let (written, fence): (i64, u64) =
            Call::new(&FENCED_SET, 1, 3, self.key.len() + value.len())
                .arg(&self.key)
                .arg(fencing_token)
                .arg(value)
                .send(conn)
                .await?;
        if written == 1 {
            Ok(())
        } else {
            Err(FenceError::Stale(StaleWrite {
                resource: self.key.clone(),
                presented: fencing_token,
                latest: fence,
            }))
        }
    }

    /// Reads the value and the fence of the latest accepted write, in one `HMGET`. `Ok(None)`
    /// when the key or its `value` field is missing; a missing `fence` reads as 0.
    ///
    /// # Errors
    /// A [`redis::RedisError`] on a connection failure, when the key is not a hash, or when the
    /// value does not convert to `V`.
    pub async fn get<V, C>(&self, conn: &mut C) -> Result<Option<(V, u64)>, redis::RedisError>
    where
        V: FromRedisValue,
        C: redis::aio::ConnectionLike,
    {
        let (value, fence): (Option<V>, Option<u64>) = redis::cmd("HMGET")
            .arg(&self.key)
            .arg("value")
            .arg("fence")
            .query_async(conn)
            .await?;
        Ok(value.map(|value| (value, fence.unwrap_or(0))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>(_: &T) {}

    /// Compile-time check: the futures can be `tokio::spawn`ed with the usual connections.
    #[allow(dead_code, clippy::let_underscore_future)]
    async fn futures_are_send(
        mut multiplexed: redis::aio::MultiplexedConnection,
        mut manager: redis::aio::ConnectionManager,
    ) {
        let row = FencedRedis::new("k");
        assert_send(&row.set(&mut multiplexed, 1, "v"));
        assert_send(&row.set(&mut manager, 1, 2_u32));
        assert_send(&row.get::<String, _>(&mut multiplexed));
    }
}
