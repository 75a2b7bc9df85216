//! Fencing tokens end to end, against a real `redis-server`.
//!
//! - Kleppmann's scenario (a holder paused past its TTL writes after the next holder), for a
//!   Redis resource ([`FencedRedis`]) and a SQL row (the `UPDATE .. WHERE fence <= ?` pattern),
//!   each with its unfenced twin showing the stale write clobbering the newer one.
//! - Tokens strictly increase across clients: two clients (threads with their own runtime and
//!   manager) and two OS processes take turns on one key, 1 000 acquisitions in all.
//! - The per-prefix counter is one key: 10 000 distinct lock keys leave `DBSIZE` at baseline + 1.
//! - Per-slot counters land in the lock key's slot (checked on a real single-node cluster, where
//!   the per-prefix twin fails with `CROSSSLOT`).
//! - `extend` keeps the token and does not consume the counter.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use lockcore::{FenceError, FencedRedis, FencingCounter, LockError, LockManager, LockOptions};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;

/// Holder A's options: a 500 ms lease, no watchdog, one attempt.
fn short_lease() -> LockOptions {
    opts(500, 0)
}

/// Holder B's options: it waits (up to 5 s) for A's lease to run out.
fn patient() -> LockOptions {
    opts(5_000, 5_000)
}

// ---------------------------------------------------------------------------------------------
// Kleppmann's scenario
// ---------------------------------------------------------------------------------------------

/// What happened in one run of the scenario.
#[derive(Debug)]
struct Outcome {
    a_token: u64,
    b_token: u64,
    /// A's late write: `Ok` if it landed, `Err(message)` if the resource rejected it.
    a_write: Result<(), String>,
    final_value: String,
}

/// A resource that the two holders write to.
trait Resource {
    async fn write(&mut self, who: &str, token: u64) -> Result<(), String>;
    async fn read(&mut self) -> String;
}

/// The scenario: A acquires (ttl 500 ms, no watchdog) and is paused before its write; B's
/// acquire completes once A's lease has run out (B waits on the lock itself, not on a timer),
/// B writes and releases; then A resumes and writes with its old token.
async fn kleppmann(server: &RedisServer, resource: &mut impl Resource) -> Outcome {
    let (locks_a, locks_b) = (manager(server).await, manager(server).await);
    let a = locks_a
        .acquire("stock:42", &short_lease())
        .await
        .unwrap_or_else(|e| panic!("A acquire: {e}"));
    assert!(a.is_held());
    // A is paused here (GC, SIGSTOP, ...): it does nothing while its lease runs out.
    let started = Instant::now();
    let b = locks_b
        .acquire("stock:42", &patient())
        .await
        .unwrap_or_else(|e| panic!("B acquire: {e}"));
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "B must have waited for A's lease, got the lock after {:?}",
        started.elapsed()
    );
    assert!(b.fencing_token() > a.fencing_token());
    resource
        .write("B", b.fencing_token())
        .await
        .unwrap_or_else(|e| panic!("B's write (the current holder) was rejected: {e}"));
    let b_token = b.fencing_token();
    b.release()
        .await
        .unwrap_or_else(|e| panic!("B release: {e}"));

    // A resumes, unaware that its lease ended, and writes.
    let a_write = resource.write("A", a.fencing_token()).await;
    let a_token = a.fencing_token();
    assert!(a.release().await.is_err_and(|e| e.is_lost()));
    Outcome {
        a_token,
        b_token,
        a_write,
        final_value: resource.read().await,
    }
}

struct RedisResource {
    con: MultiplexedConnection,
    stock: FencedRedis,
    fenced: bool,
}

impl RedisResource {
    async fn new(server: &RedisServer, fenced: bool) -> Self {
        RedisResource {
            con: server.connection().await,
            stock: FencedRedis::new("stock:42"),
            fenced,
        }
    }
}

