//! Core lock semantics through the explicit API: a body that outlives its TTL, extend without
//! an owner check, validity arithmetic, and empty, long and non-ASCII keys. (Tokens tied to
//! threads or tasks are in `tokens.rs`; the wrapper's side of an outlived TTL is in
//! `attribute_runtime.rs`.)
//!
//! A and B are independent clients: two managers, two connections.

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::time::{Instant, sleep, timeout};

// ---- body outlives the TTL (watchdog off) -----------------------------------------------------

/// A ttl of 500, hold 800, nobody else takes the key: release reports `Lost` (not a Redis
/// error, not `Ok`) and returns promptly.
#[tokio::test]
async fn c01_release_after_expiry_reports_lost() {
    let (_server, a, mut raw) = start_with_manager().await;

    let guard = must_acquire(&a, "order:42", &opts(500, 0)).await;
    assert!(guard.is_held());
    sleep(Duration::from_millis(800)).await;
    assert!(!guard.is_held(), "the deadline (< 500 ms) has passed");
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(
        !exists(&mut raw, &full("order:42")).await,
        "Redis expired the key"
    );

    let started = Instant::now();
    let released = timeout(Duration::from_secs(2), guard.release())
        .await
        .expect("release must not hang");
    assert!(
        matches!(&released, Err(LockError::Lost { key }) if key == "lock:order:42"),
        "expected Lost, got {released:?}"
    );
    assert!(released.as_ref().is_err_and(LockError::is_lost));
    assert!(started.elapsed() < Duration::from_millis(500));
}

/// B acquires at t=600 with ttl 5000. A's release at t=800 reports `Lost` and leaves
/// B's value and PTTL untouched. The naive twin (a plain `DEL` as release) deletes B's lock.
#[tokio::test]
async fn c01_stale_release_leaves_new_holder_untouched() {
    let (server, a, mut raw) = start_with_manager().await;
    let b = manager(&server).await;
    let key = full("order:42");

    let guard_a = must_acquire(&a, "order:42", &opts(500, 0)).await;
    // After the acquire returned: A's lease started earlier, so it has surely ended by t0 + 600
    // even when the acquire itself was slow (a loaded machine).
    let t0 = Instant::now();
    tokio::time::sleep_until(t0 + Duration::from_millis(600)).await;
    let guard_b = b
        .try_acquire("order:42", &opts(5000, 0))
        .await
        .expect("B's attempt")
        .expect("A's lease expired at 500: B gets the key at 600");
    assert_ne!(guard_a.token(), guard_b.token());

    tokio::time::sleep_until(t0 + Duration::from_millis(800)).await;
    let released = guard_a.release().await;
    assert!(
        released.as_ref().is_err_and(LockError::is_lost),
        "got {released:?}"
    );

    assert_eq!(
        get(&mut raw, &key).await.as_deref(),
        Some(guard_b.stored_value())
    );
    let ttl = pttl(&mut raw, &key).await;
    assert!(
        (4_500..=5_000).contains(&ttl),
        "B acquired ~200 ms ago with ttl 5000, PTTL must be ~4800, got {ttl}"
    );
    assert!(guard_b.is_held());

    // Unlocked twin: the naive release (`DEL key`) A would have sent destroys B's lock.
    del(&mut raw, &key).await;
    assert!(!exists(&mut raw, &key).await);
    let b_release = guard_b.release().await;
    assert!(b_release.is_err_and(|e| e.is_lost()));
}

// ---- extend without an owner check ------------------------------------------------------------

/// The check, shared with the naive twin: `key` still holds B's token with B's ~5000 ms
/// lease after the stale holder's extend.
async fn new_holder_untouched(raw: &mut MultiplexedConnection, key: &str, token_b: &str) -> bool {
    get(raw, key).await.as_deref() == Some(token_b) && pttl(raw, key).await > 4_500
}

/// The check, shared with the naive twin: the extend did not re-create `key`.
async fn not_resurrected(raw: &mut MultiplexedConnection, key: &str) -> bool {
    !exists(raw, key).await && pttl(raw, key).await == -2
}

