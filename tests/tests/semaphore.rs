//! Leased-permit semaphores against a real `redis-server`: never more than N holders (and a
//! naive counter that lets more in), permits of killed holders come back with their lease (and
//! a naive counter whose permits leak), FIFO grants, strictly increasing fencing tokens, and
//! mismatched permit counts refused. Every test runs its own server.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions, Semaphore};
use lockcore_tests::*;
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

const KEY: &str = "pool";

/// `contenders` tasks taking `rounds` turns each inside `enter` .. `leave`; returns the most
/// that were inside at once.
async fn most_inside<E, L, EF, LF>(contenders: usize, rounds: usize, enter: E, leave: L) -> usize
where
    E: Fn(usize) -> EF + Clone + Send + 'static,
    L: Fn(EF::Output) -> LF + Clone + Send + 'static,
    EF: Future + Send,
    EF::Output: Send,
    LF: Future<Output = ()> + Send,
{
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..contenders)
        .map(|i| {
            let (inside, most, enter, leave) =
                (inside.clone(), most.clone(), enter.clone(), leave.clone());
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let held = enter(i).await;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // The work inside: long enough for the others to try to get in.
                    sleep(Duration::from_millis(3)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    leave(held).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("contender");
    }
    most.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn n_plus_one_contenders_never_exceed_n_holders() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    const N: u32 = 3;
    let sem = locks.semaphore(KEY, N);
    let enter = move |_| {
        let sem = sem.clone();
        async move { sem.acquire(&opts(5_000, 10_000)).await.expect("permit") }
    };
    let leave = |guard: lockcore::LockGuard| async move { guard.release().await.expect("release") };
    let most = most_inside(N as usize + 1, 40, enter, leave).await;
    assert_eq!(
        most, N as usize,
        "never more than N inside, and N at once were"
    );
}

/// Twin: a naive semaphore (read the count, then increment it: check-then-act on a counter)
/// lets more than N in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn naive_twin_a_counter_checked_then_incremented_lets_more_than_n_in() {
    let server = RedisServer::start();
    let con = server.connection().await;
    const N: i64 = 3;
    let enter = move |_| {
        let mut con = con.clone();
        async move {
            for _ in 0..10_000 {
                let count: Option<i64> = query(&mut con, &cmd(&["GET", "naive:count"])).await;
                if count.unwrap_or(0) < N {
                    tokio::task::yield_now().await;
                    let _: i64 = query(&mut con, &cmd(&["INCR", "naive:count"])).await;
                    return con;
                }
                sleep(Duration::from_millis(1)).await;
            }
            panic!("the naive semaphore never let this contender in");
        }
    };
    let leave = |mut con: redis::aio::MultiplexedConnection| async move {
        let _: i64 = query(&mut con, &cmd(&["DECR", "naive:count"])).await;
    };
    let most = most_inside(N as usize + 1, 40, enter, leave).await;
    assert!(most > N as usize, "the naive counter let {most} in at once");
}

/// Set in the child process of the next test: the server URL and the number of permits.
const CHILD_ENV: &str = "LOCKCORE_SEMAPHORE_KILLED_CHILD";

const KILL_TTL_MS: u64 = 1_000;
/// A queued waiter re-checks at least this often (the hand-off's refresh).
const RECHECK_MS: u64 = 250;

/// The child: take every permit (watchdog off, `KILL_TTL_MS` leases), say so, and hang until
/// killed. Returns `true` when this process is the child.
async fn child_takes_every_permit() -> bool {
    let Ok(setup) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let (url, permits) = setup.split_once(' ').expect("url and permits");
    let locks = LockManager::connect(url).await.expect("child connect");
    let sem = locks.semaphore(KEY, permits.parse().expect("permits"));
    let mut held = Vec::new();
    for _ in 0..sem.permits() {
        held.push(
            sem.acquire(&opts(KILL_TTL_MS, 2_000))
                .await
                .expect("child permit"),
        );
    }
    println!("CHILD_HOLDS_ALL");
    // Killed here; the bound only keeps a parent that died from leaving it behind.
    sleep(Duration::from_secs(30)).await;
    drop(held);
    true
}

