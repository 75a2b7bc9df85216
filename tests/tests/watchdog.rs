//! Watchdog renewal against a real `redis-server` per test.
//!
//! Every "the watchdog prevents X" test has a twin with the watchdog off (or out of reach)
//! that shows X happening. Sleeps appear only where they *are* the scenario (a body holding for
//! 5 × ttl, a blocked runtime, a hold window) or as bounded polls of Redis state; everything
//! else is driven by signals.
//!
//! Random choices use `fastrand` with a seed printed on stderr; set `WATCHDOG_TEST_SEED` to
//! replay one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt as _;
use lockcore::{LockError, LockGuard, LockManager, LockOptions, distributed_lock};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout, timeout_at};

// ---- helpers ----------------------------------------------------------------------------------

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

/// One attempt, this ttl, the watchdog on or off.
fn options(ttl: Duration, watchdog: bool) -> LockOptions {
    LockOptions::new(ttl)
        .wait(Duration::ZERO)
        .watchdog(watchdog)
}

/// `try_acquire` that must win.
async fn hold(locks: &LockManager, key: &str, opts: &LockOptions) -> LockGuard {
    match locks.try_acquire(key, opts).await {
        Ok(Some(guard)) => guard,
        Ok(None) => panic!("{key:?} is unexpectedly held by someone else"),
        Err(e) => panic!("try_acquire {key:?}: {e:?}"),
    }
}

async fn pexpire(con: &mut MultiplexedConnection, key: &str, px: u64) {
    let _: i64 = query(con, redis::cmd("PEXPIRE").arg(key).arg(px)).await;
}

/// Polls `EXISTS key` every 2 ms until it is gone; bounded by `within`.
async fn wait_gone(con: &mut MultiplexedConnection, key: &str, within: Duration) -> bool {
    gone_within(con, key, within, ms(2)).await.is_some()
}

/// Polls `PTTL key` every 2 ms until it goes up (a renewal landed); bounded by `within`.
async fn wait_for_renewal(con: &mut MultiplexedConnection, key: &str, within: Duration) -> bool {
    let end = Instant::now() + within;
    let mut last = pttl(con, key).await;
    while Instant::now() < end {
        sleep(ms(2)).await;
        let now = pttl(con, key).await;
        if now > last {
            return true;
        }
        last = now;
    }
    false
}

fn is_lost<T: std::fmt::Debug>(result: &Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::Lost { .. }))
}

/// A seeded random source; the seed goes to stderr so a failure can be replayed.
fn rng(label: &str) -> fastrand::Rng {
    let seed = std::env::var("WATCHDOG_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("{label}: seed {seed} (replay with WATCHDOG_TEST_SEED={seed})");
    fastrand::Rng::with_seed(seed)
}

/// Panics raised on purpose start with this; the panic hook keeps them off stderr.
const INTENTIONAL: &str = "watchdog test: intentional panic";

/// Silences the default panic output for intentional panics only; any other panic (a failing
/// assertion in any test of this binary) still goes to the previous hook.
fn quiet_intentional_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
            if !message.is_some_and(|m| m.starts_with(INTENTIONAL)) {
                previous(info);
            }
        }));
    });
}

// ---- 1. a long body under a short ttl ---------------------------------------------------------

const TTL_300: Duration = Duration::from_millis(300);

/// A contender on its own connection that polls `try_acquire(key)` every ttl/10 until
/// `stop()` says the holder's body is over (bounded). Each win is released at once. Returns
/// (wins, polls).
async fn contend(
    contender: &LockManager,
    key: &str,
    ttl: Duration,
    stop: impl Fn() -> bool,
) -> (u32, u32) {
    let opts = options(ttl, false);
    let (mut wins, mut polls) = (0, 0);
    // 5 × ttl / (ttl/10) = 50 polls; 100 is the bound.
    for _ in 0..100 {
        if stop() {
            break;
        }
        polls += 1;
        match contender.try_acquire(key, &opts).await {
            Ok(Some(guard)) => {
                wins += 1;
                // Best effort: the holder may already be gone again.
                let _ = guard.release().await;
            }
            Ok(None) => {}
            Err(e) => panic!("contender's try_acquire: {e:?}"),
        }
        sleep(ttl / 10).await;
    }
    (wins, polls)
}

/// With the watchdog: the contender polled all through the 5 × ttl body and never got in.
fn assert_contender_kept_out(wins: u32, polls: u32) {
    assert!(polls >= 40, "the contender polled only {polls} times");
    assert_eq!(wins, 0, "the contender got the lock while the body ran");
}

/// Without the watchdog: the lease expired during the body and the contender got in.
fn assert_contender_got_in(wins: u32) {
    assert!(
        wins >= 1,
        "the lease (300 ms) expired during a 1500 ms body"
    );
}

/// Holder acquires (ttl 300), its body runs 5 × ttl, then it releases; a contender polls every
/// ttl/10 meanwhile. Returns (contender wins, polls, the holder's release result).
async fn long_body(watchdog: bool) -> (u32, u32, Result<(), LockError>) {
    let server = RedisServer::start();
    let holder = manager(&server).await;
    let contender = manager(&server).await;
    let mut raw = server.connection().await;
    let key = "long-body";

    let guard = hold(&holder, key, &options(TTL_300, watchdog)).await;
    let body_over = AtomicBool::new(false);
    let body = async {
        sleep(5 * TTL_300).await;
        body_over.store(true, Ordering::SeqCst);
        guard.release().await
    };
    let (released, (wins, polls)) = tokio::join!(
        body,
        contend(&contender, key, TTL_300, || body_over
            .load(Ordering::SeqCst))
    );
    if watchdog {
        assert!(!exists(&mut raw, &full(key)).await, "released key is gone");
    }
    (wins, polls, released)
}

