//! Hand-off under contention (lockcore/src/handoff.rs, single node): pushed hand-off latency
//! and its polling twin, FIFO fairness, one wake per release (commands per acquisition), missed
//! wake-ups, dead and cancelled waiters, the wait budget, no queueing for `try_acquire` and
//! `wait = 0`, and mixed hand-off / polling acquirers.
//!
//! Every test runs its own `redis-server`. Queue keys are found with `KEYS *__waitq__*` and
//! `KEYS *__waiters__*`, never computed from lockcore internals. Figures are printed with
//! `eprintln!` (visible with `--nocapture`).

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use lockcore::{LockError, LockGuard, LockManager, LockOptions};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::sync::{Barrier, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// Spawns `m.acquire(key, o)` and returns the task, which yields the instant the acquire
/// returned together with its result.
fn spawn_acquire(
    m: &LockManager,
    key: &'static str,
    o: &LockOptions,
) -> JoinHandle<(Instant, Result<LockGuard, LockError>)> {
    let m = m.clone();
    let o = o.clone();
    tokio::spawn(async move {
        let result = m.acquire(key, &o).await;
        (Instant::now(), result)
    })
}

// ---- 1. hand-off latency ----------------------------------------------------------------------

/// `rounds` times: `holder` takes `key`, one waiter of `waiter` starts `acquire`, and once its
/// first attempt has run on Redis (and, with hand-off, it is queued; with `channel`, that
/// channel is subscribed) the holder releases. Returns the time from just before `release()` to
/// the waiter's `acquire` returning.
async fn handoff_latencies(
    holder: &LockManager,
    waiter: &LockManager,
    raw: &mut MultiplexedConnection,
    handoff: bool,
    channel: Option<&str>,
    rounds: usize,
) -> Vec<Duration> {
    const KEY: &str = "latency";
    let hold = opts(10_000, 0);
    let wait = opts(10_000, 5_000).handoff(handoff);
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let guard = holder
            .try_acquire(KEY, &hold)
            .await
            .expect("holder")
            .unwrap_or_else(|| panic!("round {round}: the key must be free at the start"));
        let before = script_calls(raw).await;
        let task = spawn_acquire(waiter, KEY, &wait);
        wait_script_calls_above(raw, before).await;
        if handoff {
            wait_queue_len(raw, 1).await;
        } else {
            assert!(
                queue_leftovers(raw).await.is_empty(),
                "handoff(false) never queues"
            );
        }
        if let Some(channel) = channel {
            let started = Instant::now();
            while numsub(raw, channel).await < 1 && started.elapsed() < SHOW_UP {
                sleep(POLL).await;
            }
            assert_eq!(
                numsub(raw, channel).await,
                1,
                "the waiter's manager did not re-subscribe {channel} within {SHOW_UP:?}"
            );
        }
        let released_at = Instant::now();
        guard.release().await.expect("holder releases");
        let (acquired_at, result) = task.await.expect("waiter task");
        let got = result.unwrap_or_else(|e| panic!("round {round}: waiter: {e:?}"));
        latencies.push(acquired_at - released_at);
        got.release().await.expect("waiter releases");
    }
    latencies
}

/// 1. A single queued waiter gets the lock about two round trips after the holder's `release`
///    call: p50 over 50 hand-offs < 5 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_latency_is_a_few_round_trips() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let waiter = manager(&server).await;
    let latencies = handoff_latencies(&holder, &waiter, &mut raw, true, None, 50).await;
    let (p50, p90, max) = (
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.9),
        quantile(&latencies, 1.0),
    );
    eprintln!(
        "hand-off latency over {} hand-offs: p50 {:.3} ms, p90 {:.3} ms, max {:.3} ms",
        latencies.len(),
        ms_f64(p50),
        ms_f64(p90),
        ms_f64(max)
    );
    assert!(
        p50 < Duration::from_millis(5),
        "hand-off p50 {p50:?} is not a few round trips"
    );
}

/// 1, twin: `handoff(false)` with the default backoff (50 ms base) polls, so the waiter notices
/// the release only at its next retry: p50 is tens of ms, at least 3x the hand-off p50 measured
/// on the same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_latency_twin_polling_is_much_slower() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let waiter = manager(&server).await;
    let pushed = handoff_latencies(&holder, &waiter, &mut raw, true, None, 20).await;
    let polled = handoff_latencies(&holder, &waiter, &mut raw, false, None, 50).await;
    let (pushed_p50, polled_p50) = (quantile(&pushed, 0.5), quantile(&polled, 0.5));
    eprintln!(
        "hand-off p50 {:.3} ms (20 rounds) vs handoff(false) p50 {:.3} ms, p90 {:.3} ms (50 rounds)",
        ms_f64(pushed_p50),
        ms_f64(polled_p50),
        ms_f64(quantile(&polled, 0.9))
    );
    assert!(
        polled_p50 >= pushed_p50 * 3 && polled_p50 >= Duration::from_millis(5),
        "polling p50 {polled_p50:?} should be far above the hand-off p50 {pushed_p50:?}"
    );
}

// ---- 2. FIFO fairness -------------------------------------------------------------------------

const CONTENDERS: usize = 8;