/// The check, shared with the naive twin: after an extend to 3000 ms the PTTL is ~3000.
async fn ttl_was_set_not_added(raw: &mut MultiplexedConnection, key: &str) -> bool {
    (2_800..=3_000).contains(&pttl(raw, key).await)
}

/// A holds `job:x`, the key is deleted by hand, B acquires it, A extends: the extend
/// fails with `Lost` and B's value and TTL are unchanged. (A naive `PEXPIRE` would cut B's
/// 5000 ms lease to 3000.)
#[tokio::test]
async fn c02_extend_by_stale_holder_fails_and_leaves_new_holder() {
    let (server, a, mut raw) = start_with_manager().await;
    let b = manager(&server).await;
    let key = full("job:x");

    let mut guard_a = must_acquire(&a, "job:x", &opts(5000, 0)).await;
    del(&mut raw, &key).await;
    let guard_b = must_acquire(&b, "job:x", &opts(5000, 0)).await;

    let extended = guard_a.extend(Duration::from_millis(3000)).await;
    assert!(
        extended.as_ref().is_err_and(LockError::is_lost),
        "got {extended:?}"
    );
    assert!(
        !guard_a.is_held(),
        "a guard told it is lost is no longer held"
    );

    assert!(
        new_holder_untouched(&mut raw, &key, guard_b.stored_value()).await,
        "B's token and ~5000 ms PTTL must stay, PTTL {}",
        pttl(&mut raw, &key).await
    );

    // A's guard cannot hurt B later either.
    assert!(guard_a.release().await.is_err_and(|e| e.is_lost()));
    assert_eq!(
        get(&mut raw, &key).await.as_deref(),
        Some(guard_b.stored_value())
    );
    guard_b.release().await.expect("B releases its own lock");
}

/// As above with nobody re-acquiring: the extend fails and the key stays absent (no
/// resurrection, as a `SET ... XX`/`SET PX` "extend" would do).
#[tokio::test]
async fn c02_extend_after_delete_does_not_resurrect() {
    let (_server, a, mut raw) = start_with_manager().await;
    let key = full("job:x");

    let mut guard = must_acquire(&a, "job:x", &opts(5000, 0)).await;
    del(&mut raw, &key).await;
    let extended = guard.extend(Duration::from_millis(3000)).await;
    assert!(
        extended.as_ref().is_err_and(LockError::is_lost),
        "got {extended:?}"
    );
    assert!(
        not_resurrected(&mut raw, &key).await,
        "extend re-created the key"
    );

    // A second extend on the lost guard fails too, still without touching Redis state.
    assert!(
        guard
            .extend(Duration::from_millis(3000))
            .await
            .is_err_and(|e| e.is_lost())
    );
    assert!(!exists(&mut raw, &key).await);
}

/// The twin: the same three scenarios with naive "extends", judged by the same checks, fail
/// them. (i) A plain `PEXPIRE` by the stale holder cuts B's lease; (ii) a `SET key token PX`
/// "extend" after the key was deleted re-creates it; (iii) an extend that adds to the PTTL grows
/// the lease past the requested 3000 ms.
#[tokio::test]
async fn c02_twin_naive_extends_fail_the_same_checks() {
    let (server, a, mut raw) = start_with_manager().await;
    let b = manager(&server).await;
    let key = full("job:x");
    let naive_pexpire = |px: i64| {
        let mut cmd = redis::cmd("PEXPIRE");
        cmd.arg(&key).arg(px);
        cmd
    };

    // (i) A holds, the key is deleted by hand, B acquires, A extends without an owner check.
    let guard_a = must_acquire(&a, "job:x", &opts(5000, 0)).await;
    del(&mut raw, &key).await;
    let guard_b = must_acquire(&b, "job:x", &opts(5000, 0)).await;
    let _: i64 = query(&mut raw, &naive_pexpire(3000)).await;
    assert!(
        !new_holder_untouched(&mut raw, &key, guard_b.stored_value()).await,
        "a plain PEXPIRE should cut B's lease"
    );
    guard_b.release().await.expect("B still holds its token");
    assert!(guard_a.release().await.is_err_and(|e| e.is_lost()));

    // (ii) A holds, the key is deleted by hand, A "extends" by setting its token again.
    let guard_a = must_acquire(&a, "job:x", &opts(5000, 0)).await;
    del(&mut raw, &key).await;
    set_px(&mut raw, &key, guard_a.stored_value(), 3000).await;
    assert!(
        !not_resurrected(&mut raw, &key).await,
        "a SET PX extend should re-create the key"
    );
    guard_a
        .release()
        .await
        .expect("the re-created key holds A's token");

    // (iii) A holds with ttl 3000 and "extends" by adding 3000 to the PTTL, ten times.
    let guard_a = must_acquire(&a, "job:x", &opts(3000, 0)).await;
    for _ in 0..10 {
        let left = pttl(&mut raw, &key).await;
        let _: i64 = query(&mut raw, &naive_pexpire(left + 3000)).await;
    }
    assert!(
        !ttl_was_set_not_added(&mut raw, &key).await,
        "an additive extend should grow the PTTL past 3000, got {}",
        pttl(&mut raw, &key).await
    );
    guard_a.release().await.expect("A still holds its token");
}