/// Spawns this test binary, filtered to `test`, as a child that takes all `permits` permits,
/// and SIGKILLs it once it holds them all; returns when it was killed.
fn kill_child_holding_every_permit(test: &str, server: &RedisServer, permits: u32) -> Instant {
    use std::io::BufRead;
    let exe = std::env::current_exe().unwrap();
    let mut child = std::process::Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{} {permits}", server.url()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    for _ in 0..200 {
        match lines.next() {
            Some(Ok(line)) if line.contains("CHILD_HOLDS_ALL") => {
                child.kill().expect("SIGKILL the child");
                let killed = Instant::now();
                child.wait().expect("reap the child");
                return killed;
            }
            Some(Ok(line)) => seen.push(line),
            _ => break,
        }
    }
    let _ = child.kill();
    panic!("the child never held every permit: {seen:?}");
}

/// No leaks: a process holding all N permits is SIGKILLed; N new holders (already queued
/// behind it) get them within the TTL plus one re-check interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_of_a_killed_holder_come_back_within_ttl_plus_one_recheck() {
    if child_takes_every_permit().await {
        return;
    }
    const N: u32 = 3;
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let sem = locks.semaphore(KEY, N);
    let killed = kill_child_holding_every_permit(
        "permits_of_a_killed_holder_come_back_within_ttl_plus_one_recheck",
        &server,
        N,
    );
    let waiters: Vec<_> = (0..N)
        .map(|_| {
            let sem = sem.clone();
            tokio::spawn(async move {
                let guard = sem.acquire(&opts(5_000, 5_000)).await.expect("permit back");
                (killed.elapsed(), guard)
            })
        })
        .collect();
    let mut worst = Duration::ZERO;
    let mut guards = Vec::new();
    for waiter in waiters {
        let (took, guard) = waiter.await.unwrap();
        worst = worst.max(took);
        guards.push(guard);
    }
    let bound = Duration::from_millis(KILL_TTL_MS + RECHECK_MS + 150);
    println!("all {N} permits back {worst:?} after the SIGKILL (bound {bound:?})");
    assert!(
        worst <= bound,
        "permits came back after {worst:?}; bound {bound:?}"
    );
    assert_eq!(sem.available().await.unwrap(), 0);
}

/// Twin: a naive semaphore (INCR to enter, DECR to leave, no lease) leaks the permits of a
/// holder that dies before its DECR: they never come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_twin_a_counter_leaks_the_permits_of_a_dead_holder() {
    let server = RedisServer::start();
    let mut con = server.connection().await;
    const N: i64 = 3;
    for _ in 0..N {
        let _: i64 = query(&mut con, &cmd(&["INCR", "naive:count"])).await;
    }
    // The holder dies here: no DECR is ever sent.
    let waited = Instant::now();
    while waited.elapsed() < Duration::from_millis(KILL_TTL_MS * 2) {
        let count: i64 = query(&mut con, &cmd(&["GET", "naive:count"])).await;
        assert_eq!(count, N, "the dead holder's permits are still counted");
        sleep(Duration::from_millis(100)).await;
    }
}

/// FIFO: waiters queued one after another get the permits in their arrival order (the grant
/// order is the order of their fencing tokens, minted by each grant).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_are_granted_in_arrival_order() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let locks = manager(&server).await;
    let sem = locks.semaphore(KEY, 2);
    let first = sem.acquire(&opts(10_000, 0)).await.unwrap();
    let second = sem.acquire(&opts(10_000, 0)).await.unwrap();
    let mut waiters = Vec::new();
    for i in 0..6 {
        let sem = sem.clone();
        waiters.push(tokio::spawn(async move {
            let guard = sem.acquire(&opts(10_000, 10_000)).await.expect("permit");
            let token = guard.fencing_token();
            sleep(Duration::from_millis(20)).await;
            guard.release().await.expect("release");
            token
        }));
        wait_queue_len(&mut raw, i + 1).await;
    }
    first.release().await.unwrap();
    second.release().await.unwrap();
    let mut tokens = Vec::new();
    for waiter in waiters {
        tokens.push(waiter.await.unwrap());
    }
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "grants (fencing tokens) by arrival: {tokens:?}"
    );
}

