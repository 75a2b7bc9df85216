//! Raw-connection probes for assertions: one [`query`] that names the failing command, the
//! plain reads and writes a test does "by hand" (as another client would), and bounded polls of server-side state
//! (there is no signal for a key's expiry or a script's side effect).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use crate::{RedisServer, fencing_counter_key};

/// A command from its words: `cmd(&["HSET", key, field, value])`.
pub fn cmd(words: &[&str]) -> redis::Cmd {
    let mut command = redis::cmd(words.first().copied().unwrap_or("PING"));
    for word in words.iter().skip(1) {
        command.arg(*word);
    }
    command
}

/// `GET counter` → 1 ms pause → `SET counter value+1`: a lost update whenever two of these
/// interleave.
pub async fn non_atomic_increment(con: &mut MultiplexedConnection) {
    let value: Option<i64> = query(con, redis::cmd("GET").arg("counter")).await;
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = query(
        con,
        redis::cmd("SET").arg("counter").arg(value.unwrap_or(0) + 1),
    )
    .await;
}

/// The value [`non_atomic_increment`] counts up, read on a connection of its own.
pub async fn counter_value(server: &RedisServer) -> i64 {
    query(
        &mut server.connection().await,
        redis::cmd("GET").arg("counter"),
    )
    .await
}

/// Runs `cmd` on a raw connection, or panics naming the command and its arguments.
pub async fn query<T: redis::FromRedisValue>(
    con: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> T {
    cmd.query_async(con).await.unwrap_or_else(|e| {
        let words: Vec<String> = cmd
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<cursor>".to_owned(),
            })
            .collect();
        panic!("{}: {e}", words.join(" "))
    })
}

/// `GET key` on a raw connection.
pub async fn get(con: &mut MultiplexedConnection, key: &str) -> Option<String> {
    query(con, redis::cmd("GET").arg(key)).await
}

/// `PTTL key`: -2 when missing, -1 when no expiry.
pub async fn pttl(con: &mut MultiplexedConnection, key: &str) -> i64 {
    query(con, redis::cmd("PTTL").arg(key)).await
}

/// `EXISTS key`.
pub async fn exists(con: &mut MultiplexedConnection, key: &str) -> bool {
    query::<i64>(con, redis::cmd("EXISTS").arg(key)).await == 1
}

/// `DEL key`: a delete "by hand", as an operator or another client would do it.
pub async fn del(con: &mut MultiplexedConnection, key: &str) {
    let _: i64 = query(con, redis::cmd("DEL").arg(key)).await;
}

/// `SET key value PX px`: another holder's key (or an old token), put there by hand.
pub async fn set_px(con: &mut MultiplexedConnection, key: &str, value: &str, px: u64) {
    let _: () = query(con, redis::cmd("SET").arg(key).arg(value).arg("PX").arg(px)).await;
}

/// The naive lock a client without lockcore would take: `SET key token NX PX px`. Returned
/// unsent, so that the caller decides how (and how long) to wait for the reply.
pub fn naive_set_nx(key: &str, token: &str, px: u64) -> redis::Cmd {
    let mut set = redis::cmd("SET");
    set.arg(key).arg(token).arg("NX").arg("PX").arg(px);
    set
}

/// The fencing counter's value (0 when unset).
pub async fn acquisitions_seen_by_redis(con: &mut MultiplexedConnection) -> u64 {
    let v: Option<u64> = query(con, redis::cmd("GET").arg(fencing_counter_key())).await;
    v.unwrap_or(0)
}

/// `CLIENT PAUSE ms ALL`: when this returns, Redis holds back every client's commands (ours
/// included) for `ms`. Commands already sent are run, in order, once the pause ends. This is the
/// synchronous way to make a reply arrive "late" (a `DEBUG SLEEP` gives no signal that it started).
pub async fn pause_all_clients(con: &mut MultiplexedConnection, ms: u64) {
    let _: () = query(con, redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("ALL")).await;
}