impl Resource for RedisResource {
    async fn write(&mut self, who: &str, token: u64) -> Result<(), String> {
        let value = format!("written by {who} (token {token})");
        if self.fenced {
            match self.stock.set(&mut self.con, token, &value).await {
                Ok(()) => Ok(()),
                Err(FenceError::Stale(stale)) => Err(stale.to_string()),
                Err(other) => panic!("fenced set: {other}"),
            }
        } else {
            // The same hash, written without the comparison.
            let () = query(
                &mut self.con,
                redis::cmd("HSET")
                    .arg(self.stock.key())
                    .arg("value")
                    .arg(&value)
                    .arg("fence")
                    .arg(token),
            )
            .await;
            Ok(())
        }
    }

    async fn read(&mut self) -> String {
        let current: Option<(String, u64)> = self
            .stock
            .get(&mut self.con)
            .await
            .unwrap_or_else(|e| panic!("fenced get: {e}"));
        current.map(|(value, _)| value).unwrap_or_default()
    }
}

struct SqlResource {
    db: rusqlite::Connection,
    fenced: bool,
}

impl SqlResource {
    fn new(fenced: bool) -> Self {
        let db = rusqlite::Connection::open_in_memory().unwrap_or_else(|e| panic!("sqlite: {e}"));
        db.execute_batch(
            "CREATE TABLE stock (id INTEGER PRIMARY KEY, value TEXT NOT NULL,
                                 fence INTEGER NOT NULL DEFAULT 0);
             INSERT INTO stock (id, value) VALUES (42, 'initial');",
        )
        .unwrap_or_else(|e| panic!("schema: {e}"));
        SqlResource { db, fenced }
    }
}

impl Resource for SqlResource {
    async fn write(&mut self, who: &str, token: u64) -> Result<(), String> {
        let value = format!("written by {who} (token {token})");
        let sql = if self.fenced {
            "UPDATE stock SET value = ?1, fence = ?2 WHERE id = ?3 AND fence <= ?2"
        } else {
            "UPDATE stock SET value = ?1, fence = ?2 WHERE id = ?3"
        };
        let changed = self
            .db
            .execute(sql, rusqlite::params![value, token, 42])
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        match changed {
            1 => Ok(()),
            0 => Err(format!("stale write: 0 rows changed for token {token}")),
            n => panic!("{n} rows changed"),
        }
    }

    async fn read(&mut self) -> String {
        self.db
            .query_row("SELECT value FROM stock WHERE id = 42", [], |row| {
                row.get(0)
            })
            .unwrap_or_else(|e| panic!("select: {e}"))
    }
}

fn assert_fenced(outcome: &Outcome) {
    let err = outcome
        .a_write
        .as_ref()
        .expect_err("A's stale write must be rejected");
    assert!(err.contains(&outcome.a_token.to_string()), "{err}");
    assert_eq!(
        outcome.final_value,
        format!("written by B (token {})", outcome.b_token),
        "{outcome:?}"
    );
}

fn assert_clobbered(outcome: &Outcome) {
    assert_eq!(outcome.a_write, Ok(()), "{outcome:?}");
    assert_eq!(
        outcome.final_value,
        format!("written by A (token {})", outcome.a_token),
        "without fencing, the paused holder's stale write must clobber B's: {outcome:?}"
    );
}

#[tokio::test]
async fn paused_holders_stale_write_is_rejected_by_fenced_redis() {
    let server = RedisServer::start();
    let mut resource = RedisResource::new(&server, true).await;
    let outcome = kleppmann(&server, &mut resource).await;
    assert_fenced(&outcome);
    let err = outcome.a_write.unwrap_err();
    assert!(
        err.contains("stock:42") && err.contains(&outcome.b_token.to_string()),
        "{err}"
    );
    let stored: Option<(String, u64)> = resource.stock.get(&mut resource.con).await.unwrap();
    assert_eq!(stored.map(|(_, fence)| fence), Some(outcome.b_token));
}

