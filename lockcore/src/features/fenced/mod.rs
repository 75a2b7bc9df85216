//! The resource side of fencing: [`FencedRedis`] (a Redis key), [`FenceGate`] (in-process
//! state), [`StaleWrite`] and [`FenceError`]. The rule, the SQL pattern and the limits are
//! documented on [`FencedRedis`], where rustdoc shows them (this module is private).

use std::sync::{Mutex, MutexGuard, PoisonError};

use once_cell::sync::Lazy;
use redis::{FromRedisValue, ToRedisArgs};

use crate::protocol::scripts::Lua;

/// A write was rejected because the resource already accepted a newer fencing token: the
/// writer's lease has ended and another holder has written since. Also the rejection of token
/// 0, the token of a guard acquired with [`FencingCounter::Off`](crate::protocol::fencing::FencingCounter::Off):
/// fencing is off, and such a guard can fence nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct StaleWrite {
    /// What was written to: the Redis key, the table and row, or the [`FenceGate`]'s name.
    pub resource: String,
    /// The fencing token the rejected write carried.
    pub presented: u64,
    /// The newest token the resource has accepted; greater than `presented`, except for a
    /// refused token 0 (fencing off), where it may be 0 too.
    pub latest: u64,
}

impl StaleWrite {
    /// A refusal of a write whose guard was acquired with fencing off.
    fn fencing_off(resource: &str, latest: u64) -> Self {
        StaleWrite {
            resource: resource.to_owned(),
            presented: crate::protocol::fencing::NO_FENCING_TOKEN,
            latest,
        }
    }

    /// `true` when the write was refused because its guard has no fencing token
    /// ([`FencingCounter::Off`](crate::protocol::fencing::FencingCounter::Off)), not because a newer holder wrote.
    pub fn is_fencing_off(&self) -> bool {
        self.presented == crate::protocol::fencing::NO_FENCING_TOKEN
    }

    fn describe(&self) -> String {
        if self.is_fencing_off() {
            format!(
                "write to `{}` refused: fencing token 0 comes from a lock acquired with FencingCounter::Off (fencing is off); acquire with a fencing counter to write to a fenced resource",
                self.resource
            )
        } else {
            format!(
                "stale write to `{}` rejected: fencing token {} is older than {}, the newest token it has accepted",
                self.resource, self.presented, self.latest
            )
        }
    }
}

/// Why a [`FencedRedis::set`] did not write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The resource holds a newer fencing token: this writer is a stale holder.
    #[error(transparent)]
    Stale(#[from] StaleWrite),
    /// Redis answered with an error (for example `WRONGTYPE` when the key is not a hash), the
    /// connection failed, or the value did not encode to exactly one argument. Whether the write
    /// happened is unknown when the reply was lost; retrying with the same token is safe.
    #[error("fenced write failed: {0}")]
    Redis(#[from] redis::RedisError),
}

impl FenceError {
    /// `true` for [`FenceError::Stale`]: a newer holder has written; stop and do not retry.
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale(_))
    }
}

/// The fenced write, as one Lua script: compare the stored fence with the caller's token and
/// write value and token together, atomically.
///
/// - `KEYS[1]` the resource key, a hash with fields `value` and `fence`
/// - `ARGV[1]` the fencing token (decimal `u64`), `ARGV[2]` the value
///
/// Returns `{1, token}` when written, `{0, stored_fence}` when the stored fence is newer. Tokens
/// are compared as decimal strings (longer is larger, then byte by byte), not as Lua numbers,
/// which are doubles and would round tokens above 2^53.
static FENCED_SET: Lazy<Lua> = Lazy::new(|| {
    Lua::new(
        r"
local function canonical(s)
  return string.match(s, '^%d+$') ~= nil and (#s == 1 or string.sub(s, 1, 1) ~= '0')
end
local function older(a, b)
  if #a ~= #b then return #a < #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return false
end
local token = ARGV[1]
if not canonical(token) then
  return redis.error_reply('ERR fencing token must be a decimal u64 without leading zeros')
end
local stored = redis.call('HGET', KEYS[1], 'fence')
if stored then
  if not canonical(stored) then
    return redis.error_reply('ERR the fence field of the resource key is not a decimal u64')
  end
  if older(token, stored) then
    return {0, stored}
  end
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'fence', token)
return {1, token}
",
    )
});

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
/// | in-process state | [`FenceGate`]: a value behind a mutex together with its fence |
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
///   pattern do), or restore it with [`FenceGate::with_latest`].
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
            crate::protocol::scripts::Call::new(&FENCED_SET, 1, 3, self.key.len() + value.len())
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

/// In-process state that accepts writes only with a fencing token at least as new as the
/// newest one it has accepted: the value and its fence behind one mutex, so that the check and
/// the write are a single critical section.
///
/// Use it where the resource is this process's own state (a cache, a file, a service that
/// receives writes from lock holders). For a Redis key use [`FencedRedis`]; for a SQL row, the
/// `UPDATE .. WHERE fence <= ?` pattern in [`FencedRedis`]'s docs.
///
/// The write closure runs under a `std::sync::Mutex`: keep it short and never block on async
/// work inside it. A closure that panics poisons nothing: the next call proceeds with the value
/// as the closure left it, and the fence already advanced.
///
/// ```
/// use lockcore::FenceGate;
///
/// let stock = FenceGate::new("stock:42", 10_u32);
/// stock.write(34, |qty| *qty -= 1)?; // holder with token 34
/// let stale = stock.write(33, |qty| *qty = 0).unwrap_err(); // a paused holder wakes up
/// assert_eq!((stale.presented, stale.latest), (33, 34));
/// assert_eq!(stock.read(|qty| *qty), 9);
/// # Ok::<(), lockcore::StaleWrite>(())
/// ```
#[derive(Debug)]
pub struct FenceGate<T> {
    resource: String,
    state: Mutex<Fenced<T>>,
}