struct FairnessRun {
    counts: Vec<u64>,
    max_wait: Duration,
    gave_up: u64,
}

/// `CONTENDERS` contenders, each with its own manager (one service instance each), loop
/// acquire → hold 1 ms → release on one key for `duration`.
async fn fairness_run(server: &RedisServer, handoff: bool, duration: Duration) -> FairnessRun {
    let mut managers = Vec::new();
    for _ in 0..CONTENDERS {
        managers.push(manager(server).await);
    }
    let o = opts(5_000, 3_000).handoff(handoff);
    let barrier = Arc::new(Barrier::new(CONTENDERS));
    let stop_at = Instant::now() + duration;
    let mut tasks = Vec::new();
    for m in managers {
        let (o, barrier) = (o.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let (mut count, mut max_wait, mut gave_up) = (0u64, Duration::ZERO, 0u64);
            while Instant::now() < stop_at {
                let started = Instant::now();
                match m.acquire("fair", &o).await {
                    Ok(guard) => {
                        max_wait = max_wait.max(started.elapsed());
                        sleep(Duration::from_millis(1)).await;
                        guard.release().await.expect("release within the lease");
                        count += 1;
                    }
                    Err(LockError::Contended { .. }) => gave_up += 1,
                    Err(e) => panic!("contender: {e:?}"),
                }
            }
            (count, max_wait, gave_up)
        }));
    }
    let mut run = FairnessRun {
        counts: Vec::new(),
        max_wait: Duration::ZERO,
        gave_up: 0,
    };
    for task in tasks {
        let (count, max_wait, gave_up) = task.await.expect("contender task");
        run.counts.push(count);
        run.max_wait = run.max_wait.max(max_wait);
        run.gave_up += gave_up;
    }
    run
}

/// 2. First come, first served: 8 contenders (own managers) for ~2 s all get the lock, about
///    equally often (Jain index ≥ 0.95), and nobody waits long. The `handoff(false)` run on the
///    same server is printed for comparison (not asserted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_fairness_no_starvation() {
    let server = RedisServer::start();
    let fair = fairness_run(&server, true, Duration::from_secs(2)).await;
    let fair_jain = jain(&fair.counts).unwrap_or(0.0);
    eprintln!(
        "hand-off: counts {:?}, total {}, Jain {fair_jain:.4}, max wait {:.1} ms, gave up {}",
        fair.counts,
        fair.counts.iter().sum::<u64>(),
        ms_f64(fair.max_wait),
        fair.gave_up
    );
    let polled = fairness_run(&server, false, Duration::from_secs(2)).await;
    eprintln!(
        "handoff(false) twin: counts {:?}, total {}, Jain {:.4}, max wait {:.1} ms, gave up {}",
        polled.counts,
        polled.counts.iter().sum::<u64>(),
        jain(&polled.counts).unwrap_or(0.0),
        ms_f64(polled.max_wait),
        polled.gave_up
    );
    assert!(
        fair.counts.iter().all(|&c| c > 0),
        "a contender starved: {:?}",
        fair.counts
    );
    assert_eq!(fair.gave_up, 0, "nobody gives up in a FIFO queue of 8");
    assert!(
        fair_jain >= 0.95,
        "Jain index {fair_jain:.4} for {:?}",
        fair.counts
    );
    assert!(
        fair.max_wait < Duration::from_millis(500),
        "max wait {:?} with 7 holders of ~1 ms ahead",
        fair.max_wait
    );
}

// ---- 3. one release wakes one waiter ----------------------------------------------------------

struct CommandCount {
    acquisitions: u64,
    script_calls: u64,
    publishes: u64,
    pubsub_connections: usize,
    elapsed: Duration,
}

impl CommandCount {
    fn per_acquisition(&self) -> f64 {
        self.script_calls as f64 / self.acquisitions as f64
    }
}

/// 8 contenders (own managers) x 50 acquisitions (hold 1 ms) on one key with `o`; counts the
/// script calls and `PUBLISH`es Redis ran meanwhile, and the pub/sub connections open at the
/// end (while the managers still live).
async fn count_commands(server: &RedisServer, o: &LockOptions) -> CommandCount {
    const ROUNDS: u64 = 50;
    let mut raw = server.connection().await;
    let mut managers = Vec::new();
    for _ in 0..CONTENDERS {
        managers.push(manager(server).await);
    }
    let barrier = Arc::new(Barrier::new(CONTENDERS));
    reset_stats(&mut raw).await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for m in &managers {
        let (m, o, barrier) = (m.clone(), o.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            for _ in 0..ROUNDS {
                let guard = m.acquire("single-wake", &o).await.expect("acquire");
                sleep(Duration::from_millis(1)).await;
                guard.release().await.expect("release within the lease");
            }
        }));
    }
    for task in tasks {
        task.await.expect("contender task");
    }
    let elapsed = started.elapsed();
    let stats = commandstats(&mut raw).await;
    let pubsub: String = query(&mut raw, &cmd(&["CLIENT", "LIST", "TYPE", "pubsub"])).await;
    drop(managers);
    CommandCount {
        acquisitions: ROUNDS * CONTENDERS as u64,
        script_calls: calls_of(&stats, "evalsha") + calls_of(&stats, "eval"),
        publishes: calls_of(&stats, "publish"),
        pubsub_connections: pubsub.lines().count(),
        elapsed,
    }
}