#[tokio::test]
async fn unfenced_twin_paused_holders_stale_write_clobbers_redis() {
    let server = RedisServer::start();
    let mut resource = RedisResource::new(&server, false).await;
    assert_clobbered(&kleppmann(&server, &mut resource).await);
}

#[tokio::test]
async fn paused_holders_stale_write_is_rejected_by_the_sql_pattern() {
    let server = RedisServer::start();
    let mut resource = SqlResource::new(true);
    assert_fenced(&kleppmann(&server, &mut resource).await);
}

#[tokio::test]
async fn unfenced_twin_paused_holders_stale_write_clobbers_the_sql_row() {
    let server = RedisServer::start();
    let mut resource = SqlResource::new(false);
    assert_clobbered(&kleppmann(&server, &mut resource).await);
}

// ---------------------------------------------------------------------------------------------
// FencedRedis details
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn fenced_redis_accepts_the_same_lease_twice_and_compares_above_2_pow_53_exactly() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    let row = FencedRedis::new("row");
    assert_eq!(row.get::<String, _>(&mut con).await.unwrap(), None);

    row.set(&mut con, 7, "first").await.unwrap();
    row.set(&mut con, 7, "second, same lease").await.unwrap();
    assert_eq!(
        row.get(&mut con).await.unwrap(),
        Some(("second, same lease".to_owned(), 7))
    );
    let err = row.set(&mut con, 6, "stale").await.unwrap_err();
    assert!(err.is_stale(), "{err}");

    // 2^53 + 1 and 2^53 are the same Lua number (a double); the script must still tell them
    // apart. Likewise u64::MAX - 1 < u64::MAX.
    let big = FencedRedis::new("big");
    big.set(&mut con, (1 << 53) + 1, "newer").await.unwrap();
    match big.set(&mut con, 1 << 53, "older").await {
        Err(FenceError::Stale(stale)) => {
            assert_eq!((stale.presented, stale.latest), (1 << 53, (1 << 53) + 1));
        }
        other => panic!("expected a stale write, got {other:?}"),
    }
    big.set(&mut con, u64::MAX, "max").await.unwrap();
    assert!(
        big.set(&mut con, u64::MAX - 1, "x")
            .await
            .unwrap_err()
            .is_stale()
    );
    assert!(big.set(&mut con, 9, "short").await.unwrap_err().is_stale());
    assert_eq!(
        big.get(&mut con).await.unwrap(),
        Some(("max".to_owned(), u64::MAX))
    );
}

#[tokio::test]
async fn fenced_redis_survives_script_flush_and_reports_misuse() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    let row = FencedRedis::new("row");
    row.set(&mut con, 1, 10_u32).await.unwrap();
    script_flush(&mut con).await;
    row.set(&mut con, 2, 20_u32).await.unwrap(); // EVALSHA -> NOSCRIPT -> EVAL
    assert_eq!(row.get(&mut con).await.unwrap(), Some((20_u32, 2)));

    // Not a hash: WRONGTYPE, as a Redis error, not a stale write.
    let () = query(&mut con, redis::cmd("SET").arg("plain").arg("x")).await;
    let err = FencedRedis::new("plain")
        .set(&mut con, 5, 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, FenceError::Redis(_)) && err.to_string().contains("WRONGTYPE"),
        "{err}"
    );

    // A value that is several arguments is refused before any network call.
    let err = row.set(&mut con, 3, vec![1_u32, 2]).await.unwrap_err();
    assert!(matches!(err, FenceError::Redis(_)), "{err}");
    assert_eq!(row.get(&mut con).await.unwrap(), Some((20_u32, 2)));
}

// ---------------------------------------------------------------------------------------------
// Strictly increasing across clients and processes
// ---------------------------------------------------------------------------------------------

const ALTERNATING_KEY: &str = "alternating";
const LOG: &str = "fencing:log";
const ROUNDS_EACH: usize = 500;

