//! Thundering herd: 200 waiters on one hot key, spread over 8 managers (the "processes"),
//! while holders keep it 50 ms at a time. lockcore, in both waiting modes, keeps the command rate
//! flat (no burst of commands after a release) and every acquire within its wait budget. The
//! twin, a lock that broadcasts "released" to all waiters who then all retry `SET NX`, shows the
//! burst the metric is built to catch.
//!
//! The metric: a sampler reads `INFO commandstats` every 10 ms; the largest number of client
//! commands in one sample interval, over the steady phase (after every waiter has arrived and
//! before the first wait budget ends), compared with the number of waiters.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lockcore::{LockError, LockManager, LockOptions};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::sync::{Barrier, broadcast};
use tokio::time::{Instant, sleep};

const KEY: &str = "hot:1";
const MANAGERS: usize = 8;
const WAITERS: usize = 200;
const HOLD: Duration = Duration::from_millis(50);
const WAIT: Duration = Duration::from_millis(1000);
/// How far past its budget an acquire may return on this 2-core machine with 200 tasks.
const BUDGET_SLACK: Duration = Duration::from_millis(150);
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// The steady phase: every waiter has made its first attempt, none has run out of budget.
const STEADY_FROM: Duration = Duration::from_millis(300);
const STEADY_UNTIL: Duration = Duration::from_millis(950);

/// Client commands so far: the given `INFO commandstats` entries (script-internal calls are
/// counted under their own names, so each caller names the commands its clients send).
async fn client_commands(con: &mut MultiplexedConnection, names: &[&str]) -> u64 {
    let info: String = query(con, redis::cmd("INFO").arg("commandstats")).await;
    let (_, per_command) = parse_commandstats(&info);
    names.iter().filter_map(|n| per_command.get(*n)).sum()
}

/// Samples client commands every [`SAMPLE_EVERY`] until `stop`; returns (time since `start`,
/// commands in the interval ending then, scaled to [`SAMPLE_EVERY`]) for each interval.
async fn sample(
    server: &RedisServer,
    names: &'static [&'static str],
    start: Instant,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(Duration, u64)>> {
    let mut con = server.connection().await;
    tokio::spawn(async move {
        let mut last = client_commands(&mut con, names).await;
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(SAMPLE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_at = start.elapsed();
        // Bounded: the runs end within WAIT + slack; 500 samples are 5 s.
        for _ in 0..500 {
            tick.tick().await;
            if stop.load(Ordering::Acquire) {
                break;
            }
            let now = client_commands(&mut con, names).await;
            let at = start.elapsed();
            // A late sample covers a longer interval: scale its count to SAMPLE_EVERY.
            let interval = (at - last_at).max(SAMPLE_EVERY);
            let scaled = u128::from(now - last) * SAMPLE_EVERY.as_micros() / interval.as_micros();
            samples.push((at, u64::try_from(scaled).unwrap_or(u64::MAX)));
            (last, last_at) = (now, at);
        }
        samples
    })
}

/// The largest interval count in the steady phase.
fn steady_peak(samples: &[(Duration, u64)]) -> u64 {
    samples
        .iter()
        .filter(|(at, _)| *at >= STEADY_FROM && *at <= STEADY_UNTIL)
        .map(|(_, n)| *n)
        .max()
        .expect("samples in the steady phase")
}

/// 200 tasks on 8 managers each make one acquire of [`KEY`] (hold 50 ms, release). Returns the
/// steady-phase peak of script calls per interval and every acquire's (outcome, elapsed).
async fn lockcore_herd(server: &RedisServer, opts: LockOptions) -> (u64, Vec<(bool, Duration)>) {
    let mut managers: Vec<LockManager> = Vec::new();
    for _ in 0..MANAGERS {
        managers.push(manager(server).await);
    }
    let barrier = Arc::new(Barrier::new(WAITERS + 1));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let manager = managers[i % MANAGERS].clone();
        let (barrier, opts) = (Arc::clone(&barrier), opts.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let started = Instant::now();
            match manager.acquire(KEY, &opts).await {
                Ok(guard) => {
                    let waited = started.elapsed();
                    sleep(HOLD).await;
                    guard.release().await.expect("release within the lease");
                    (true, waited)
                }
                Err(LockError::Contended { .. }) => (false, started.elapsed()),
                Err(other) => panic!("unexpected {other:?}"),
            }
        }));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let sampler = sample(server, &["evalsha", "eval"], start, Arc::clone(&stop)).await;
    barrier.wait().await;
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("waiter task"));
    }
    stop.store(true, Ordering::Release);
    (steady_peak(&sampler.await.expect("sampler")), outcomes)
}