/// A ttl of 300, body 1500 with the watchdog: the contender polling every 30 ms never
/// gets in, and the holder's release succeeds (the lease was never lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_body_with_watchdog_keeps_the_contender_out() {
    let (wins, polls, released) = long_body(true).await;
    eprintln!("watchdog on: contender {wins} wins / {polls} polls, release {released:?}");
    assert_contender_kept_out(wins, polls);
    assert!(released.is_ok(), "holder's release: {released:?}");
}

/// Twin of the above with the watchdog off: the lease expires after 300 ms, the contender gets
/// in during the body, and the holder's release reports `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_body_without_watchdog_lets_the_contender_in() {
    let (wins, polls, released) = long_body(false).await;
    eprintln!("watchdog off: contender {wins} wins / {polls} polls, release {released:?}");
    assert_contender_got_in(wins);
    assert!(is_lost(&released), "holder's release: {released:?}");
}

/// The body of both wrapped fns below: says it started, runs 5 × ttl, says it is over (before
/// the wrapper releases, so that a contender's win after the release is not counted as a win
/// during the body), returns `id`.
async fn signal_then_run_5_ttl(
    id: u32,
    started: oneshot::Sender<()>,
    over: Arc<AtomicBool>,
) -> u32 {
    let _ = started.send(());
    sleep(5 * TTL_300).await;
    over.store(true, Ordering::SeqCst);
    id
}

#[distributed_lock(key = "attr-long:<id>", ttl_ms = 300, wait_ms = 0, manager = locks)]
async fn long_body_default_watchdog(
    locks: LockManager,
    id: u32,
    started: oneshot::Sender<()>,
    over: Arc<AtomicBool>,
) -> Result<u32, LockError> {
    Ok(signal_then_run_5_ttl(id, started, over).await)
}

#[distributed_lock(
    key = "attr-long:<id>",
    ttl_ms = 300,
    wait_ms = 0,
    manager = locks,
    watchdog = false
)]
async fn long_body_watchdog_false(
    locks: LockManager,
    id: u32,
    started: oneshot::Sender<()>,
    over: Arc<AtomicBool>,
) -> Result<u32, LockError> {
    Ok(signal_then_run_5_ttl(id, started, over).await)
}

/// The attribute's side of (1): returns (contender wins, polls, the wrapped fn's result).
async fn attribute_long_body(watchdog: bool) -> (u32, u32, Result<u32, LockError>) {
    let server = RedisServer::start();
    let holder = manager(&server).await;
    let contender = manager(&server).await;
    let (started_tx, started) = oneshot::channel();
    let over = Arc::new(AtomicBool::new(false));
    let call = if watchdog {
        tokio::spawn(long_body_default_watchdog(
            holder,
            7,
            started_tx,
            Arc::clone(&over),
        ))
    } else {
        tokio::spawn(long_body_watchdog_false(
            holder,
            7,
            started_tx,
            Arc::clone(&over),
        ))
    };
    started
        .await
        .unwrap_or_else(|_| panic!("the body never started"));
    let (wins, polls) = contend(&contender, "attr-long:7", TTL_300, || {
        over.load(Ordering::SeqCst) || call.is_finished()
    })
    .await;
    let result = call
        .await
        .unwrap_or_else(|e| panic!("wrapped fn task: {e}"));
    (wins, polls, result)
}

/// Attribute: the watchdog is on by default; the contender never gets in during
/// a 5 × ttl body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_long_body_default_watchdog_keeps_the_contender_out() {
    let (wins, polls, result) = attribute_long_body(true).await;
    eprintln!("attribute, default watchdog: {wins} wins / {polls} polls, {result:?}");
    assert_contender_kept_out(wins, polls);
    assert_eq!(result.ok(), Some(7));
}

/// Twin: `watchdog = false`, the contender gets in; the body still runs to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_long_body_watchdog_false_lets_the_contender_in() {
    let (wins, polls, result) = attribute_long_body(false).await;
    eprintln!("attribute, watchdog = false: {wins} wins / {polls} polls, {result:?}");
    assert_contender_got_in(wins);
    assert_eq!(result.ok(), Some(7), "the body runs to completion");
}

// ---- 2. loss mid-hold -------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Change {
    Del,
    SetOther,
    Pexpire1,
}

/// ttl/3 (one renew interval) + a round trip's slack.
fn detection_budget(ttl: Duration) -> Duration {
    ttl / 3 + ms(100)
}

/// Holds a watchdog guard past its first lease, changes the key behind its back, and checks
/// that `lost()` completes within one renew interval + slack of the change.
async fn loss_mid_hold(change: Change) {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = full("loss");

    let guard = hold(&locks, "loss", &options(TTL_300, true)).await;
    // Past the first lease: only renewals keep it.
    sleep(TTL_300 + ms(20)).await;
    assert!(guard.is_held(), "renewed past its first 300 ms lease");
    assert_eq!(
        get(&mut raw, &key).await.as_deref(),
        Some(guard.stored_value())
    );
    assert_eq!(locks.live_renewals(), 1);
    // The worst case: change the key right after a renewal, so that detection needs a whole
    // renew interval. A renewal shows as the PTTL going up (bounded poll, every 2 ms).
    assert!(
        wait_for_renewal(&mut raw, &key, TTL_300).await,
        "no renewal seen within one ttl"
    );

    let changed_at = Instant::now();
    match change {
        Change::Del => del(&mut raw, &key).await,
        Change::SetOther => set_px(&mut raw, &key, "other", 5_000).await,
        Change::Pexpire1 => pexpire(&mut raw, &key, 1).await,
    }
    let budget = detection_budget(TTL_300);
    if timeout_at(changed_at + budget, guard.lost()).await.is_err() {
        panic!(
            "{change:?}: lost() did not complete within {budget:?} of the change (is_held {})",
            guard.is_held()
        );
    }
    eprintln!("{change:?}: lost() after {:?}", changed_at.elapsed());
    assert!(!guard.is_held());
    assert_eq!(
        locks.live_renewals(),
        0,
        "a lost lease is no longer renewed"
    );
    let released = guard.release().await;
    assert!(is_lost(&released), "{change:?}: release gave {released:?}");
    match change {
        Change::SetOther => {
            assert_eq!(get(&mut raw, &key).await.as_deref(), Some("other"));
            let left = pttl(&mut raw, &key).await;
            assert!(
                (1..=5_000).contains(&left),
                "the other holder's TTL is untouched: {left}"
            );
        }
        Change::Del | Change::Pexpire1 => assert!(!exists(&mut raw, &key).await),
    }
}