/// Ten extends at 3000 each: the PTTL never goes above ~3000 (extend sets the TTL,
/// it never adds), and the deadline moves to the extend's start + validity.
#[tokio::test]
async fn c02_extend_sets_ttl_never_adds() {
    let (_server, a, mut raw) = start_with_manager().await;
    let key = full("job:x");

    let mut guard = must_acquire(&a, "job:x", &opts(3000, 0)).await;
    for round in 0..10 {
        let before = Instant::now();
        guard
            .extend(Duration::from_millis(3000))
            .await
            .unwrap_or_else(|e| panic!("extend #{round}: {e:?}"));
        assert!(
            ttl_was_set_not_added(&mut raw, &key).await,
            "after extend #{round} PTTL must be ~3000, got {}",
            pttl(&mut raw, &key).await
        );
        let remaining = guard.deadline().saturating_duration_since(before);
        assert!(
            remaining <= Duration::from_millis(3000) && remaining > Duration::from_millis(2_900),
            "deadline after extend #{round} is {remaining:?} past the call's start"
        );
        assert!(guard.is_held());
    }
    assert_eq!(
        get(&mut raw, &key).await.as_deref(),
        Some(guard.stored_value())
    );
    guard.release().await.expect("release after extends");
    assert!(!exists(&mut raw, &key).await);
}

// ---- validity arithmetic ----------------------------------------------------------------------

/// B holds `r` for 1200 ms; A acquires with ttl 1000 and a 3 s wait. A's validity is
/// measured from its successful attempt: `deadline - now` is about ttl (900..1000 ms), not
/// ttl - 1200 (as when measured from the call).
#[tokio::test]
async fn c04_validity_measured_from_successful_attempt() {
    let server = RedisServer::start();
    let (a, b) = (manager(&server).await, manager(&server).await);

    let guard_b = must_acquire(&b, "r", &opts(1200, 0)).await;
    let called = Instant::now();
    let guard_a = must_acquire(&a, "r", &opts(1000, 3000)).await;
    let now = Instant::now();
    let waited = now - called;
    assert!(
        waited >= Duration::from_millis(1100),
        "A cannot get `r` before B's 1200 ms lease ends, got it after {waited:?}"
    );
    assert!(waited < Duration::from_millis(3000));

    let left = guard_a.deadline().saturating_duration_since(now);
    assert!(
        left > Duration::from_millis(900) && left <= Duration::from_millis(1000),
        "deadline - now must be ~ttl (900..=1000 ms), got {left:?}"
    );
    assert!(guard_a.is_held());
    assert!(guard_a.remaining() <= Duration::from_millis(1000));
    assert!(guard_b.release().await.is_err_and(|e| e.is_lost()));
    guard_a
        .release()
        .await
        .expect("A releases within its validity");
}