fn print_count(label: &str, count: &CommandCount) {
    eprintln!(
        "{label}: {} acquisitions, {} script calls = {:.3} per acquisition, {} PUBLISH, {} pub/sub connections, {:.0} ms",
        count.acquisitions,
        count.script_calls,
        count.per_acquisition(),
        count.publishes,
        count.pubsub_connections,
        ms_f64(count.elapsed)
    );
}

/// 3. One release wakes one waiter: over 8 contenders x 50 acquisitions, Redis runs at most 3
///    script calls per acquisition (queue, claim, release). A herd (every waiter re-trying on
///    each release) would add up to 7 per release. Also: one pub/sub connection per manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_wake_three_commands_per_acquisition() {
    let server = RedisServer::start();
    let count = count_commands(&server, &opts(5_000, 10_000)).await;
    print_count("hand-off", &count);
    // Every contended acquisition was handed over by one PUBLISH of one release.
    assert!(
        count.publishes <= count.acquisitions,
        "more wake-ups ({}) than acquisitions ({})",
        count.publishes,
        count.acquisitions
    );
    assert!(
        count.publishes * 10 >= count.acquisitions * 9,
        "under contention nearly every acquisition is a hand-off: {} PUBLISH for {}",
        count.publishes,
        count.acquisitions
    );
    let ratio = count.per_acquisition();
    assert!(
        ratio <= 3.0,
        "{ratio:.3} script calls per acquisition (expected ≤ 3: queue, claim, release)"
    );
    assert_eq!(
        count.pubsub_connections, CONTENDERS,
        "one pub/sub connection per manager"
    );
}

/// 3, twin: `handoff(false)` polling that aims at a comparable latency (backoff 1..8 ms) runs
/// more script calls per acquisition than hand-off: every waiter retries on its own, most of
/// them in vain. Polling with the default backoff (50 ms base) is printed only: it runs *fewer*
/// script calls than hand-off (its waiters mostly sleep while the releaser barges back in), at
/// the price of fairness (see `fifo_fairness_no_starvation`) and of hand-off latency (see
/// `handoff_latency_twin_polling_is_much_slower`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_wake_twin_polling_costs_more_commands() {
    let server = RedisServer::start();
    let pushed = count_commands(&server, &opts(5_000, 10_000)).await;
    let fast = opts(5_000, 10_000)
        .handoff(false)
        .retry_base(Duration::from_millis(1))
        .retry_cap(Duration::from_millis(8));
    let polled_fast = count_commands(&server, &fast).await;
    let polled_default = count_commands(&server, &opts(5_000, 10_000).handoff(false)).await;
    print_count("hand-off", &pushed);
    print_count("handoff(false), backoff 1..8 ms", &polled_fast);
    print_count("handoff(false), default backoff", &polled_default);
    assert_eq!(polled_fast.publishes, 0, "nobody queues, nobody is woken");
    assert!(
        polled_fast.per_acquisition() > pushed.per_acquisition(),
        "polling {:.3} vs hand-off {:.3} script calls per acquisition",
        polled_fast.per_acquisition(),
        pushed.per_acquisition()
    );
}

// ---- 4. missed wake-ups -----------------------------------------------------------------------

/// 4. `CLIENT KILL TYPE pubsub` while a waiter is queued, then release: the waiter still gets
///    the lock within one refresh interval (250 ms) + slack, its manager re-subscribes, and
///    later hand-offs are pushed again (p50 < 10 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_wakeup_after_pubsub_kill_costs_at_most_one_refresh() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let (waiter, channel) = manager_with_channel(&server, &mut raw).await;

    let guard = must_acquire(&holder, "missed", &opts(10_000, 0)).await;
    let task = spawn_acquire(&waiter, "missed", &opts(10_000, 5_000));
    wait_queue_len(&mut raw, 1).await;
    let killed: i64 = query(&mut raw, &cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])).await;
    assert!(killed >= 2, "both managers' pub/sub connections: {killed}");
    let released_at = Instant::now();
    guard.release().await.expect("release");
    let (acquired_at, result) = task.await.expect("waiter task");
    let latency = acquired_at - released_at;
    eprintln!("after CLIENT KILL TYPE pubsub: waiter acquired {latency:?} after the release");
    assert!(
        latency <= Duration::from_millis(300),
        "a missed wake-up must cost at most one refresh (250 ms) + slack, took {latency:?}"
    );
    result
        .expect("waiter acquires")
        .release()
        .await
        .expect("release");

    assert_pushed_again(&holder, &waiter, &mut raw, &channel, "after re-subscribing").await;
}