/// One side of the hand-off: take the lock `rounds` times; before each turn but the very first
/// (for the starter) wait for the other side's signal (`BLPOP turn:<me>`), and after it hand the
/// turn over (`RPUSH turn:<other>`). While holding the lock, append `"<me> <token>"` to the log,
/// so the log's order is the lock's order. Returns this side's tokens.
async fn take_turns(url: &str, me: &str, other: &str, starts: bool, rounds: usize) -> Vec<u64> {
    let locks = LockManager::connect(url)
        .await
        .unwrap_or_else(|e| panic!("{me}: connect: {e}"));
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(30)));
    let mut con = redis::Client::open(url)
        .unwrap_or_else(|e| panic!("{me}: {e}"))
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("{me}: connect: {e}"));
    let opts = opts(5_000, 5_000);
    let mut tokens = Vec::with_capacity(rounds);
    for round in 0..rounds {
        if !(starts && round == 0) {
            let signal: Option<(String, String)> = query(
                &mut con,
                redis::cmd("BLPOP").arg(format!("turn:{me}")).arg(10),
            )
            .await;
            assert!(
                signal.is_some(),
                "{me}: no turn from {other} within 10 s (round {round})"
            );
        }
        let guard = locks
            .acquire(ALTERNATING_KEY, &opts)
            .await
            .unwrap_or_else(|e| panic!("{me}: acquire: {e}"));
        let token = guard.fencing_token();
        let _: i64 = query(
            &mut con,
            redis::cmd("RPUSH").arg(LOG).arg(format!("{me} {token}")),
        )
        .await;
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("{me}: release: {e}"));
        tokens.push(token);
        let _: i64 = query(
            &mut con,
            redis::cmd("RPUSH").arg(format!("turn:{other}")).arg(1),
        )
        .await;
    }
    tokens
}

/// `take_turns` on a fresh current-thread runtime: one independent client.
fn client_thread(url: String, me: &'static str, other: &'static str, starts: bool) -> Vec<u64> {
    current_thread_runtime().block_on(take_turns(&url, me, other, starts, ROUNDS_EACH))
}

/// The merged log must alternate between the two sides, hold every token each side saw, and be
/// strictly increasing.
fn check_log(server: &RedisServer, a: (&str, &[u64]), b: (&str, &[u64])) {
    let mut con = server
        .client()
        .get_connection_with_timeout(Duration::from_secs(5))
        .unwrap();
    let log: Vec<String> = redis::cmd("LRANGE")
        .arg(LOG)
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    assert_eq!(log.len(), 2 * ROUNDS_EACH);
    let mut merged = Vec::with_capacity(log.len());
    for (i, entry) in log.iter().enumerate() {
        let (who, token) = entry.split_once(' ').unwrap();
        let expected = if i % 2 == 0 { a.0 } else { b.0 };
        assert_eq!(who, expected, "entry {i} of {log:?}");
        merged.push(token.parse::<u64>().unwrap());
    }
    let (evens, odds): (Vec<_>, Vec<_>) = merged.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    assert_eq!(evens.into_iter().map(|(_, t)| *t).collect::<Vec<_>>(), a.1);
    assert_eq!(odds.into_iter().map(|(_, t)| *t).collect::<Vec<_>>(), b.1);
    for pair in merged.windows(2) {
        assert!(
            pair[0] < pair[1],
            "tokens not strictly increasing: {pair:?}"
        );
    }
}

#[test]
fn two_clients_taking_turns_1000_acquisitions_get_strictly_increasing_tokens() {
    let server = RedisServer::start();
    let url = server.url();
    let a = {
        let url = url.clone();
        std::thread::spawn(move || client_thread(url, "a", "b", true))
    };
    let b = std::thread::spawn(move || client_thread(url, "b", "a", false));
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    check_log(&server, ("a", &a), ("b", &b));
}

/// Set in the child process of the next test: the server URL.
const CHILD_ENV: &str = "LOCKCORE_FENCING_ALTERNATE_CHILD_URL";