/// A token per grant, strictly increasing: every holder's token is above the token of every
/// holder that had released before it acquired, and none repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_tokens_strictly_increase_per_grant() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let sem = locks.semaphore(KEY, 2);
    let released_max = Arc::new(Mutex::new(0_u64));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (sem, released_max, seen) = (sem.clone(), released_max.clone(), seen.clone());
            tokio::spawn(async move {
                for _ in 0..25 {
                    let floor = *released_max.lock().await;
                    let guard = sem.acquire(&opts(5_000, 10_000)).await.expect("permit");
                    let token = guard.fencing_token();
                    assert!(token > floor, "token {token} not above a released {floor}");
                    seen.lock().await.push(token);
                    guard.release().await.expect("release");
                    let mut max = released_max.lock().await;
                    *max = (*max).max(token);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut seen = seen.lock().await.clone();
    let all = seen.len();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), all, "no token repeats");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatched_permits_are_refused_naming_both_numbers() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let three = locks.semaphore(KEY, 3);
    let held = three.acquire(&opts(10_000, 0)).await.unwrap();
    let five = locks.semaphore(KEY, 5);
    let refusals: Vec<LockError> = vec![
        five.acquire(&opts(10_000, 1_000)).await.unwrap_err(),
        five.try_acquire(&opts(10_000, 0)).await.unwrap_err(),
        five.available().await.unwrap_err(),
    ];
    for err in refusals {
        let LockError::InvalidOptions { reason } = &err else {
            panic!("expected InvalidOptions, got {err:?}");
        };
        assert!(
            reason.contains("3 permits") && reason.contains("5 permits"),
            "{reason}"
        );
        assert!(reason.contains("lock:pool"), "{reason}");
    }
    let read = locks.rw_lock(KEY).read(&opts(10_000, 0)).await.unwrap_err();
    assert!(
        matches!(&read, LockError::InvalidOptions { reason } if reason.contains("3 permits")),
        "{read:?}"
    );
    assert_eq!(
        three.available().await.unwrap(),
        2,
        "the matching handle still works"
    );
    held.release().await.unwrap();
    assert_eq!(three.available().await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_permits_and_redlock_are_refused_before_any_network_call() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let zero = locks.semaphore(KEY, 0);
    let err = zero.acquire(&opts(1_000, 0)).await.unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidOptions { reason } if reason.contains("0 permits")),
        "{err:?}"
    );
    let redlock = LockManager::builder()
        .nodes([server.url(), server.url(), server.url()])
        .build()
        .await
        .unwrap();
    let sem = redlock.semaphore(KEY, 2);
    for err in [
        sem.acquire(&opts(1_000, 0)).await.unwrap_err(),
        sem.available().await.unwrap_err(),
        redlock
            .rw_lock(KEY)
            .read(&opts(1_000, 0))
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(&err, LockError::InvalidOptions { reason } if reason.contains("Redlock")),
            "{err:?}"
        );
    }
}

/// A plain lock of the key and the semaphore's permits exclude each other (a plain lock of a
/// key held as permits is refused), and `available` counts what is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_lock_and_permits_exclude_each_other() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let sem: Semaphore = locks.semaphore(KEY, 2);
    let permit = sem
        .try_acquire(&opts(10_000, 0))
        .await
        .unwrap()
        .expect("free");
    assert_eq!(sem.available().await.unwrap(), 1);
    let refused = locks.try_acquire(KEY, &opts(10_000, 0)).await;
    assert!(
        matches!(&refused, Err(LockError::InvalidOptions { reason }) if reason.contains("semaphore of 2 permits")),
        "a permit is held: {refused:?}"
    );
    permit.release().await.unwrap();
    let plain = locks
        .try_acquire(KEY, &opts(10_000, 0))
        .await
        .unwrap()
        .expect("free again");
    assert_eq!(sem.available().await.unwrap(), 0);
    assert!(
        sem.try_acquire(&opts(10_000, 0)).await.unwrap().is_none(),
        "the plain lock is held"
    );
    plain.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
}