/// `DEL key` under a watchdog guard. Also the twin: a guard without the watchdog
/// (ttl 3 s) whose key is deleted at the same moment hears nothing within the same budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_by_del_is_reported_within_one_renew_interval() {
    let twin = async {
        let (_server, locks, mut raw) = start_with_manager().await;
        let guard = hold(&locks, "loss", &options(ms(3_000), false)).await;
        let changed_at = Instant::now();
        del(&mut raw, &full("loss")).await;
        let heard = timeout_at(changed_at + detection_budget(TTL_300), guard.lost()).await;
        assert!(
            heard.is_err(),
            "without the watchdog nothing watches the key"
        );
        assert!(guard.is_held(), "local state only, until the deadline");
    };
    tokio::join!(loss_mid_hold(Change::Del), twin);
}

/// `SET key other`: lost within one renew interval; the release leaves `other`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_by_set_other_is_reported_within_one_renew_interval() {
    loss_mid_hold(Change::SetOther).await;
}

/// `PEXPIRE key 1`: lost within one renew interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loss_by_pexpire_is_reported_within_one_renew_interval() {
    loss_mid_hold(Change::Pexpire1).await;
}

/// Once `lost()` has completed, the guard says so everywhere: `is_held()` is false and
/// `remaining()` is zero (a caller checking "is there time left for this write?" must not be
/// told there is). ttl 600 ms, watchdog on, the key is deleted; the twin is the same guard shape
/// before the deletion, with time left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_is_zero_once_the_lease_is_lost() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let ttl = ms(600);

    let guard = hold(&locks, "remaining", &options(ttl, true)).await;
    assert!(
        guard.remaining() > ttl / 2,
        "twin: a held lease has time left"
    );
    del(&mut raw, &full("remaining")).await;
    timeout(detection_budget(ttl), guard.lost())
        .await
        .unwrap_or_else(|_| panic!("the deletion was not detected"));
    assert!(!guard.is_held());
    assert_eq!(
        guard.remaining(),
        Duration::ZERO,
        "remaining() after lost() (is_held() is false)"
    );
}

/// What a wrapped body does: after `signal_after` ticks it signals, then keeps ticking (sleep
/// 10 ms, count) up to `bound` ticks, then sets `finished`.
struct Probe {
    signal: Option<oneshot::Sender<()>>,
    signal_after: u32,
    ticks: Arc<AtomicU32>,
    finished: Arc<AtomicBool>,
}

struct ProbeView {
    ticks: Arc<AtomicU32>,
    finished: Arc<AtomicBool>,
}

/// Spawns `wrapped` with a fresh probe that signals after [`SIGNAL_AFTER`] ticks, and returns
/// once the body has signalled (it is past its first lease then).
async fn spawn_probed<T, F>(wrapped: impl FnOnce(Probe) -> F) -> (JoinHandle<T>, ProbeView)
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let (signal, signalled) = oneshot::channel();
    let ticks = Arc::new(AtomicU32::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let call = tokio::spawn(wrapped(Probe {
        signal: Some(signal),
        signal_after: SIGNAL_AFTER,
        ticks: Arc::clone(&ticks),
        finished: Arc::clone(&finished),
    }));
    signalled
        .await
        .unwrap_or_else(|_| panic!("the body never signalled"));
    (call, ProbeView { ticks, finished })
}

impl Probe {
    async fn run(mut self, bound: u32) -> u32 {
        for tick in 0..bound {
            if tick == self.signal_after
                && let Some(signal) = self.signal.take()
            {
                let _ = signal.send(());
            }
            sleep(ms(10)).await;
            self.ticks.fetch_add(1, Ordering::SeqCst);
        }
        self.finished.store(true, Ordering::SeqCst);
        self.ticks.load(Ordering::SeqCst)
    }
}

/// The result of a wrapped fn whose body runs to completion (bounded: 3 s).
async fn run_to_completion<T>(call: JoinHandle<T>) -> T {
    timeout(ms(3_000), call)
        .await
        .unwrap_or_else(|_| panic!("the body did not finish"))
        .unwrap_or_else(|e| panic!("wrapped fn task: {e}"))
}

/// Signal after 35 ticks (≥ 350 ms: past the first 300 ms lease).
const SIGNAL_AFTER: u32 = 35;

#[distributed_lock(
    key = "on-lost:<name>",
    ttl_ms = 300,
    wait_ms = 0,
    manager = locks,
    on_lost = "abort"
)]
async fn body_on_lost_abort(
    locks: LockManager,
    name: &'static str,
    probe: Probe,
) -> Result<u32, LockError> {
    Ok(probe.run(200).await)
}

#[distributed_lock(
    key = "on-lost:<name>",
    ttl_ms = 300,
    wait_ms = 0,
    manager = locks,
    on_lost = "continue",
    guard = lease
)]
async fn body_on_lost_continue(
    locks: LockManager,
    name: &'static str,
    probe: Probe,
) -> Result<(u32, bool), LockError> {
    let ticks = probe.run(70).await;
    Ok((ticks, lease.is_held()))
}