#[derive(Debug)]
struct Fenced<T> {
    latest: u64,
    value: T,
}

impl<T> FenceGate<T> {
    /// A gate named `resource` (used in [`StaleWrite`]) around `value`, with no token accepted
    /// yet (fence 0).
    pub fn new(resource: impl Into<String>, value: T) -> Self {
        Self::with_latest(resource, value, 0)
    }

    /// A gate that has already accepted `latest`: for state restored from storage together
    /// with its fence. A gate that restarts at 0 over old data would accept stale writes.
    pub fn with_latest(resource: impl Into<String>, value: T, latest: u64) -> Self {
        FenceGate {
            resource: resource.into(),
            state: Mutex::new(Fenced { latest, value }),
        }
    }

    /// Runs `write` on the value if `fencing_token` is not older than the newest token accepted
    /// so far, and records the token; returns what `write` returned.
    ///
    /// # Errors
    /// [`StaleWrite`] when a newer token has been accepted; `write` is not called.
    pub fn write<R>(
        &self,
        fencing_token: u64,
        write: impl FnOnce(&mut T) -> R,
    ) -> Result<R, StaleWrite> {
        let mut state = self.lock();
        if fencing_token == crate::protocol::fencing::NO_FENCING_TOKEN {
            return Err(StaleWrite::fencing_off(&self.resource, state.latest));
        }
        if fencing_token < state.latest {
            return Err(StaleWrite {
                resource: self.resource.clone(),
                presented: fencing_token,
                latest: state.latest,
            });
        }
        state.latest = fencing_token;
        Ok(write(&mut state.value))
    }

    /// Runs `read` on the current value.
    pub fn read<R>(&self, read: impl FnOnce(&T) -> R) -> R {
        read(&self.lock().value)
    }

    /// The newest fencing token accepted so far (0 before the first write).
    pub fn latest(&self) -> u64 {
        self.lock().latest
    }

    /// The name given at construction.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The value and the newest accepted token, e.g. to persist them together.
    pub fn into_inner(self) -> (T, u64) {
        let state = self
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (state.value, state.latest)
    }

    fn lock(&self) -> MutexGuard<'_, Fenced<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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

    #[test]
    fn accepts_newer_and_equal_rejects_older() {
        let gate = FenceGate::new("stock:1", Vec::new());
        assert_eq!(gate.latest(), 0);
        gate.write(5, |v| v.push(5)).unwrap();
        gate.write(5, |v| v.push(55)).unwrap(); // same lease writes again
        gate.write(9, |v| v.push(9)).unwrap();
        let err = gate.write(7, |v| v.push(7)).unwrap_err();
        assert_eq!(
            err,
            StaleWrite {
                resource: "stock:1".into(),
                presented: 7,
                latest: 9
            }
        );
        assert_eq!(gate.latest(), 9, "a rejected write does not move the fence");
        assert_eq!(gate.into_inner(), (vec![5, 55, 9], 9));
    }

    #[test]
    fn rejected_write_closure_never_runs() {
        let gate = FenceGate::with_latest("row", 0_u32, 10);
        let mut ran = false;
        assert!(gate.write(3, |_| ran = true).is_err());
        assert!(!ran);
        assert_eq!(gate.read(|v| *v), 0);
    }

    #[test]
    fn display_names_resource_and_both_tokens() {
        let msg = StaleWrite {
            resource: "stock:42".into(),
            presented: 33,
            latest: 34,
        }
        .to_string();
        assert!(msg.starts_with("stale write"), "{msg}");
        for part in ["stock:42", "33", "34"] {
            assert!(msg.contains(part), "{msg} lacks {part}");
        }
        let err = FenceError::from(StaleWrite {
            resource: "k".into(),
            presented: 1,
            latest: 2,
        });
        assert!(err.is_stale());
        assert!(err.to_string().starts_with("stale write"));
    }

    #[test]
    fn panicking_writer_does_not_wedge_the_gate() {
        let gate = Arc::new(FenceGate::new("g", 0_u32));
        let g = Arc::clone(&gate);
        let joined = std::thread::spawn(move || {
            g.write(1, |_| panic!("writer crashed")).ok();
        })
        .join();
        assert!(joined.is_err());
        assert_eq!(gate.latest(), 1);
        gate.write(2, |v| *v = 2).unwrap();
        assert_eq!(gate.read(|v| *v), 2);
    }

    /// Many threads race with shuffled tokens: every accepted write must carry a token at least
    /// as new as every write accepted before it, and the final fence is the maximum.
    #[test]
    fn concurrent_writers_never_land_an_older_token_after_a_newer_one() {
        let gate = Arc::new(FenceGate::new("log", Vec::<u64>::new()));
        let threads: Vec<_> = (0..8_u64)
            .map(|t| {
                let gate = Arc::clone(&gate);
                std::thread::spawn(move || {
                    let mut rejected = 0;
                    for i in 0..500_u64 {
                        let token = (i * 8 + t) ^ 0b101; // not in order per thread pair
                        if gate.write(token, |log| log.push(token)).is_err() {
                            rejected += 1;
                        }
                    }
                    rejected
                })
            })
            .collect();
        let rejected: u32 = threads.into_iter().map(|h| h.join().unwrap()).sum();
        let (log, latest) = Arc::try_unwrap(gate).unwrap().into_inner();
        assert!(
            log.windows(2).all(|w| w[0] <= w[1]),
            "out of order: {log:?}"
        );
        assert_eq!(latest, *log.last().unwrap());
        assert_eq!(log.len() + rejected as usize, 8 * 500);
    }
}