/// Two OS processes: this test re-runs its own binary, filtered to itself, as the second client.
#[test]
fn two_processes_taking_turns_1000_acquisitions_get_strictly_increasing_tokens() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        // The child: play side "child", report its tokens on stdout, and exit.
        let tokens = client_thread(url, "child", "parent", false);
        let list: Vec<String> = tokens.iter().map(u64::to_string).collect();
        println!("CHILD_TOKENS {}", list.join(","));
        return;
    }
    let server = RedisServer::start();
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new(exe)
        .args([
            "two_processes_taking_turns_1000_acquisitions_get_strictly_increasing_tokens",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, server.url())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let parent = client_thread(server.url(), "parent", "child", true);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "child process failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let child_tokens: Vec<u64> = stdout
        .lines()
        .find_map(|line| line.split_once("CHILD_TOKENS ").map(|(_, tokens)| tokens))
        .unwrap_or_else(|| panic!("the child ran no test (renamed?):\n{stdout}"))
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    check_log(&server, ("parent", &parent), ("child", &child_tokens));
}

// ---------------------------------------------------------------------------------------------
// Memory: one counter, not one per key
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_thousand_distinct_keys_leave_one_counter_key() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    let baseline: u64 = query(&mut con, &redis::cmd("DBSIZE")).await;
    let locks = manager(&server).await;
    let opts = opts(10_000, 0);
    let mut tokens = Vec::with_capacity(10_000);
    for chunk in (0..10_000_u32).collect::<Vec<_>>().chunks(200) {
        let batch = chunk.iter().map(|i| {
            let locks = locks.clone();
            let opts = opts.clone();
            async move {
                let guard = locks.acquire(&format!("item:{i}"), &opts).await?;
                let token = guard.fencing_token();
                guard.release().await?;
                Ok::<u64, LockError>(token)
            }
        });
        tokens.extend(
            futures_util::future::try_join_all(batch)
                .await
                .unwrap_or_else(|e| panic!("{e}")),
        );
    }
    let distinct: HashSet<u64> = tokens.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        10_000,
        "every acquisition gets its own token"
    );
    assert_eq!(distinct.iter().max(), Some(&10_000));

    let after: u64 = query(&mut con, &redis::cmd("DBSIZE")).await;
    let keys: Vec<String> = query(&mut con, redis::cmd("KEYS").arg("*")).await;
    assert_eq!(
        after,
        baseline + 1,
        "keys left behind: {:?}",
        &keys[..keys.len().min(10)]
    );
    assert_eq!(keys, vec![fencing_counter_key()]);
    assert_eq!(acquisitions_seen_by_redis(&mut con).await, 10_000);
}

// ---------------------------------------------------------------------------------------------
// Per-slot counters, on a real (single-node) Redis Cluster
// ---------------------------------------------------------------------------------------------