/// Ten more hand-offs from `holder` to `waiter` are pushed again (p50 < 10 ms): the manager
/// re-subscribed to `channel` on its own.
async fn assert_pushed_again(
    holder: &LockManager,
    waiter: &LockManager,
    raw: &mut MultiplexedConnection,
    channel: &str,
    when: &str,
) {
    let later = handoff_latencies(holder, waiter, raw, true, Some(channel), 10).await;
    let p50 = quantile(&later, 0.5);
    eprintln!(
        "{when}: hand-off p50 {:.3} ms, max {:.3} ms",
        ms_f64(p50),
        ms_f64(quantile(&later, 1.0))
    );
    assert!(
        p50 < Duration::from_millis(10),
        "hand-offs are pushed again after the re-subscription: p50 {p50:?}"
    );
}

/// 4, forced: the wake-up is surely missed (the kill happens, and `SUBSCRIBE` is refused by an
/// ACL until further notice, so the manager cannot re-subscribe before the release publishes).
/// The waiter still acquires within one refresh interval + slack, and not by a push (so this
/// really measures the refresh path). Once `SUBSCRIBE` is allowed again the manager
/// re-subscribes on its own and hand-offs are pushed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_wakeup_forced_is_recovered_by_the_refresh() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let (waiter, channel) = manager_with_channel(&server, &mut raw).await;

    let guard = must_acquire(&holder, "missed", &opts(10_000, 0)).await;
    let task = spawn_acquire(&waiter, "missed", &opts(10_000, 5_000));
    wait_queue_len(&mut raw, 1).await;
    let _: () = query(&mut raw, &cmd(&["ACL", "SETUSER", "default", "-subscribe"])).await;
    let before = script_calls(&mut raw).await;
    let killed: i64 = query(&mut raw, &cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])).await;
    assert!(killed >= 2, "both managers' pub/sub connections: {killed}");
    // The lost subscription makes the waiter re-check at once; its next re-check is then one
    // refresh interval away.
    let recheck = wait_script_calls_above(&mut raw, before).await;
    assert_eq!(numsub(&mut raw, &channel).await, 0, "SUBSCRIBE is refused");
    let released_at = Instant::now();
    guard.release().await.expect("release");
    let (acquired_at, result) = task.await.expect("waiter task");
    let latency = acquired_at - released_at;
    eprintln!(
        "forced missed wake-up: waiter re-checked {recheck:?} after the kill, acquired {latency:?} after the release"
    );
    assert!(
        latency >= Duration::from_millis(20),
        "the wake-up could not be pushed (no subscription), yet the waiter acquired after {latency:?}"
    );
    assert!(
        latency <= Duration::from_millis(300),
        "a missed wake-up must cost at most one refresh (250 ms) + slack, took {latency:?}"
    );
    result
        .expect("waiter acquires")
        .release()
        .await
        .expect("release");

    let _: () = query(&mut raw, &cmd(&["ACL", "SETUSER", "default", "+subscribe"])).await;
    assert_pushed_again(
        &holder,
        &waiter,
        &mut raw,
        &channel,
        "after SUBSCRIBE is allowed again",
    )
    .await;
}

// ---- 5. dead waiters in the queue -------------------------------------------------------------

/// 5a. A waiter whose future is dropped (task aborted) while queued withdraws its entry in the
///     background, so the release hands the lock straight to the live waiter behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiter_aborted_future_is_withdrawn() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let (w1, w2) = (manager(&server).await, manager(&server).await);
    let wait = opts(10_000, 5_000);

    let guard = must_acquire(&holder, "dead", &opts(10_000, 0)).await;
    let first = spawn_acquire(&w1, "dead", &wait);
    let (queue, entries) = wait_queue_len(&mut raw, 1).await;
    let dead_token = lrange(&mut raw, &queue).await.remove(0);
    let second = spawn_acquire(&w2, "dead", &wait);
    wait_queue_len(&mut raw, 2).await;

    first.abort();
    assert!(first.await.is_err_and(|e| e.is_cancelled()));
    let started = Instant::now();
    while (lrange(&mut raw, &queue).await.contains(&dead_token)
        || waiter_live(&mut raw, &entries, &dead_token).await)
        && started.elapsed() < Duration::from_millis(500)
    {
        sleep(POLL).await;
    }
    let withdrawn = started.elapsed();
    assert!(
        !lrange(&mut raw, &queue).await.contains(&dead_token)
            && !waiter_live(&mut raw, &entries, &dead_token).await,
        "the aborted waiter's entry is still queued 500 ms later"
    );
    assert_eq!(
        llen(&mut raw, &queue).await,
        1,
        "the live waiter stays queued"
    );

    let released_at = Instant::now();
    guard.release().await.expect("release");
    let (acquired_at, result) = second.await.expect("live waiter task");
    let latency = acquired_at - released_at;
    eprintln!(
        "aborted waiter withdrawn {withdrawn:?} after the abort; live waiter acquired {latency:?} after the release"
    );
    let got = result.expect("the live waiter acquires");
    assert!(
        latency < Duration::from_millis(100),
        "nothing dead is left ahead: the hand-off is pushed, took {latency:?}"
    );
    got.release().await.expect("release");
}