/// A ttl of 1 ms (shorter than a round trip) never panics: each call gives a clean error or
/// a guard whose deadline has passed; release/extend on it return cleanly; the key is gone.
#[tokio::test]
async fn c04_tiny_ttl_never_panics() {
    let (_server, a, mut raw) = start_with_manager().await;
    let tiny = opts(1, 50);

    let mut guards = 0;
    for _ in 0..50 {
        match a.acquire("tiny", &tiny).await {
            Ok(mut guard) => {
                guards += 1;
                assert!(
                    guard.deadline() <= Instant::now(),
                    "validity of a 1 ms lease is zero after drift allowance"
                );
                assert!(!guard.is_held());
                assert_eq!(guard.remaining(), Duration::ZERO);
                let extended = guard.extend(Duration::from_millis(1)).await;
                assert!(
                    matches!(extended, Ok(()) | Err(LockError::Lost { .. })),
                    "extend: {extended:?}"
                );
                let released = guard.release().await;
                assert!(
                    matches!(released, Ok(()) | Err(LockError::Lost { .. })),
                    "release: {released:?}"
                );
            }
            Err(e) => assert!(
                e.is_contended(),
                "only a clean Contended is acceptable: {e:?}"
            ),
        }
    }
    assert!(guards > 0, "a 1 ms lease is still grantable");
    assert_gone_within(&mut raw, &full("tiny"), Duration::from_millis(100)).await;

    // Sub-millisecond and huge values: validated, never overflow.
    let sub_ms = LockOptions::new(Duration::from_micros(500));
    assert!(matches!(
        a.acquire("tiny", &sub_ms).await,
        Err(LockError::InvalidOptions { .. })
    ));
    let huge = LockOptions::new(Duration::MAX).wait(Duration::MAX);
    assert!(matches!(
        a.acquire("tiny", &huge).await,
        Err(LockError::InvalidOptions { .. })
    ));
    let huge_wait = opts(1000, 0).wait(Duration::MAX);
    assert!(matches!(
        a.try_acquire("tiny", &huge_wait).await,
        Err(LockError::InvalidOptions { .. })
    ));
    let mut guard = must_acquire(&a, "tiny", &opts(1000, 0)).await;
    assert!(matches!(
        guard.extend(Duration::MAX).await,
        Err(LockError::InvalidOptions { .. })
    ));
    assert!(
        guard.is_held(),
        "a rejected extend leaves the guard as it was"
    );
    guard.release().await.expect("release");
}

/// A runtime ttl of 0 is `InvalidOptions` on every entry point, before any network
/// call (the server is stopped, yet the error is not `Redis`).
#[tokio::test]
async fn c04_zero_ttl_is_invalid_options() {
    let mut server = RedisServer::start();
    let a = manager(&server).await;
    let mut guard = must_acquire(&a, "zero", &opts(5000, 0)).await;
    server.stop();

    let zero = LockOptions::new(Duration::ZERO);
    let err = a.acquire("zero", &zero).await.expect_err("ttl 0");
    assert!(
        matches!(&err, LockError::InvalidOptions { reason } if reason.contains("ttl")),
        "got {err:?}"
    );
    assert!(matches!(
        a.try_acquire("zero", &zero).await,
        Err(LockError::InvalidOptions { .. })
    ));
    assert!(matches!(
        guard.extend(Duration::ZERO).await,
        Err(LockError::InvalidOptions { .. })
    ));
    // The builder checks its default options before connecting.
    let built = LockManager::builder()
        .url(server.url())
        .default_options(zero)
        .build()
        .await;
    assert!(
        matches!(built, Err(LockError::InvalidOptions { .. })),
        "got {built:?}"
    );
    assert_eq!(variant(&err), "InvalidOptions");
}

// ---- empty, long and non-ASCII keys -----------------------------------------------------------

/// "" is `InvalidKey` before any network call: the manager's server is stopped, yet the
/// error is `InvalidKey`, while a real key on the same manager gets `Redis`.
#[tokio::test]
async fn c05_empty_key_is_invalid_before_network() {
    let mut server = RedisServer::start();
    let a = manager(&server).await;
    let no_prefix = manager_with(&server, |builder| builder.key_prefix("")).await;
    server.stop();

    let o = opts(1000, 3000);
    let started = Instant::now();
    for m in [&a, &no_prefix] {
        let err = m.acquire("", &o).await.expect_err("empty key");
        assert!(matches!(err, LockError::InvalidKey { .. }), "got {err:?}");
        let err = m.try_acquire("", &o).await.expect_err("empty key");
        assert!(matches!(err, LockError::InvalidKey { .. }), "got {err:?}");
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "no network round trip"
    );

    // Control: the server really is unreachable.
    let err = a.acquire("x", &o).await.expect_err("server stopped");
    assert!(err.is_redis(), "got {err:?}");
}