#[distributed_lock(
    key = "on-lost:<name>",
    ttl_ms = 300,
    wait_ms = 0,
    manager = locks,
    watchdog = false,
    on_lost = "abort"
)]
async fn body_watchdog_false_on_lost_abort(
    locks: LockManager,
    name: &'static str,
    probe: Probe,
) -> Result<u32, LockError> {
    Ok(probe.run(50).await)
}

/// Attribute with `on_lost = "abort"`: the key is deleted mid-body; the wrapped fn
/// returns `Err(Lost)` within one renew interval + slack, the body is dropped at its next
/// `.await` (its tick counter stops, `finished` is never set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_on_lost_abort_drops_the_body_and_returns_lost() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = full("on-lost:abort");

    let (mut call, view) =
        spawn_probed(|body| body_on_lost_abort(locks.clone(), "abort", body)).await;
    assert!(
        get(&mut raw, &key).await.is_some(),
        "the watchdog kept the key past its 300 ms TTL"
    );
    // The worst case: delete right after a renewal.
    assert!(
        wait_for_renewal(&mut raw, &key, TTL_300).await,
        "no renewal seen within one ttl"
    );
    let changed_at = Instant::now();
    del(&mut raw, &key).await;
    // One renew interval + slack, plus the release round trip.
    let budget = detection_budget(TTL_300) + ms(20);
    let result = match timeout_at(changed_at + budget, &mut call).await {
        Ok(joined) => joined.unwrap_or_else(|e| panic!("wrapped fn task: {e}")),
        Err(_) => panic!(
            "the wrapped fn did not return within {budget:?} of the DEL (ticks {})",
            view.ticks.load(Ordering::SeqCst)
        ),
    };
    let ticks_at_return = view.ticks.load(Ordering::SeqCst);
    eprintln!(
        "on_lost = abort: returned {result:?} after {:?}, {ticks_at_return} ticks",
        changed_at.elapsed()
    );
    assert!(is_lost(&result), "expected Err(Lost), got {result:?}");
    assert!(!view.finished.load(Ordering::SeqCst));
    assert!(ticks_at_return < 200);
    // The body was dropped: nothing ticks any more (observed over 5 tick periods).
    sleep(ms(50)).await;
    assert_eq!(view.ticks.load(Ordering::SeqCst), ticks_at_return);
    assert!(!view.finished.load(Ordering::SeqCst));
    assert_eq!(locks.live_renewals(), 0);
}

/// Twin with `on_lost = "continue"`: the same deletion; the body runs to completion and its
/// value is returned. The body itself sees (through `guard = lease`) that the lock was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_on_lost_continue_runs_the_body_to_completion() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let key = full("on-lost:continue");

    let (call, view) =
        spawn_probed(|body| body_on_lost_continue(locks.clone(), "continue", body)).await;
    assert!(get(&mut raw, &key).await.is_some());
    del(&mut raw, &key).await;
    let result = run_to_completion(call).await;
    eprintln!("on_lost = continue: {result:?}");
    assert!(
        matches!(result, Ok((70, false))),
        "expected Ok((70 ticks, lease lost)), got {result:?}"
    );
    assert!(view.finished.load(Ordering::SeqCst));
    assert_eq!(locks.live_renewals(), 0);
}

/// `watchdog = false` with `on_lost = "abort"`: nothing watches the lease, the body runs to
/// completion although the key expired (300 ms) and was deleted mid-body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_watchdog_false_runs_the_body_to_completion_despite_loss() {
    let (_server, locks, mut raw) = start_with_manager().await;

    let (call, view) =
        spawn_probed(|body| body_watchdog_false_on_lost_abort(locks.clone(), "off", body)).await;
    del(&mut raw, &full("on-lost:off")).await;
    let result = run_to_completion(call).await;
    assert!(matches!(result, Ok(50)), "got {result:?}");
    assert!(view.finished.load(Ordering::SeqCst));
}

// ---- 3. no leftover renewals ------------------------------------------------------------------

#[distributed_lock(key = "cycle:<task>:<i>", ttl_ms = 3000, wait_ms = 0, manager = locks)]
async fn panicking_body(
    locks: LockManager,
    task: u64,
    i: u64,
    after_await: bool,
) -> Result<(), LockError> {
    if after_await {
        tokio::task::yield_now().await;
    }
    panic!("{INTENTIONAL} (task {task}, cycle {i})");
}

#[derive(Default, Debug)]
struct CycleStats {
    released: AtomicU64,
    acquire_completed: AtomicU64,
    acquire_cancelled: AtomicU64,
    work_completed: AtomicU64,
    work_cancelled: AtomicU64,
    dropped: AtomicU64,
    panicked: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// `n` acquire→release cycles on distinct keys, mixing plain releases, cancellations at random
/// points, dropped guards and panicking wrapped bodies.
async fn cycles(
    locks: LockManager,
    task: u64,
    n: u64,
    mut rng: fastrand::Rng,
    stats: Arc<CycleStats>,
) {
    let opts = LockOptions::new(ms(3_000))
        .wait(Duration::ZERO)
        .watchdog(true);
    for i in 0..n {
        let key = format!("cycle:{task}:{i}");
        match rng.u32(0..100) {
            0..60 => {
                let guard = hold(&locks, &key, &opts).await;
                assert!(locks.live_renewals() >= 1, "a watchdog guard is registered");
                if rng.bool() {
                    tokio::task::yield_now().await;
                }
                guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("release {key}: {e:?}"));
                bump(&stats.released);
            }
            60..75 => match timeout(us(rng.u64(0..3_000)), locks.acquire(&key, &opts)).await {
                Ok(Ok(guard)) => {
                    guard
                        .release()
                        .await
                        .unwrap_or_else(|e| panic!("release {key}: {e:?}"));
                    bump(&stats.acquire_completed);
                }
                Ok(Err(e)) => panic!("acquire {key}: {e:?}"),
                Err(_) => bump(&stats.acquire_cancelled),
            },
            75..90 => {
                let guard = hold(&locks, &key, &opts).await;
                let work = us(rng.u64(0..3_000));
                let held_work = async move {
                    sleep(work).await;
                    guard.release().await
                };
                match timeout(us(rng.u64(0..3_000)), held_work).await {
                    Ok(released) => {
                        released.unwrap_or_else(|e| panic!("release {key}: {e:?}"));
                        bump(&stats.work_completed);
                    }
                    Err(_) => bump(&stats.work_cancelled),
                }
            }
            90..97 => {
                drop(hold(&locks, &key, &opts).await);
                bump(&stats.dropped);
            }
            _ => {
                let call = tokio::spawn(panicking_body(locks.clone(), task, i, rng.bool()));
                match call.await {
                    Err(e) if e.is_panic() => bump(&stats.panicked),
                    other => panic!("expected the body's panic, got {other:?}"),
                }
            }
        }
    }
}