/// 5b. A killed process: the waiter's manager runs on its own current_thread runtime in a
///     std thread, which is dropped while the waiter is queued. Its background withdrawal has
///     no runtime to run on, so its entry stays (checked). The release hands the lock to that
///     dead waiter for the 500 ms claim window; the live waiter behind it gets the lock in
///     < 1 s (asserted < 1.2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiter_killed_process_delays_others_less_than_a_second() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let live = manager(&server).await;

    let guard = must_acquire(&holder, "dead", &opts(10_000, 0)).await;
    let (kill_tx, kill_rx) = oneshot::channel::<()>();
    let url = server.url();
    let process = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let m = LockManager::connect(&url).await.expect("connect");
            let o = opts(10_000, 5_000);
            tokio::spawn(async move {
                let _ = m.acquire("dead", &o).await;
            });
            let _ = kill_rx.await;
        });
        // The acquire task (and the withdrawal its drop spawns) dies with the runtime.
        drop(runtime);
    });
    let (queue, entries) = wait_queue_len(&mut raw, 1).await;
    let dead_token = lrange(&mut raw, &queue).await.remove(0);
    kill_tx.send(()).expect("the process waits");
    tokio::task::spawn_blocking(move || process.join())
        .await
        .expect("join")
        .expect("the process thread does not panic");
    assert!(
        waiter_live(&mut raw, &entries, &dead_token).await && llen(&mut raw, &queue).await == 1,
        "the killed waiter's entry must still be queued (dirty), queue {:?}",
        lrange(&mut raw, &queue).await
    );

    let second = spawn_acquire(&live, "dead", &opts(10_000, 5_000));
    wait_queue_len(&mut raw, 2).await;
    let released_at = Instant::now();
    guard.release().await.expect("release");
    assert_eq!(
        holder_token(&mut raw, &full("dead")).await.as_deref(),
        Some(token_of(&dead_token)),
        "the release hands the lock to the first live entry: the dead waiter"
    );
    let (acquired_at, result) = second.await.expect("live waiter task");
    let latency = acquired_at - released_at;
    eprintln!("killed waiter ahead: live waiter acquired {latency:?} after the release");
    let got = result.expect("the live waiter acquires");
    assert!(
        latency < Duration::from_millis(1200),
        "a dead waiter must hold the others up for < 1 s, took {latency:?}"
    );
    got.release().await.expect("release");
    assert!(
        queue_gone_within(&mut raw, Duration::from_millis(100))
            .await
            .is_some(),
        "no queue keys are left: {:?}",
        queue_leftovers(&mut raw).await
    );
}

/// 5c. A dead waiter planted by hand ahead of a live one, in the format the acquire script
///     writes (a waiter key living 600 ms, ttl 30 s, a channel nobody listens on): the live waiter gets the lock within < 1 s (asserted < 1.2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiter_planted_entry_delays_others_less_than_a_second() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let live = manager(&server).await;

    let guard = must_acquire(&holder, "dead", &opts(10_000, 0)).await;
    let second = spawn_acquire(&live, "dead", &opts(10_000, 5_000));
    let (queue, entries) = wait_queue_len(&mut raw, 1).await;
    let fake = "00000000-dead-4000-8000-000000000000";
    plant_waiter(
        &mut raw,
        &entries,
        fake,
        30_000,
        "lock:__wake__:nobody-listens",
        &fencing_counter_key(),
        600,
    )
    .await;
    let _: i64 = query(&mut raw, &cmd(&["LPUSH", &queue, fake])).await;
    assert_eq!(lrange(&mut raw, &queue).await[0], fake, "planted ahead");

    let released_at = Instant::now();
    guard.release().await.expect("release");
    assert_eq!(
        get(&mut raw, &full("dead")).await.as_deref(),
        Some(fake),
        "the release hands the lock to the planted (live-looking) entry"
    );
    let (acquired_at, result) = second.await.expect("live waiter task");
    let latency = acquired_at - released_at;
    eprintln!("planted dead waiter ahead: live waiter acquired {latency:?} after the release");
    let got = result.expect("the live waiter acquires");
    assert!(
        latency < Duration::from_millis(1200),
        "a dead waiter must hold the others up for < 1 s, took {latency:?}"
    );
    got.release().await.expect("release");
}

// ---- 6. the wait budget -----------------------------------------------------------------------