/// A 10 KiB key is used byte for byte (prefix + key, nothing hashed or truncated).
#[tokio::test]
async fn c05_ten_kib_key_byte_for_byte() {
    let (_server, a, mut raw) = start_with_manager().await;

    let pattern = "big:{tag}<x> é\u{301} ";
    let mut key = String::new();
    while key.len() < 10 * 1024 {
        key.push_str(pattern);
    }
    let guard = must_acquire(&a, &key, &opts(5000, 0)).await;
    let expected = format!("lock:{key}");
    assert_eq!(guard.key(), expected);
    assert!(expected.len() > 10 * 1024);

    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("lock:big:*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    assert_eq!(
        keys,
        vec![expected.as_bytes().to_vec()],
        "exactly one key, byte for byte"
    );
    assert_eq!(
        get(&mut raw, &expected).await.as_deref(),
        Some(guard.stored_value())
    );

    // A second contender on the same long key is refused.
    assert!(
        a.try_acquire(&key, &opts(5000, 0))
            .await
            .expect("try")
            .is_none()
    );
    guard.release().await.expect("release long key");
    assert!(!exists(&mut raw, &expected).await);
}

/// Two long keys that differ only in the last byte are two different locks (both held at
/// once); the same long key twice is one lock (twin).
#[tokio::test]
async fn c05_long_keys_differing_in_last_byte_are_two_locks() {
    let (server, a, mut raw) = start_with_manager().await;
    let b = manager(&server).await;

    let stem = "k".repeat(4096);
    let (k1, k2) = (format!("{stem}1"), format!("{stem}2"));
    let o = opts(5000, 0);
    let g1 = a
        .try_acquire(&k1, &o)
        .await
        .expect("k1")
        .expect("k1 is free");
    let g2 = b
        .try_acquire(&k2, &o)
        .await
        .expect("k2")
        .expect("k2 is a different lock");
    assert_eq!(
        get(&mut raw, &full(&k1)).await.as_deref(),
        Some(g1.stored_value())
    );
    assert_eq!(
        get(&mut raw, &full(&k2)).await.as_deref(),
        Some(g2.stored_value())
    );

    // Twin: the same key is one lock.
    assert!(b.try_acquire(&k1, &o).await.expect("k1 again").is_none());
    g1.release().await.expect("release k1");
    g2.release().await.expect("release k2");
}

/// `café` in NFC and in NFD are two different locks: no normalisation.
#[tokio::test]
async fn c05_nfc_and_nfd_are_two_locks() {
    let (server, a, mut raw) = start_with_manager().await;
    let b = manager(&server).await;

    let nfc = "caf\u{e9}";
    let nfd = "cafe\u{301}";
    assert_ne!(nfc.as_bytes(), nfd.as_bytes());
    let o = opts(5000, 0);
    let g_nfc = a
        .try_acquire(nfc, &o)
        .await
        .expect("nfc")
        .expect("nfc free");
    let g_nfd = b
        .try_acquire(nfd, &o)
        .await
        .expect("nfd")
        .expect("nfd is another lock");
    assert_eq!(
        g_nfc.key().as_bytes(),
        [b"lock:".as_slice(), nfc.as_bytes()].concat()
    );
    assert_eq!(
        g_nfd.key().as_bytes(),
        [b"lock:".as_slice(), nfd.as_bytes()].concat()
    );
    assert_eq!(
        get(&mut raw, &full(nfc)).await.as_deref(),
        Some(g_nfc.stored_value())
    );
    assert_eq!(
        get(&mut raw, &full(nfd)).await.as_deref(),
        Some(g_nfd.stored_value())
    );

    // Twin: NFC twice is one lock.
    assert!(b.try_acquire(nfc, &o).await.expect("nfc again").is_none());
    g_nfc.release().await.expect("release nfc");
    g_nfd.release().await.expect("release nfd");
}