/// 10,000 watchdog acquire→release cycles over 16 tasks with cancellations around
/// acquire and around held work, dropped guards and panicking wrapped bodies. Afterwards
/// `live_renewals()` is 0 at once and no lock key is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_cycles_leave_no_live_renewals() {
    quiet_intentional_panics();
    let (_server, locks, mut raw) = start_with_manager().await;
    let mut rng = rng("ten_thousand_cycles");
    let stats = Arc::new(CycleStats::default());
    const TASKS: u64 = 16;
    const PER_TASK: u64 = 625;

    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            tokio::spawn(cycles(
                locks.clone(),
                task,
                PER_TASK,
                rng.fork(),
                Arc::clone(&stats),
            ))
        })
        .collect();
    for task in tasks {
        task.await.unwrap_or_else(|e| panic!("cycle task: {e}"));
    }
    let live_at_once = locks.live_renewals();
    eprintln!(
        "{} cycles in {:?}: {stats:?}; live_renewals right after: {live_at_once}",
        TASKS * PER_TASK,
        started.elapsed()
    );
    if live_at_once != 0 {
        // Say whether it is a delay or a leak.
        let mut later = live_at_once;
        for _ in 0..100 {
            sleep(ms(10)).await;
            later = locks.live_renewals();
            if later == 0 {
                break;
            }
        }
        panic!(
            "live_renewals() was {live_at_once} once every guard was gone ({later} after up to 1 s)"
        );
    }
    for (name, counter) in [
        ("released", &stats.released),
        ("acquire completed", &stats.acquire_completed),
        ("acquire cancelled", &stats.acquire_cancelled),
        ("work completed", &stats.work_completed),
        ("work cancelled", &stats.work_cancelled),
        ("dropped", &stats.dropped),
        ("panicked", &stats.panicked),
    ] {
        assert!(
            counter.load(Ordering::Relaxed) > 0,
            "no cycle ended as {name}"
        );
    }
    // Background releases (drops, cancellations) finish within a bounded time.
    let mut left: Vec<String> = Vec::new();
    for _ in 0..100 {
        left = query(&mut raw, redis::cmd("KEYS").arg(full("cycle:*"))).await;
        if left.is_empty() {
            break;
        }
        sleep(ms(10)).await;
    }
    assert!(
        left.is_empty(),
        "{} lock keys left behind, e.g. {:?}",
        left.len(),
        left.first()
    );
}

#[distributed_lock(key = "probe:<name>", ttl_ms = 600, wait_ms = 0, manager = locks, guard = lease)]
async fn panics_with_token(
    locks: LockManager,
    name: &'static str,
    token: oneshot::Sender<String>,
) -> Result<(), LockError> {
    let _ = token.send(lease.stored_value().to_owned());
    tokio::task::yield_now().await;
    panic!("{INTENTIONAL} ({name})");
}