/// 6. A queued waiter with wait 300 ms returns `Contended` with `waited` in [300, 320) ms, and
///    its entry is withdrawn right after (well before the 600 ms entry lease would drop it),
///    while another waiter's entry stays and that waiter still gets a pushed hand-off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_budget_is_honoured_and_leaves_no_entry() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let (patient, hasty) = (manager(&server).await, manager(&server).await);

    let guard = must_acquire(&holder, "budget", &opts(10_000, 0)).await;
    let long = spawn_acquire(&patient, "budget", &opts(10_000, 5_000));
    let (queue, entries) = wait_queue_len(&mut raw, 1).await;
    let short = spawn_acquire(&hasty, "budget", &opts(10_000, 300));
    wait_queue_len(&mut raw, 2).await;
    let hasty_token = lrange(&mut raw, &queue).await.remove(1);
    assert!(waiter_live(&mut raw, &entries, &hasty_token).await);

    let (returned_at, result) = short.await.expect("hasty waiter task");
    match result {
        Err(LockError::Contended { key, waited }) => {
            eprintln!("wait 300 ms: Contended after waited = {waited:?}");
            assert_eq!(key, full("budget"));
            assert!(
                waited >= Duration::from_millis(300) && waited < Duration::from_millis(320),
                "waited {waited:?}, expected [300, 320) ms"
            );
        }
        other => panic!("expected Contended, got {other:?}"),
    }
    let mut withdrawn = None;
    while returned_at.elapsed() < Duration::from_millis(100) {
        if !lrange(&mut raw, &queue).await.contains(&hasty_token)
            && !waiter_live(&mut raw, &entries, &hasty_token).await
        {
            withdrawn = Some(returned_at.elapsed());
            break;
        }
        sleep(POLL).await;
    }
    eprintln!("the hasty waiter's entry was withdrawn {withdrawn:?} after Contended");
    assert!(
        withdrawn.is_some(),
        "the waiter that gave up is still queued 100 ms later: {:?}",
        lrange(&mut raw, &queue).await
    );
    assert_eq!(llen(&mut raw, &queue).await, 1, "the patient waiter stays");

    let released_at = Instant::now();
    guard.release().await.expect("release");
    let (acquired_at, result) = long.await.expect("patient waiter task");
    let got = result.expect("the patient waiter acquires");
    assert!(
        acquired_at - released_at < Duration::from_millis(100),
        "pushed hand-off to the patient waiter took {:?}",
        acquired_at - released_at
    );
    got.release().await.expect("release");
    let gone = queue_gone_within(&mut raw, Duration::from_millis(100)).await;
    assert!(
        gone.is_some(),
        "queue keys left after the last waiter: {:?}",
        queue_leftovers(&mut raw).await
    );
}

// ---- 7. no queueing without waiting -----------------------------------------------------------

/// 7. `try_acquire` and `acquire` with wait 0 (and `handoff(false)` waiting) never queue: no
///    queue key appears. Twin: an `acquire` that waits does queue (the probe sees it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_and_wait_zero_never_enqueue() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let other = manager(&server).await;
    let guard = must_acquire(&holder, "noqueue", &opts(10_000, 0)).await;

    assert!(
        other
            .try_acquire("noqueue", &opts(10_000, 5_000))
            .await
            .expect("try_acquire")
            .is_none()
    );
    assert_eq!(queue_leftovers(&mut raw).await, Vec::<String>::new());
    let err = other
        .acquire("noqueue", &opts(10_000, 0))
        .await
        .expect_err("held");
    assert!(err.is_contended(), "{err:?}");
    assert_eq!(queue_leftovers(&mut raw).await, Vec::<String>::new());
    let err = other
        .acquire("noqueue", &opts(10_000, 100).handoff(false))
        .await
        .expect_err("held");
    assert!(err.is_contended(), "{err:?}");
    assert_eq!(queue_leftovers(&mut raw).await, Vec::<String>::new());

    // Twin: waiting with hand-off on queues (so the probe above can see a queue).
    let waiting = spawn_acquire(&other, "noqueue", &opts(10_000, 150));
    let (queue, entries) = wait_queue_len(&mut raw, 1).await;
    assert!(queue.contains("noqueue") && entries.contains("noqueue"));
    let (_, result) = waiting.await.expect("waiter task");
    assert!(result.is_err_and(|e| e.is_contended()));

    guard.release().await.expect("release");
    // The waiter withdraws in the background (its error returned within its budget); a
    // release that overtakes the withdrawal hands it the key, which it gives back at once.
    let gone = queue_gone_within(&mut raw, Duration::from_secs(2)).await;
    assert!(gone.is_some(), "{:?}", queue_leftovers(&mut raw).await);
    let until = Instant::now() + Duration::from_secs(2);
    let free = loop {
        let free = other
            .try_acquire("noqueue", &opts(10_000, 0))
            .await
            .expect("try_acquire");
        if let Some(free) = free {
            break free;
        }
        assert!(Instant::now() < until, "the key never came free");
        sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(queue_leftovers(&mut raw).await, Vec::<String>::new());
    free.release().await.expect("release");
}

// ---- 8. a waiter cancelled right when it is handed the lock -----------------------------------