/// A one-node cluster that owns all 16 384 slots. Cluster mode makes Redis reject a script
/// whose keys hash to different slots (`CROSSSLOT`), which is exactly what `PerSlot` avoids.
async fn single_node_cluster() -> RedisServer {
    let server = RedisServer::start_with_args(&["--cluster-enabled", "yes"]);
    let mut con = server.connection().await;
    let () = query(
        &mut con,
        redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(0)
            .arg(16_383),
    )
    .await;
    // No event announces the state change; poll CLUSTER INFO (bounded).
    let started = Instant::now();
    loop {
        let info: String = query(&mut con, redis::cmd("CLUSTER").arg("INFO")).await;
        if info.contains("cluster_state:ok") {
            return server;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "cluster never became ok:\n{info}\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn keyslot(con: &mut MultiplexedConnection, key: &str) -> u16 {
    query(con, redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await
}

#[tokio::test]
async fn per_slot_counters_share_the_lock_keys_slot_and_tokens_increase_per_key() {
    let server = single_node_cluster().await;
    let mut con = server.connection().await;
    let locks = manager_with(&server, |builder| {
        builder.fencing_counter(FencingCounter::PerSlot)
    })
    .await;
    let opts = opts(5_000, 0);

    let mut keys: Vec<String> = (0..100).map(|i| format!("order:{i}")).collect();
    keys.extend(["{user:7}:cart", "{user:7}:wallet", "caf\u{e9}", "{}odd"].map(String::from));
    let mut lock_slots = BTreeSet::new();
    for key in &keys {
        lock_slots.insert(keyslot(&mut con, &format!("lock:{key}")).await);
        let mut last = 0;
        for _ in 0..3 {
            let guard = locks
                .acquire(key, &opts)
                .await
                .unwrap_or_else(|e| panic!("acquire {key:?} (per-slot): {e}"));
            assert!(
                guard.fencing_token() > last,
                "{key}: {} after {last}",
                guard.fencing_token()
            );
            last = guard.fencing_token();
            guard.release().await.unwrap();
        }
    }
    // Every counter key is in the slot of a lock key, and every lock key's slot has one.
    let counters: Vec<String> = query(
        &mut con,
        redis::cmd("KEYS").arg("lock:__fencing_counter__*"),
    )
    .await;
    let mut counter_slots = BTreeSet::new();
    for counter in &counters {
        assert!(
            counter_slots.insert(keyslot(&mut con, counter).await),
            "two counters in one slot"
        );
    }
    assert_eq!(counter_slots, lock_slots);
    // Keys sharing a hash tag share a counter: their tokens interleave in one sequence.
    let cart = locks.acquire("{user:7}:cart", &opts).await.unwrap();
    let wallet = locks.acquire("{user:7}:wallet", &opts).await.unwrap();
    assert_eq!(wallet.fencing_token(), cart.fencing_token() + 1);
    cart.release().await.unwrap();
    wallet.release().await.unwrap();
}

#[tokio::test]
async fn per_prefix_twin_fails_with_crossslot_on_a_cluster() {
    let server = single_node_cluster().await;
    let mut con = server.connection().await;
    let locks = manager(&server).await; // FencingCounter::PerPrefix
    let counter_slot = keyslot(&mut con, &fencing_counter_key()).await;
    let mut key = None;
    for i in 0.. {
        let candidate = format!("order:{i}");
        if keyslot(&mut con, &format!("lock:{candidate}")).await != counter_slot {
            key = Some(candidate);
            break;
        }
    }
    let key = key.unwrap();
    let opts = opts(5_000, 0);
    match locks.acquire(&key, &opts).await {
        Err(LockError::Redis(e)) => {
            assert!(e.to_string().to_uppercase().contains("CROSSSLOT"), "{e}");
        }
        other => panic!("a per-prefix counter in another slot must fail on a cluster: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Extend keeps the token
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn extend_keeps_the_token_and_does_not_consume_the_counter() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    let locks = manager(&server).await;
    let opts = opts(1_000, 0);

    let mut guard = locks.acquire("job", &opts).await.unwrap();
    let token = guard.fencing_token();
    let counter_before = acquisitions_seen_by_redis(&mut con).await;
    assert_eq!(counter_before, token);
    for _ in 0..3 {
        guard.extend(Duration::from_secs(2)).await.unwrap();
        assert_eq!(guard.fencing_token(), token);
    }
    let counter_after = acquisitions_seen_by_redis(&mut con).await;
    assert_eq!(
        counter_after, counter_before,
        "extend must not mint a token"
    );
    // A write under the extended lease is still accepted with the same token.
    FencedRedis::new("job:result")
        .set(&mut con, guard.fencing_token(), "done")
        .await
        .unwrap();
    guard.release().await.unwrap();

    let next = locks.acquire("job", &opts).await.unwrap();
    assert_eq!(next.fencing_token(), token + 1);
    next.release().await.unwrap();
}