/// `SCRIPT FLUSH`: the next `EVALSHA` of every script gets `NOSCRIPT`.
pub async fn script_flush(con: &mut MultiplexedConnection) {
    let _: () = query(con, redis::cmd("SCRIPT").arg("FLUSH")).await;
}

/// Polls `EXISTS key` every 20 ms, for at most ~1 s (there is no signal for a server-side state
/// change), until the key shows up: `true` if it did.
pub async fn appears_within_a_second(con: &mut MultiplexedConnection, key: &str) -> bool {
    for _ in 0..50 {
        if exists(con, key).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Polls (every 20 ms, at most ~1 s: there is no signal for server-side state) until the
/// fencing counter shows `applied` acquisitions (a paused `SET` ran) and `key` is absent
/// (its cleanup ran after it). `what` names the scenario in the failure message.
pub async fn assert_set_ran_then_key_gone(
    con: &mut MultiplexedConnection,
    key: &str,
    applied: u64,
    what: &str,
) {
    for _ in 0..50 {
        if acquisitions_seen_by_redis(con).await >= applied && !exists(con, key).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{what}: ~1 s later: {} acquisitions seen (expected {applied}), key value {:?}, pttl {}",
        acquisitions_seen_by_redis(con).await,
        get(con, key).await,
        pttl(con, key).await
    );
}

/// Polls `EXISTS key` every `step` until the key is gone, for at most `within` (bounded: there
/// is no signal for a server-side state change). Returns how long it took, or `None` if the key
/// was still there at the end.
pub async fn gone_within(
    con: &mut MultiplexedConnection,
    key: &str,
    within: Duration,
    step: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    let rounds = within.as_micros() / step.as_micros().max(1) + 1;
    for _ in 0..rounds {
        if !exists(con, key).await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(step).await;
    }
    if exists(con, key).await {
        None
    } else {
        Some(start.elapsed())
    }
}

/// Asserts that `key` disappears within `within` (polling every 5 ms).
pub async fn assert_gone_within(con: &mut MultiplexedConnection, key: &str, within: Duration) {
    let took = gone_within(con, key, within, Duration::from_millis(5)).await;
    assert!(
        took.is_some(),
        "key {key:?} still exists {within:?} later (value {:?}, pttl {})",
        get(con, key).await,
        pttl(con, key).await
    );
}

/// Sends `cmd` on `con` every 20 ms until its text reply satisfies `done`, for at most
/// `within` (bounded: there is no signal for a server-side state change), and returns that
/// reply.
///
/// # Panics
/// After `within`, naming `what` and showing the last reply.
pub async fn poll_reply_until(
    con: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
    within: Duration,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + within;
    // Bounded by the deadline.
    loop {
        let reply: String = cmd.query_async(con).await.unwrap_or_default();
        if done(&reply) {
            return reply;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {within:?}; last reply: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts that the node on `con` has a replica in state `online` (synced, so that `WAIT`
/// counts it) within `within`.
pub async fn assert_replica_online_within(con: &mut MultiplexedConnection, within: Duration) {
    let info = cmd(&["INFO", "replication"]);
    poll_reply_until(con, &info, within, "a replica online", |info| {
        info.lines()
            .any(|line| line.starts_with("slave") && line.contains("state=online"))
    })
    .await;
}

/// Every key on the server that does not start with `prefix`, found with `SCAN` (bounded: at
/// most 100 000 cursor steps), shown with `{:?}` escapes (`""` is the empty key).
pub async fn keys_outside(con: &mut MultiplexedConnection, prefix: &str) -> Vec<String> {
    let mut outside = Vec::new();
    let mut cursor: u64 = 0;
    for _ in 0..100_000 {
        let (next, batch): (u64, Vec<Vec<u8>>) =
            query(con, redis::cmd("SCAN").arg(cursor).arg("COUNT").arg(1_000)).await;
        outside.extend(
            batch
                .into_iter()
                .filter(|key| !key.starts_with(prefix.as_bytes()))
                .map(|key| format!("{:?}", String::from_utf8_lossy(&key))),
        );
        if next == 0 {
            return outside;
        }
        cursor = next;
    }
    panic!("SCAN did not finish within 100 000 steps");
}