/// Every acquire returned within its budget (+ slack), and a few got the lock.
fn assert_budgets_honoured(mode: &str, outcomes: &[(bool, Duration)]) {
    let acquired = outcomes.iter().filter(|(ok, _)| *ok).count();
    let slowest = outcomes.iter().map(|(_, d)| *d).max().expect("outcomes");
    eprintln!("{mode}: {acquired} acquired, slowest acquire returned after {slowest:?}");
    assert!(
        acquired >= 5,
        "{mode}: only {acquired} acquisitions in {WAIT:?}"
    );
    assert!(
        slowest <= WAIT + BUDGET_SLACK,
        "{mode}: an acquire took {slowest:?}, budget {WAIT:?}"
    );
    for (ok, elapsed) in outcomes {
        if !ok {
            assert!(*elapsed >= WAIT, "{mode}: gave up early, after {elapsed:?}");
        }
    }
}

/// Runs [`lockcore_herd`] with `opts` and checks: budgets honoured, no burst.
async fn assert_no_herd(mode: &str, opts: LockOptions) {
    let server = RedisServer::start();
    let (peak, outcomes) = lockcore_herd(&server, opts).await;
    eprintln!("{mode}: steady peak {peak} script calls per {SAMPLE_EVERY:?}");
    assert_budgets_honoured(mode, &outcomes);
    assert!(
        peak < (WAITERS / 4) as u64,
        "{mode}: {peak} commands in one {SAMPLE_EVERY:?} interval for {WAITERS} waiters"
    );
}

/// With the default hand-off: no burst after releases, budgets honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c22_handoff_has_no_herd() {
    assert_no_herd("hand-off", opts(5000, 1000)).await;
}

/// With `handoff(false)`: jittered backoff spreads retries; budgets honoured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c22_backoff_has_no_herd() {
    assert_no_herd("backoff", opts(5000, 1000).handoff(false)).await;
}

/// The twin: a naive lock that publishes "released" to every waiter, each of whom retries
/// `SET NX` at once. Every release sets off a burst of about one command per waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c22_twin_broadcast_wake_up_is_a_herd() {
    let server = RedisServer::start();
    let channel = "released:hot:1";
    let barrier = Arc::new(Barrier::new(WAITERS + 1));
    let mut tasks = Vec::new();
    for m in 0..MANAGERS {
        // One "process": a connection for commands, one subscription fanned out to its waiters.
        let con = server.connection().await;
        let mut pubsub = server
            .client()
            .get_async_pubsub()
            .await
            .expect("pubsub connection");
        pubsub.subscribe(channel).await.expect("subscribe");
        let (wake, _) = broadcast::channel::<()>(64);
        let fan_out = wake.clone();
        tokio::spawn(async move {
            let mut messages = pubsub.into_on_message();
            while messages.next().await.is_some() {
                let _ = fan_out.send(());
            }
        });
        for w in 0..WAITERS / MANAGERS {
            let (mut con, barrier) = (con.clone(), Arc::clone(&barrier));
            let mut woken = wake.subscribe();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let started = Instant::now();
                let token = format!("waiter-{m}-{w}");
                while started.elapsed() < WAIT {
                    let won: Option<String> =
                        query(&mut con, &naive_set_nx(KEY, &token, 5000)).await;
                    if won.is_some() {
                        sleep(HOLD).await;
                        let _: i64 = query(&mut con, redis::cmd("DEL").arg(KEY)).await;
                        let _: i64 =
                            query(&mut con, redis::cmd("PUBLISH").arg(channel).arg("1")).await;
                        return true;
                    }
                    // Wait for the broadcast, or poll again after the longest hold.
                    let _ = tokio::time::timeout(HOLD * 2, woken.recv()).await;
                }
                false
            }));
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let sampler = sample(
        &server,
        &["set", "del", "publish"],
        start,
        Arc::clone(&stop),
    )
    .await;
    barrier.wait().await;
    let mut acquired = 0;
    for t in tasks {
        acquired += usize::from(t.await.expect("waiter task"));
    }
    stop.store(true, Ordering::Release);
    let peak = steady_peak(&sampler.await.expect("sampler"));
    eprintln!(
        "broadcast twin: {acquired} acquired, steady peak {peak} commands per {SAMPLE_EVERY:?}"
    );
    assert!(acquired >= 5, "twin: only {acquired} acquisitions");
    assert!(
        peak >= (WAITERS / 2) as u64,
        "the broadcast twin should burst about one SET NX per waiter after a release; peak {peak}"
    );
}