/// No key's TTL is refreshed after its guard is gone. ttl 600 (renewals every
/// 200 ms). Guards end by release, drop, cancellation, a panicking wrapped body, and by loss
/// (the lost guard stays alive). Then each key is re-SET externally with the *old token* and
/// PX 400 (< ttl): a leftover renewal would raise its PTTL to 600. One key gets another value
/// and PX 1000: the value stays and its PTTL only decreases. The twin: a *live* guard's key
/// re-SET the same way does get its PTTL raised, so the probe can see a renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ttl_refresh_after_the_guard_is_gone() {
    quiet_intentional_panics();
    let (_server, locks, mut raw) = start_with_manager().await;
    let ttl = ms(600);
    let opts = options(ttl, true);

    let released = hold(&locks, "probe:released", &opts).await;
    let dropped = hold(&locks, "probe:dropped", &opts).await;
    let cancelled = hold(&locks, "probe:cancelled", &opts).await;
    let lost = hold(&locks, "probe:lost", &opts).await;
    let other = hold(&locks, "probe:other", &opts).await;
    let live = hold(&locks, "probe:live", &opts).await;
    let (token_tx, token_rx) = oneshot::channel();
    let panicking = tokio::spawn(panics_with_token(locks.clone(), "panicked", token_tx));
    let panicked_token = token_rx
        .await
        .unwrap_or_else(|_| panic!("the wrapped body never sent its token"));
    // Hold long enough for at least one renewal.
    sleep(ttl / 2).await;

    let mut probes: Vec<(&str, String, u64)> = Vec::new(); // (key, value, px)

    let token = released.stored_value().to_owned();
    released
        .release()
        .await
        .unwrap_or_else(|e| panic!("release: {e:?}"));
    probes.push(("probe:released", token, 400));

    let token = dropped.stored_value().to_owned();
    drop(dropped);
    assert!(wait_gone(&mut raw, &full("probe:dropped"), ms(1_000)).await);
    probes.push(("probe:dropped", token, 400));

    let token = cancelled.stored_value().to_owned();
    let cut = timeout(ms(5), async move {
        let _held = cancelled;
        std::future::pending::<()>().await;
    })
    .await;
    assert!(cut.is_err());
    assert!(wait_gone(&mut raw, &full("probe:cancelled"), ms(1_000)).await);
    probes.push(("probe:cancelled", token, 400));

    match panicking.await {
        Err(e) if e.is_panic() => {}
        other => panic!("expected the body's panic, got {other:?}"),
    }
    assert!(!exists(&mut raw, &full("probe:panicked")).await);
    probes.push(("probe:panicked", panicked_token, 400));

    drop(other);
    assert!(wait_gone(&mut raw, &full("probe:other"), ms(1_000)).await);
    probes.push(("probe:other", "other".to_owned(), 1_000));

    let lost_token = lost.stored_value().to_owned();
    del(&mut raw, &full("probe:lost")).await;
    timeout(detection_budget(ttl), lost.lost())
        .await
        .unwrap_or_else(|_| panic!("the deleted key was not reported lost"));
    probes.push(("probe:lost", lost_token, 400));

    let live_token = live.stored_value().to_owned();
    probes.push(("probe:live", live_token, 400));

    assert_eq!(locks.live_renewals(), 1, "only the live guard is renewed");
    for (key, value, px) in &probes {
        set_px(&mut raw, &full(key), value, *px).await;
    }

    // Observe for longer than one ttl (three renew intervals).
    let mut last: Vec<i64> = vec![i64::MAX; probes.len()];
    let mut raised: Vec<Option<(i64, i64)>> = vec![None; probes.len()];
    let end = Instant::now() + ttl + ms(100);
    while Instant::now() < end {
        for (i, (key, value, _)) in probes.iter().enumerate() {
            let now = pttl(&mut raw, &full(key)).await;
            if now > last[i] && raised[i].is_none() {
                raised[i] = Some((last[i], now));
            }
            if now > 0 {
                let seen = get(&mut raw, &full(key)).await;
                if seen.is_some() {
                    assert_eq!(
                        seen.as_deref(),
                        Some(value.as_str()),
                        "{key}'s value changed"
                    );
                }
            }
            last[i] = now;
        }
        sleep(ms(10)).await;
    }
    for (i, (key, _, _)) in probes.iter().enumerate() {
        if *key == "probe:live" {
            assert!(
                raised[i].is_some(),
                "twin: the live guard's key was never renewed; the probe is blind"
            );
        } else {
            assert_eq!(
                raised[i], None,
                "{key}: PTTL went up (from, to) after its guard was gone: a renewal survived"
            );
        }
    }
    drop(lost);
    live.release()
        .await
        .unwrap_or_else(|e| panic!("release live: {e:?}"));
    assert_eq!(locks.live_renewals(), 0);
}

// ---- 4. a blocked runtime ---------------------------------------------------------------------

/// A current-thread runtime blocked by `std::thread::sleep(2 × ttl)`: the watchdog
/// (on that runtime) cannot renew. Afterwards the guard is not held, `lost()` is ready at once,
/// and `release()` reports `Lost`.
#[tokio::test(flavor = "current_thread")]
async fn blocked_current_thread_runtime_reports_the_lease_lost() {
    let (_server, locks, mut raw) = start_with_manager().await;

    let guard = hold(&locks, "blocked", &options(TTL_300, true)).await;
    std::thread::sleep(2 * TTL_300);
    assert!(!guard.is_held(), "the deadline passed without a renewal");
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(
        guard.lost().now_or_never().is_some(),
        "lost() must complete immediately"
    );
    assert!(!exists(&mut raw, &full("blocked")).await, "the key expired");
    let released = guard.release().await;
    assert!(is_lost(&released), "release gave {released:?}");
    assert_eq!(locks.live_renewals(), 0);
}

/// Twin: the same blocking sleep on a thread that is *not* one of the runtime's workers (the
/// `block_on` thread of a multi-thread runtime): the watchdog keeps renewing.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn blocking_outside_the_runtime_keeps_the_lease() {
    let (_server, locks, mut raw) = start_with_manager().await;

    let guard = hold(&locks, "blocked", &options(TTL_300, true)).await;
    std::thread::sleep(2 * TTL_300);
    assert!(guard.is_held());
    assert!(guard.lost().now_or_never().is_none());
    assert_eq!(
        get(&mut raw, &full("blocked")).await.as_deref(),
        Some(guard.stored_value())
    );
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("release: {e:?}"));
}

// ---- 5. cost ----------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct MonitorCounts {
    /// Commands sent by clients between the two `INFO` calls (the `INFO`s excluded).
    from_clients: u64,
    /// Commands run inside scripts in the same window (`[0 lua]`).
    from_scripts: u64,
    per_client_command: std::collections::BTreeMap<String, u64>,
}

const MONITOR_END: &str = "watchdog-monitor-end";

/// Reads a `MONITOR` stream until the `ECHO MONITOR_END` marker (or a 15 s read timeout) and
/// counts what runs between the first and the second `INFO` command.
fn monitor(port: u16, ready: oneshot::Sender<()>) -> MonitorCounts {
    let mut stream = monitor::MonitorStream::connect(port, Duration::from_secs(15));
    let _ = ready.send(());

    let mut counts = MonitorCounts::default();
    let mut infos = 0;
    loop {
        let Some(line) = stream.next_raw() else {
            panic!("MONITOR stream ended before the end marker")
        };
        let Some(parsed) = monitor::parse_line(line.as_bytes()) else {
            continue;
        };
        if line.contains(MONITOR_END) {
            return counts;
        }
        if parsed.command == "INFO" {
            infos += 1;
            continue;
        }
        if infos != 1 {
            continue;
        }
        match parsed.source {
            monitor::Source::Lua => counts.from_scripts += 1,
            monitor::Source::Client => {
                counts.from_clients += 1;
                *counts
                    .per_client_command
                    .entry(parsed.command.to_ascii_lowercase())
                    .or_default() += 1;
            }
        }
    }
}