/// 8a, deterministic: the first of two queued waiters is handed the lock while it cannot be
/// woken (its manager's pub/sub connection was killed and `SUBSCRIBE` is refused, so it sleeps
/// until its next re-check), and its task is aborted right then. Its withdrawal releases the
/// handed-over key and hands it on: the second waiter gets it by a push within 100 ms, not
/// when the 500 ms claim window lapses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_handed_while_asleep_passes_the_lock_on() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let before = pubsub_client_ids(&mut raw).await;
    let first_m = manager(&server).await;
    let first_pubsub: Vec<String> = pubsub_client_ids(&mut raw)
        .await
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert_eq!(first_pubsub.len(), 1, "one pub/sub connection per manager");
    let holder = manager(&server).await;
    let second_m = manager(&server).await;
    let wait = opts(30_000, 5_000);

    let guard = must_acquire(&holder, "asleep", &opts(30_000, 0)).await;
    let first = spawn_acquire(&first_m, "asleep", &wait);
    let (queue, _) = wait_queue_len(&mut raw, 1).await;
    let first_token = lrange(&mut raw, &queue).await.remove(0);
    let second = spawn_acquire(&second_m, "asleep", &wait);
    wait_queue_len(&mut raw, 2).await;

    let _: () = query(&mut raw, &cmd(&["ACL", "SETUSER", "default", "-subscribe"])).await;
    let calls = script_calls(&mut raw).await;
    let _: () = query(&mut raw, &cmd(&["CLIENT", "KILL", "ID", &first_pubsub[0]])).await;
    // The lost subscription makes the first waiter re-check at once; then it sleeps 250 ms.
    wait_script_calls_above(&mut raw, calls).await;
    guard.release().await.expect("release");
    assert_eq!(
        holder_token(&mut raw, &full("asleep")).await.as_deref(),
        Some(token_of(&first_token)),
        "the release handed the key to the first waiter"
    );
    let handed_ttl = pttl(&mut raw, &full("asleep")).await;
    // The claim window is 500 ms plus twice the waiter's round trip (well under 50 ms here).
    assert!(
        (1..=600).contains(&handed_ttl),
        "claim window: {handed_ttl} ms"
    );
    let aborted_at = Instant::now();
    first.abort();
    assert!(first.await.is_err_and(|e| e.is_cancelled()));
    let (acquired_at, result) = second.await.expect("second waiter task");
    let latency = acquired_at - aborted_at;
    eprintln!(
        "waiter cancelled while handed the lock: the next waiter got it {latency:?} after the abort"
    );
    let got = result.expect("the live waiter acquires");
    assert!(
        latency < Duration::from_millis(100),
        "the cancelled waiter's withdrawal must pass the handed key on, not leave it to the 500 ms claim window: {latency:?}"
    );
    got.release().await.expect("release");
    let _: () = query(&mut raw, &cmd(&["ACL", "SETUSER", "default", "+subscribe"])).await;
    assert!(
        queue_gone_within(&mut raw, Duration::from_millis(200))
            .await
            .is_some(),
        "{:?}",
        queue_leftovers(&mut raw).await
    );
}

/// 8b. Two waiters are queued; the holder releases (handing the lock to the first) and the
///     first waiter's task is aborted a short random time later, aimed at the window between
///     the hand-off and the end of its claim (calibrated on the hand-offs that completed).
///     Whatever the timing, the second (live) waiter gets the lock within < 1 s and the key is
///     never stuck for the 30 s TTL. Runs until 5 aborts hit a waiter that held the handed (or
///     already claimed) key, at most 300 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_just_handed_the_lock_does_not_keep_it() {
    const MAX_ROUNDS: usize = 300;
    const WANTED_HITS: u32 = 5;
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let (first_m, second_m) = (manager(&server).await, manager(&server).await);
    let wait = opts(30_000, 2_000);

    let (mut cancelled, mut completed, mut handed_when_cancelled, mut claimed_when_cancelled) =
        (0u32, 0u32, 0u32, 0u32);
    // How long a completed hand-off takes from the release call to the waiter's return.
    let mut typical = Duration::from_micros(500);
    let mut latencies = Vec::new();
    let mut rounds = 0;
    while rounds < MAX_ROUNDS && handed_when_cancelled < WANTED_HITS {
        rounds += 1;
        let guard = must_acquire(&holder, "handed", &opts(30_000, 0)).await;
        let first = spawn_acquire(&first_m, "handed", &wait);
        let (queue, _) = wait_queue_len(&mut raw, 1).await;
        let first_token = lrange(&mut raw, &queue).await.remove(0);
        let second = spawn_acquire(&second_m, "handed", &wait);
        wait_queue_len(&mut raw, 2).await;

        let delay = typical.mul_f64(0.2 + fastrand::f64());
        let released_at = Instant::now();
        let release = tokio::spawn(guard.release());
        while released_at.elapsed() < delay {
            tokio::task::yield_now().await;
        }
        first.abort();
        let holder_at_abort = holder_token(&mut raw, &full("handed")).await;
        let pttl_at_abort = pttl(&mut raw, &full("handed")).await;
        release.await.expect("release task").expect("release");

        let live_from = match first.await {
            Ok((acquired_at, Ok(got))) => {
                // The first waiter finished before the abort: a live holder; let it go.
                completed += 1;
                typical = (typical + (acquired_at - released_at)) / 2;
                let at = Instant::now();
                got.release().await.expect("release");
                at
            }
            Ok((_, Err(e))) => panic!("round {rounds}: first waiter: {e:?}"),
            Err(e) => {
                assert!(e.is_cancelled());
                cancelled += 1;
                if holder_at_abort.as_deref() == Some(token_of(&first_token)) {
                    handed_when_cancelled += 1;
                    if pttl_at_abort > 1_000 {
                        claimed_when_cancelled += 1;
                    }
                }
                released_at
            }
        };
        let (acquired_at, result) = second.await.expect("second waiter task");
        let got = result.unwrap_or_else(|e| {
            panic!(
                "round {rounds} (abort {delay:?} after the release): the live waiter did not get the lock: {e:?}"
            )
        });
        let latency = acquired_at - live_from;
        if live_from == released_at {
            latencies.push(latency);
        }
        assert!(
            latency < Duration::from_secs(1),
            "round {rounds}: the live waiter got the lock only after {latency:?}"
        );
        got.release().await.expect("release");
        assert!(
            queue_gone_within(&mut raw, Duration::from_millis(200))
                .await
                .is_some(),
            "round {rounds}: queue keys left: {:?}",
            queue_leftovers(&mut raw).await
        );
        assert!(
            !exists(&mut raw, &full("handed")).await,
            "round {rounds}: the key is still held (value {:?}, pttl {})",
            get(&mut raw, &full("handed")).await,
            pttl(&mut raw, &full("handed")).await
        );
    }
    let max = latencies.iter().max().copied().unwrap_or_default();
    eprintln!(
        "{rounds} rounds (typical hand-off {typical:?}): {cancelled} cancelled ({handed_when_cancelled} while holding the handed key, {claimed_when_cancelled} of them already claimed with the full TTL), {completed} completed; live waiter after a cancelled first waiter: max {max:?}"
    );
    assert!(cancelled > 0, "no waiter was cancelled: nothing exercised");
    assert!(
        handed_when_cancelled > 0,
        "no waiter was cancelled while the key was handed to it in {rounds} rounds"
    );
}