/// A permit's lease is its own: the watchdog keeps it past its TTL, `extend` sets it, and a
/// permit whose lease ended is reported lost at release (and counted free before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_a_lease_renewed_extended_and_lost_on_its_own() {
    let server = RedisServer::start();
    let locks = manager(&server).await;
    let sem = locks.semaphore(KEY, 1);
    let watched = sem.acquire(&opts(300, 0).watchdog(true)).await.unwrap();
    let until = Instant::now() + Duration::from_millis(1_000);
    while Instant::now() < until {
        assert!(
            sem.try_acquire(&opts(300, 0)).await.unwrap().is_none(),
            "the watched permit is kept"
        );
        sleep(Duration::from_millis(50)).await;
    }
    assert!(watched.is_held());
    watched.release().await.unwrap();

    let mut short = sem.acquire(&opts(200, 0)).await.unwrap();
    short.extend(Duration::from_millis(1_000)).await.unwrap();
    sleep(Duration::from_millis(400)).await;
    assert_eq!(
        sem.available().await.unwrap(),
        0,
        "extended past its first TTL"
    );
    short.release().await.unwrap();

    let lapsed = sem.acquire(&opts(100, 0)).await.unwrap();
    let mut raw = server.connection().await;
    let until = Instant::now() + Duration::from_secs(2);
    while sem.available().await.unwrap() == 0 {
        assert!(
            Instant::now() < until,
            "the lapsed permit was never counted free"
        );
        sleep(Duration::from_millis(20)).await;
    }
    let err = lapsed.release().await.unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    let keys: Vec<String> = query(&mut raw, &cmd(&["KEYS", "*"])).await;
    assert!(
        keys.iter().all(|k| !k.contains("pool")),
        "nothing left behind: {keys:?}"
    );
}

/// A waiter that gives up (its wait budget spent) leaves no queue entry and no permit behind,
/// and a release then frees the permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_nothing_behind() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let locks = manager(&server).await;
    let sem = locks.semaphore(KEY, 1);
    let held = sem.acquire(&opts(10_000, 0)).await.unwrap();
    let err = sem.acquire(&opts(10_000, 300)).await.unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    held.release().await.unwrap();
    // The waiter withdraws in the background (its error returned within its budget); a
    // release that overtakes the withdrawal hands it the permit, which it gives back at once.
    let until = Instant::now() + Duration::from_secs(2);
    while sem.available().await.unwrap() != 1 {
        assert!(Instant::now() < until, "the permit never came back");
        sleep(Duration::from_millis(20)).await;
    }
    let gone = queue_gone_within(&mut raw, Duration::from_secs(2)).await;
    assert!(
        gone.is_some(),
        "queue keys left: {:?}",
        queue_leftovers(&mut raw).await
    );
    let options = LockOptions::new(Duration::from_secs(1));
    sem.acquire(&options)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// A waiter that died while queued (its entry lapsed: it never re-checks) is skipped: the
/// release hands the permit to the live waiter behind it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_is_skipped_by_the_release() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let locks = manager(&server).await;
    let sem = locks.semaphore(KEY, 1);
    let held = sem.acquire(&opts(10_000, 0)).await.unwrap();
    let key = full(KEY);
    let (queue, entries) = queue_of(&key);
    let dead = "99999999-9999-4999-8999-999999999999 {\"pid\":9,\"acquired_at\":1,\"permits\":1}";
    let _: i64 = query(&mut raw, &cmd(&["RPUSH", &queue, dead])).await;
    plant_waiter(
        &mut raw,
        &entries,
        dead,
        10_000,
        "lock:__wake__:gone",
        &fencing_counter_key(),
        200,
    )
    .await;
    let live = tokio::spawn({
        let sem = sem.clone();
        async move { sem.acquire(&opts(10_000, 5_000)).await }
    });
    wait_queue_len(&mut raw, 2).await;
    let until = Instant::now() + Duration::from_secs(2);
    while waiter_live(&mut raw, &entries, dead).await {
        assert!(Instant::now() < until, "the planted entry never lapsed");
        sleep(Duration::from_millis(20)).await;
    }
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = live
        .await
        .unwrap()
        .expect("the live waiter gets the permit");
    let took = released.elapsed();
    assert!(
        took < Duration::from_millis(150),
        "handed over past the dead waiter in {took:?}"
    );
    guard.release().await.unwrap();
}

/// `holder` of a key held as permits names the key and says why, rather than making up a
/// holder from lockcore's marker; free again, it is `None`.
#[tokio::test]
async fn holder_of_a_semaphore_key_is_an_error_naming_it() {
    let (_server, locks, _raw) = start_with_manager().await;
    let opts = LockOptions::new(Duration::from_secs(5));
    let permit = locks.semaphore("pool:h", 3).acquire(&opts).await.unwrap();
    match locks.holder("pool:h").await {
        Err(LockError::InvalidOptions { reason }) => {
            assert!(
                reason.contains("lock:pool:h") && reason.contains("shares"),
                "{reason}"
            )
        }
        other => panic!("expected InvalidOptions naming the key, got {other:?}"),
    }
    permit.release().await.unwrap();
    assert!(
        locks.holder("pool:h").await.unwrap().is_none(),
        "free again"
    );
}