/// 1,000 locks, ttl 3 s, watchdog on, held ~4 s. Over a window after the
/// acquisitions, the commands per second are far below one per lock per renewal tick
/// (1000 / 1 s): renewals are batched.
///
/// `INFO commandstats` also counts the commands a Lua script runs (each renewed key costs a
/// `GET` and a `PEXPIRE` *inside* the batch script), so its plain sum is not the number of
/// requests. A `MONITOR` connection tells the two apart (`[0 lua]`); the assertion is on what
/// clients send, and every figure is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_cost_for_1000_locks_is_batched() {
    const LOCKS: usize = 1_000;
    let (server, locks, mut raw) = start_with_manager().await;
    let opts = options(ms(3_000), true);

    let (ready_tx, ready) = oneshot::channel();
    let port = server.port();
    let monitor = tokio::task::spawn_blocking(move || monitor(port, ready_tx));
    ready
        .await
        .unwrap_or_else(|_| panic!("MONITOR did not start"));

    let held_from = Instant::now();
    let guards: Vec<LockGuard> = futures_util::future::join_all((0..LOCKS).map(|i| {
        let locks = locks.clone();
        let opts = opts.clone();
        async move { hold(&locks, &format!("cost:{i}"), &opts).await }
    }))
    .await;
    assert_eq!(locks.live_renewals(), LOCKS);

    let info = |raw: &mut MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            let text: String = query(&mut raw, redis::cmd("INFO").arg("commandstats")).await;
            parse_commandstats(&text)
        }
    };
    let (before, _) = info(&mut raw).await;
    let window_start = Instant::now();
    // The hold: until ~4 s after the first acquisition.
    tokio::time::sleep_until(held_from + ms(4_000)).await;
    let (after, per_command_after) = info(&mut raw).await;
    let window = window_start.elapsed();
    let _: String = query(&mut raw, redis::cmd("ECHO").arg(MONITOR_END)).await;
    let seen = timeout(ms(10_000), monitor)
        .await
        .unwrap_or_else(|_| panic!("MONITOR reader did not stop"))
        .unwrap_or_else(|e| panic!("MONITOR reader: {e}"));

    let secs = window.as_secs_f64();
    let all_per_s = (after - before) as f64 / secs;
    let clients_per_s = seen.from_clients as f64 / secs;
    let by_stats_minus_scripts = (after - before).saturating_sub(seen.from_scripts) as f64 / secs;
    eprintln!(
        "cost: {LOCKS} locks, ttl 3 s, window {window:?}: INFO commandstats delta {} calls = \
         {all_per_s:.1}/s (includes commands run inside scripts); MONITOR: {} client commands \
         = {clients_per_s:.1}/s {:?}, {} script-internal; commandstats minus script-internal \
         = {by_stats_minus_scripts:.1}/s; naive one-per-lock-per-tick would be {:.0}/s",
        after - before,
        seen.from_clients,
        seen.per_client_command,
        seen.from_scripts,
        LOCKS as f64 / 1.0,
    );
    eprintln!("cost: commandstats at the end: {per_command_after:?}");

    // Keys outlived their 3 s TTL only through renewals, which happened during the window.
    let alive: i64 = query(
        &mut raw,
        redis::cmd("EXISTS").arg(
            (0..LOCKS)
                .map(|i| full(&format!("cost:{i}")))
                .collect::<Vec<_>>(),
        ),
    )
    .await;
    assert_eq!(alive, LOCKS as i64, "every lock survived its 3 s TTL");
    assert!(
        held_from.elapsed() > ms(3_000),
        "the hold outlasted one TTL"
    );
    assert!(
        seen.from_scripts >= LOCKS as u64,
        "every lock was renewed in the window ({} keys touched by scripts)",
        seen.from_scripts
    );
    assert!(
        clients_per_s <= 100.0,
        "{clients_per_s:.1} client commands/s for {LOCKS} locks; renewals are not batched"
    );
    assert!(
        by_stats_minus_scripts <= 100.0,
        "{by_stats_minus_scripts:.1} commands/s (commandstats minus script-internal calls)"
    );

    let released = futures_util::future::join_all(guards.into_iter().map(LockGuard::release)).await;
    assert!(released.iter().all(Result::is_ok));
    assert_eq!(locks.live_renewals(), 0);
}

// ---- max_hold ---------------------------------------------------------------------------------

/// `max_hold = 2 × ttl` (ttl 300): the guard reports lost after about max_hold, the watchdog
/// stops renewing and the key then expires by its TTL. The twin (same options without
/// max_hold, acquired at the same moment) is still held and renewed after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_renewing_and_reports_lost() {
    let (_server, locks, mut raw) = start_with_manager().await;
    let max_hold = 2 * TTL_300;

    let started = Instant::now();
    let capped = hold(&locks, "capped", &options(TTL_300, true).max_hold(max_hold)).await;
    let uncapped = hold(&locks, "uncapped", &options(TTL_300, true)).await;
    let budget = max_hold + ms(100);
    if timeout_at(started + budget, capped.lost()).await.is_err() {
        panic!("max_hold {max_hold:?}: lost() did not complete within {budget:?}");
    }
    let lost_after = started.elapsed();
    let pttl_at_loss = pttl(&mut raw, &full("capped")).await;
    eprintln!("max_hold {max_hold:?}: lost after {lost_after:?}, key PTTL then {pttl_at_loss}");
    assert!(lost_after >= max_hold, "lost early: {lost_after:?}");
    assert!(!capped.is_held());
    assert_eq!(
        locks.live_renewals(),
        1,
        "only the uncapped guard is renewed"
    );

    // No more renewals: the PTTL only falls until the key expires, within one ttl.
    let mut last = pttl_at_loss;
    let end = Instant::now() + TTL_300 + ms(100);
    let mut gone = last == -2;
    while !gone && Instant::now() < end {
        sleep(ms(5)).await;
        let now = pttl(&mut raw, &full("capped")).await;
        assert!(
            now <= last,
            "capped key renewed after max_hold: PTTL {last} -> {now}"
        );
        last = now;
        gone = now == -2;
    }
    assert!(
        gone,
        "the capped key did not expire by its TTL (PTTL {last})"
    );

    assert!(uncapped.is_held(), "twin: no max_hold, still renewed");
    assert_eq!(
        get(&mut raw, &full("uncapped")).await.as_deref(),
        Some(uncapped.stored_value())
    );
    assert!(is_lost(&capped.release().await));
    uncapped
        .release()
        .await
        .unwrap_or_else(|e| panic!("release uncapped: {e:?}"));
}