// ---- 9. mixed modes ---------------------------------------------------------------------------

/// 9. A `handoff(false)` acquirer does not barge ahead of a queued live waiter: with the key
///    free (its holder's key deleted by hand, as if the lease ended) and a hand-off waiter
///    queued and asleep until its next re-check, the polling acquirer's `try_acquire` returns
///    `None`, its 100 ms `acquire` returns `Contended`, and a hand-off newcomer's `try_acquire`
///    returns `None` too; the queued waiter then takes the key at its re-check. Twins: with the
///    queue empty, or holding only an expired entry, the same polling `try_acquire` succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_modes_polling_acquirer_does_not_barge() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let holder = manager(&server).await;
    let (queued_m, polling_m, newcomer_m) = (
        manager(&server).await,
        manager(&server).await,
        manager(&server).await,
    );
    let polling = opts(10_000, 100)
        .handoff(false)
        .retry_base(Duration::from_millis(1))
        .retry_cap(Duration::from_millis(5));

    let guard = must_acquire(&holder, "mixed", &opts(10_000, 0)).await;
    let queued = spawn_acquire(&queued_m, "mixed", &opts(10_000, 5_000));
    let (queue, entries) = wait_queue_len(&mut raw, 1).await;
    // Right after one of its re-checks, the queued waiter sleeps one refresh interval (250 ms).
    let before = script_calls(&mut raw).await;
    wait_script_calls_above(&mut raw, before).await;
    del(&mut raw, &full("mixed")).await;
    let freed_at = Instant::now();

    let barged = polling_m
        .try_acquire("mixed", &polling)
        .await
        .expect("try_acquire");
    assert!(
        barged.is_none(),
        "a polling acquirer took the free key ahead of a queued live waiter"
    );
    assert_eq!(
        get(&mut raw, &full("mixed")).await,
        None,
        "the key was free when the polling acquirer was refused (the queue refused it)"
    );
    assert!(
        newcomer_m
            .try_acquire("mixed", &opts(10_000, 0))
            .await
            .expect("try_acquire")
            .is_none(),
        "a newcomer took the free key ahead of a queued live waiter"
    );
    let polled = polling_m.acquire("mixed", &polling).await;
    assert!(
        polled.as_ref().is_err_and(LockError::is_contended),
        "the polling acquirer must not get the key while the waiter is queued: {polled:?}"
    );
    let (acquired_at, result) = queued.await.expect("queued waiter task");
    let got = result.expect("the queued waiter acquires");
    eprintln!(
        "mixed modes: queued waiter took the freed key {:?} later; polling acquirer refused",
        acquired_at - freed_at
    );
    assert!(acquired_at - freed_at <= Duration::from_millis(300));
    assert_eq!(
        get(&mut raw, &full("mixed")).await.as_deref(),
        Some(got.stored_value())
    );
    got.release().await.expect("release");
    assert!(
        guard.release().await.is_err_and(|e| e.is_lost()),
        "the first holder's key was deleted by hand"
    );

    // Twin 1: nobody queued: the polling acquirer takes the free key at once.
    let free = polling_m
        .try_acquire("mixed", &polling)
        .await
        .expect("try_acquire")
        .expect("free key, empty queue");
    free.release().await.expect("release");

    // Twin 2: only an expired entry queued: it is skipped (and dropped from the queue).
    // Its waiter key has expired: the value is in the queue, its waiter key is gone.
    let stale = "00000000-0000-4000-8000-0000000stale";
    assert!(!waiter_live(&mut raw, &entries, stale).await);
    let _: i64 = query(&mut raw, &cmd(&["RPUSH", &queue, stale])).await;
    let _: i64 = query(&mut raw, &cmd(&["PEXPIRE", &queue, "5000"])).await;
    let free = polling_m
        .try_acquire("mixed", &polling)
        .await
        .expect("try_acquire")
        .expect("an expired entry does not block the key");
    assert_eq!(
        queue_leftovers(&mut raw).await,
        Vec::<String>::new(),
        "the expired entry was dropped from the queue"
    );
    free.release().await.expect("release");
}