/// `max_hold` shorter than one renew interval (ttl 1500: renewals every 500 ms; max_hold 200):
/// the guard must still report lost at about max_hold, not at the next renewal tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_shorter_than_the_renew_interval_reports_lost_on_time() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let ttl = ms(1_500);
    let max_hold = ms(200);

    let started = Instant::now();
    let guard = hold(&locks, "short-cap", &options(ttl, true).max_hold(max_hold)).await;
    let budget = max_hold + ms(100);
    let on_time = timeout_at(started + budget, guard.lost()).await.is_ok();
    let reported = if on_time {
        started.elapsed()
    } else {
        timeout(ttl, guard.lost())
            .await
            .map_or(Duration::MAX, |()| started.elapsed())
    };
    eprintln!("max_hold {max_hold:?} with ttl {ttl:?}: lost reported after {reported:?}");
    assert!(
        on_time,
        "max_hold {max_hold:?}: lost() completed only after {reported:?} (budget {budget:?})"
    );
    assert!(!guard.is_held());
}

// ---- release racing a renewal -----------------------------------------------------------------

/// A guard released (or dropped) while a renewal may be in flight never resurrects its key:
/// 200 × (acquire with ttl 30 ms + watchdog, release or drop at a random time in 0..45 ms,
/// then the key stays absent for longer than one ttl). 8 tasks × 25 rounds, distinct keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_racing_a_renewal_never_resurrects_the_key() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let mut rng = rng("release_racing_a_renewal");
    let ok = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let dropped = Arc::new(AtomicU64::new(0));

    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let locks = locks.clone();
            let mut rng = rng.fork();
            let (ok, lost, dropped) = (Arc::clone(&ok), Arc::clone(&lost), Arc::clone(&dropped));
            let server_url = server.url();
            tokio::spawn(async move {
                let client = redis::Client::open(server_url).unwrap_or_else(|e| panic!("{e}"));
                let mut raw = client
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                let name = format!("race:{task}");
                let key = full(&name);
                let opts = options(ms(30), true);
                for round in 0..25 {
                    let guard = hold(&locks, &name, &opts).await;
                    sleep(us(rng.u64(0..45_000))).await;
                    if rng.u32(0..4) == 0 {
                        drop(guard);
                        bump(&dropped);
                        assert!(
                            wait_gone(&mut raw, &key, ms(500)).await,
                            "{key} round {round}: still there after the drop"
                        );
                    } else {
                        match guard.release().await {
                            Ok(()) => bump(&ok),
                            Err(LockError::Lost { .. }) => bump(&lost),
                            Err(e) => panic!("release: {e:?}"),
                        }
                        assert!(
                            !exists(&mut raw, &key).await,
                            "{key} round {round}: present right after release"
                        );
                    }
                    // Longer than one ttl (three renew intervals): it stays gone.
                    for _ in 0..4 {
                        sleep(ms(10)).await;
                        assert!(
                            !exists(&mut raw, &key).await,
                            "{key} round {round}: resurrected after release"
                        );
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap_or_else(|e| panic!("race task: {e}"));
    }
    eprintln!(
        "release racing renewal: {} released Ok, {} released Lost, {} dropped",
        ok.load(Ordering::Relaxed),
        lost.load(Ordering::Relaxed),
        dropped.load(Ordering::Relaxed)
    );
    assert!(
        ok.load(Ordering::Relaxed) > 0,
        "no release happened while held"
    );
    assert_eq!(locks.live_renewals(), 0);
}

// ---- extend on a watched guard ----------------------------------------------------------------

/// `extend` docs: "the watchdog (if on) renews with the new TTL from then on". A watchdog guard
/// with ttl 3 s is extended to 300 ms at once, then held for 5 × 300 ms: the watchdog must
/// keep it (renewing every ~100 ms with the new TTL), not let it lapse at ~300 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_to_a_shorter_ttl_keeps_the_watchdog_renewing() {
    let (_server, locks, mut raw) = start_with_manager().await;

    let mut guard = hold(&locks, "extended", &options(ms(3_000), true)).await;
    guard
        .extend(TTL_300)
        .await
        .unwrap_or_else(|e| panic!("extend: {e:?}"));
    let extended_at = Instant::now();
    let lost_early = timeout(5 * TTL_300, guard.lost()).await.is_ok();
    let held_for = extended_at.elapsed();
    let value = get(&mut raw, &full("extended")).await;
    let left = pttl(&mut raw, &full("extended")).await;
    eprintln!(
        "extend 3 s -> 300 ms under the watchdog: lost {lost_early} after {held_for:?}, key {value:?} PTTL {left}"
    );
    assert!(
        !lost_early,
        "the watchdog let the extended lease lapse after {held_for:?}"
    );
    assert!(guard.is_held());
    assert_eq!(value.as_deref(), Some(guard.stored_value()));
    assert!(
        (1..=300).contains(&left),
        "renewed with the new 300 ms TTL, PTTL {left}"
    );
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("release: {e:?}"));
}
