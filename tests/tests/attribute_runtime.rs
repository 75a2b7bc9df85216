//! Runtime behaviour of `#[distributed_lock]` against a real Redis: a body that outlives its
//! TTL (the wrapper's side), a wrapped future dropped mid-body, a panic inside the body, `?`
//! early returns, every receiver form (each behaves like the undecorated fn), the order with
//! `#[tokio::test]`, `manager = ..` forms, `ttl_ms`/`wait_ms`, `crate = ..`, and the lock
//! making a non-atomic update exact (with its unlocked twin).
//!
//! The default manager is process-wide: its tests live in `default_manager.rs`.

// Test helpers outside `#[test]` fns may panic on failure too (clippy's allow-*-in-tests
// covers only the test fns themselves).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions, distributed_lock};
use lockcore_tests::*;
use redis::aio::MultiplexedConnection;
use tokio::sync::oneshot;
use tokio::time::{Instant, sleep, sleep_until};

#[derive(Debug, thiserror::Error)]
enum AppError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("domain error {0}")]
    Domain(u32),
}

/// Inside a body: the lock on `key` is held (another attempt is refused).
async fn assert_held(m: &LockManager, key: &str) -> Result<(), LockError> {
    let other = m.try_acquire(key, &opts(1000, 0)).await?;
    assert!(other.is_none(), "the body runs without the lock on {key:?}");
    Ok(())
}

// ---- wrapper: the body outlives its TTL -------------------------------------------------------

#[distributed_lock(key = "order:<id>", ttl_ms = 500, wait_ms = 0, manager = m, watchdog = false)]
async fn slow_order(m: &LockManager, id: u64, outcome: Result<u32, u32>) -> Result<u32, AppError> {
    sleep(Duration::from_millis(800)).await;
    outcome.map_err(AppError::Domain)
}

/// Wrapper, watchdog off: ttl 500, body 800. B takes the key at t=600. The wrapper's
/// release reports Lost internally, yet it returns the body's own value (or error) unchanged,
/// and B's key keeps its value and PTTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c01_wrapper_returns_body_value_after_lease_lost() {
    let (server, a, mut raw) = start_with_manager().await;
    let b = manager(&server).await;

    for (id, outcome) in [(42, Ok(7)), (43, Err(5))] {
        let t0 = Instant::now();
        let key = format!("order:{id}");
        let (result, guard_b) = tokio::join!(slow_order(&a, id, outcome), async {
            sleep_until(t0 + Duration::from_millis(600)).await;
            b.try_acquire(&key, &opts(5000, 0))
                .await
                .expect("B's attempt")
                .expect("A's 500 ms lease has expired at t=600")
        });
        match (outcome, result) {
            (Ok(v), Ok(got)) => assert_eq!(got, v),
            (Err(e), Err(AppError::Domain(got))) => assert_eq!(got, e),
            (_, other) => panic!("the body's own result must come back unchanged, got {other:?}"),
        }
        assert_eq!(
            get(&mut raw, &full(&key)).await.as_deref(),
            Some(guard_b.stored_value())
        );
        assert!(
            pttl(&mut raw, &full(&key)).await > 4_500,
            "B's lease untouched"
        );
        guard_b.release().await.expect("B still holds its lock");
    }
}

/// Wrapper: the lost lock is reported through `tracing` (a WARN naming the key), while the
/// caller still gets the body's value. Current-thread runtime, so the thread-local capture sees
/// every task.
#[tokio::test]
async fn c01_wrapper_reports_lost_release_through_tracing() {
    let server = RedisServer::start();
    let a = manager(&server).await;
    let events = CapturedEvents::default();
    let _capture = tracing::subscriber::set_default(events.clone());

    assert_eq!(slow_order(&a, 44, Ok(9)).await.expect("body value"), 9);
    let warnings = events.at(tracing::Level::WARN);
    assert!(
        warnings.iter().any(|w| w.contains("lock:order:44")),
        "expected a WARN naming `lock:order:44`, got {warnings:?}"
    );
}

// ---- wrapped future dropped mid-body ----------------------------------------------------------

#[distributed_lock(key = "user:<user_id>", ttl_ms = 10_000, manager = m)]
async fn hold_user(
    m: LockManager,
    user_id: u64,
    started: oneshot::Sender<()>,
) -> Result<(), AppError> {
    assert_held(&m, &format!("user:{user_id}")).await?;
    started.send(()).expect("test waits for the body");
    sleep(Duration::from_secs(60)).await;
    Ok(())
}

/// A wrapped fn holding `user:1` (ttl 10 s) is aborted at 100 ms: the key is gone within a
/// few ms (a spawned release, not the TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_aborted_wrapper_releases_within_ms() {
    let (_server, m, mut raw) = start_with_manager().await;

    let started = Instant::now();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(hold_user(m.clone(), 1, tx));
    rx.await.expect("the body started");
    assert!(exists(&mut raw, &full("user:1")).await);
    sleep_until(started + Duration::from_millis(100)).await;
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    let took = gone_within(
        &mut raw,
        &full("user:1"),
        Duration::from_millis(200),
        Duration::from_millis(2),
    )
    .await;
    let took = took.expect("the key must be gone within 200 ms of the abort, not after 10 s");
    assert!(took < Duration::from_millis(100), "release took {took:?}");
}

// ---- panic inside the body --------------------------------------------------------------------

#[distributed_lock(key = "user:<user_id>", ttl_ms = 10_000, manager = m)]
async fn panicky(m: LockManager, user_id: u64) -> Result<(), AppError> {
    assert_held(&m, &format!("user:{user_id}")).await?;
    sleep(Duration::from_millis(5)).await;
    panic!("original panic in the body");
}

/// Under `#[tokio::test]` (current_thread) the test fails with the original panic only:
/// no second panic (that would abort the process), no "no reactor running".
#[tokio::test]
#[should_panic(expected = "original panic in the body")]
async fn c11_panic_in_body_surfaces_unchanged() {
    let server = RedisServer::start();
    let m = manager(&server).await;
    let _ = panicky(m, 11).await;
}

/// The panic payload is the original one and the key is gone afterwards (spawned task on
/// the current_thread test runtime).
#[tokio::test]
async fn c11_panic_in_body_releases_key() {
    let (_server, m, mut raw) = start_with_manager().await;

    let err = tokio::spawn(panicky(m.clone(), 12))
        .await
        .expect_err("the body panicked");
    assert!(err.is_panic());
    let payload = err.into_panic();
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("original panic in the body")
    );
    assert_gone_within(&mut raw, &full("user:12"), Duration::from_millis(200)).await;
}

/// `catch_unwind` around `block_on` on a separately built current_thread runtime: the
/// original payload, and the key is gone.
#[test]
fn c11_panic_in_body_on_own_current_thread_runtime() {
    let server = RedisServer::start();
    let rt = current_thread_runtime();
    let m = rt.block_on(manager(&server));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(panicky(m.clone(), 13))
    }));
    let payload = caught.expect_err("the body panicked");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("original panic in the body")
    );
    rt.block_on(async {
        let mut raw = server.connection().await;
        assert_gone_within(&mut raw, &full("user:13"), Duration::from_millis(200)).await;
    });
}

// ---- `?` early return -------------------------------------------------------------------------

fn check_positive(v: u32) -> Result<u32, AppError> {
    if v == 0 {
        Err(AppError::Domain(0))
    } else {
        Ok(v)
    }
}

#[distributed_lock(key = "acct:<id>", ttl_ms = 10_000, manager = m)]
async fn early_return(m: &LockManager, id: u64, v: u32) -> Result<u32, AppError> {
    assert_held(m, &format!("acct:{id}")).await?;
    sleep(Duration::from_millis(10)).await;
    let v = check_positive(v)?;
    if v == 1 {
        return Ok(100);
    }
    Ok(v * 2)
}

/// The body returns `Err` via `?` after 10 ms; when the caller sees it, the key is already
/// gone (checked at once, no polling). Same for `return` and the normal end.
#[tokio::test]
async fn c13_question_mark_releases_before_caller_sees_err() {
    let (_server, m, mut raw) = start_with_manager().await;

    let result = early_return(&m, 1, 0).await;
    assert!(matches!(result, Err(AppError::Domain(0))), "got {result:?}");
    assert!(
        !exists(&mut raw, &full("acct:1")).await,
        "released before the Err came back"
    );

    assert_eq!(early_return(&m, 2, 1).await.expect("return"), 100);
    assert!(!exists(&mut raw, &full("acct:2")).await);
    assert_eq!(early_return(&m, 3, 4).await.expect("end"), 8);
    assert!(!exists(&mut raw, &full("acct:3")).await);
}

// ---- every receiver form ----------------------------------------------------------------------

struct Shop {
    locks: LockManager,
    tenant: String,
    sold: u32,
}

impl Shop {
    const LIMIT: u32 = 3;

    #[distributed_lock(key = "o:<self.tenant>:<id>", ttl_ms = 5000, manager = self.locks)]
    async fn by_ref(&self, id: u64) -> Result<String, AppError> {
        assert_held(&self.locks, &format!("o:{}:{id}", self.tenant)).await?;
        Ok(format!("{}/{id}", self.tenant))
    }

    #[distributed_lock(key = "o:<self.tenant>:sell", manager = self.locks)]
    async fn by_mut(&mut self, n: u32) -> Result<u32, AppError> {
        assert_held(&self.locks, &format!("o:{}:sell", self.tenant)).await?;
        self.sold += n;
        Ok(self.sold)
    }

    #[distributed_lock(key = "o:<self.tenant>:close", manager = self.locks)]
    async fn close(self) -> Result<(String, u32), AppError> {
        assert_held(&self.locks, &format!("o:{}:close", self.tenant)).await?;
        Ok((self.tenant, self.sold))
    }

    #[distributed_lock(key = "o:<self.tenant>:arc", manager = self.locks)]
    async fn by_arc(self: Arc<Self>) -> Result<usize, AppError> {
        assert_held(&self.locks, &format!("o:{}:arc", self.tenant)).await?;
        Ok(Arc::strong_count(&self))
    }

    #[distributed_lock(key = "o:limit", manager = self.locks)]
    async fn limit(&self) -> Result<u32, AppError> {
        assert_held(&self.locks, "o:limit").await?;
        Ok(Self::LIMIT)
    }

    #[distributed_lock(key = "o:assoc:<id>", manager = locks)]
    async fn assoc(locks: &LockManager, id: u64) -> Result<u64, AppError> {
        assert_held(locks, &format!("o:assoc:{id}")).await?;
        Ok(id + 1)
    }
}

/// The same methods without the attribute: the reference behaviour.
mod plain {
    use std::sync::Arc;

    pub(crate) struct Shop {
        pub(crate) tenant: String,
        pub(crate) sold: u32,
    }

    impl Shop {
        const LIMIT: u32 = 3;
        pub(crate) async fn by_ref(&self, id: u64) -> Result<String, ()> {
            Ok(format!("{}/{id}", self.tenant))
        }
        pub(crate) async fn by_mut(&mut self, n: u32) -> Result<u32, ()> {
            self.sold += n;
            Ok(self.sold)
        }
        pub(crate) async fn close(self) -> Result<(String, u32), ()> {
            Ok((self.tenant, self.sold))
        }
        pub(crate) async fn by_arc(self: Arc<Self>) -> Result<usize, ()> {
            Ok(Arc::strong_count(&self))
        }
        pub(crate) async fn limit(&self) -> Result<u32, ()> {
            Ok(Self::LIMIT)
        }
        pub(crate) async fn assoc(id: u64) -> Result<u64, ()> {
            Ok(id + 1)
        }
    }
}

/// `&self` with `<self.tenant>`, `&mut self` mutating, `self` consumed, `self: Arc<Self>`,
/// `Self::CONST`, an associated fn: each holds its lock in the body, returns what the
/// undecorated fn returns, and releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c14_every_receiver_form_behaves_like_undecorated() {
    let (_server, m, mut raw) = start_with_manager().await;
    let mut shop = Shop {
        locks: m.clone(),
        tenant: "acme".into(),
        sold: 0,
    };
    let mut reference = plain::Shop {
        tenant: "acme".into(),
        sold: 0,
    };

    assert_eq!(
        shop.by_ref(7).await.expect("&self"),
        reference.by_ref(7).await.expect("plain")
    );
    assert!(!exists(&mut raw, &full("o:acme:7")).await);

    assert_eq!(
        shop.by_mut(2).await.expect("&mut self"),
        reference.by_mut(2).await.expect("plain")
    );
    assert_eq!(
        shop.by_mut(3).await.expect("&mut self"),
        reference.by_mut(3).await.expect("plain")
    );
    assert_eq!(shop.sold, 5);
    assert!(!exists(&mut raw, &full("o:acme:sell")).await);

    assert_eq!(
        shop.limit().await.expect("Self::CONST"),
        reference.limit().await.expect("plain")
    );
    assert_eq!(
        Shop::assoc(&m, 9).await.expect("assoc"),
        plain::Shop::assoc(9).await.expect("plain")
    );
    assert!(!exists(&mut raw, &full("o:assoc:9")).await);

    // A wrapped method stays `Send`: it can be spawned.
    let spawned = Arc::new(Shop {
        locks: m.clone(),
        tenant: "spawned".into(),
        sold: 0,
    });
    let s = Arc::clone(&spawned);
    let got = tokio::spawn(async move { s.by_ref(1).await })
        .await
        .expect("task");
    assert_eq!(got.expect("&self in a spawned task"), "spawned/1");

    let arc_shop = Arc::new(Shop {
        locks: m.clone(),
        tenant: "acme".into(),
        sold: 5,
    });
    let arc_ref = Arc::new(plain::Shop {
        tenant: "acme".into(),
        sold: 5,
    });
    assert_eq!(
        arc_shop.by_arc().await.expect("Arc<Self>"),
        arc_ref.by_arc().await.expect("plain")
    );
    assert!(!exists(&mut raw, &full("o:acme:arc")).await);

    assert_eq!(
        shop.close().await.expect("self"),
        reference.close().await.expect("plain")
    );
    assert!(!exists(&mut raw, &full("o:acme:close")).await);
}

// ---- manager = .. forms, ttl_ms, wait_ms, crate = .. -------------------------------------------

struct Service {
    locks: Arc<LockManager>,
}

impl Service {
    #[distributed_lock(key = "svc:<id>", ttl_ms = 1500, manager = self.locks)]
    async fn run(&self, id: u32, raw: &mut MultiplexedConnection) -> Result<i64, AppError> {
        Ok(pttl(raw, &format!("lock:svc:{id}")).await)
    }
}

#[distributed_lock(key = "owned:<id>", manager = m)]
async fn with_owned_manager(
    m: LockManager,
    id: u32,
    raw: &mut MultiplexedConnection,
) -> Result<i64, AppError> {
    Ok(pttl(raw, &format!("lock:owned:{id}")).await)
}

mod renamed {
    pub(crate) use ::lockcore as locks;
}

#[distributed_lock(key = "renamed:<id>", ttl_ms = 2000, manager = m, crate = "crate::renamed::locks")]
async fn via_renamed_crate(m: &LockManager, id: u32) -> Result<u32, LockError> {
    assert_held(m, &format!("renamed:{id}")).await?;
    Ok(id)
}

/// `manager = self.locks` (an `Arc<LockManager>`) with `ttl_ms = 1500`: the lease is 1500 ms; an
/// owned `LockManager` without `ttl_ms` uses the manager's default options (7000 ms here);
/// `crate = ".."` works through a renamed path.
#[tokio::test]
async fn attribute_manager_forms_and_ttl() {
    let server = RedisServer::start();
    let mut raw = server.connection().await;
    let m = manager_with(&server, |builder| {
        builder.default_options(LockOptions::new(Duration::from_millis(7000)))
    })
    .await;

    let svc = Service {
        locks: Arc::new(m.clone()),
    };
    let ttl = svc.run(1, &mut raw).await.expect("Arc manager");
    assert!(
        (1_300..=1_500).contains(&ttl),
        "ttl_ms = 1500, PTTL in the body {ttl}"
    );
    assert!(!exists(&mut raw, &full("svc:1")).await);

    let ttl = with_owned_manager(m.clone(), 2, &mut raw)
        .await
        .expect("owned manager");
    assert!(
        (6_800..=7_000).contains(&ttl),
        "manager default 7000, PTTL in the body {ttl}"
    );
    assert!(!exists(&mut raw, &full("owned:2")).await);

    assert_eq!(via_renamed_crate(&m, 3).await.expect("renamed crate"), 3);
    assert!(!exists(&mut raw, &full("renamed:3")).await);
}

/// The body shared by the wrapped fn and its unlocked twin.
async fn count_run(ran: &AtomicUsize) -> Result<(), AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "busy:<id>", ttl_ms = 5000, wait_ms = 200, manager = m)]
async fn guarded_body(m: &LockManager, id: u32, ran: &AtomicUsize) -> Result<(), AppError> {
    count_run(ran).await
}

/// The body never runs without the lock: while B holds `busy:1`, the wrapped fn returns
/// `Contended` after its 200 ms `wait_ms` and its body does not run. Twin: the undecorated
/// body runs regardless. Once B releases, the wrapped body runs.
#[tokio::test]
async fn attribute_body_never_runs_without_lock() {
    let server = RedisServer::start();
    let a = manager(&server).await;
    let b = manager(&server).await;
    let ran = AtomicUsize::new(0);

    let held = must_acquire(&b, "busy:1", &opts(10_000, 0)).await;
    let started = Instant::now();
    let result = guarded_body(&a, 1, &ran).await;
    let elapsed = started.elapsed();
    match result {
        Err(AppError::Lock(LockError::Contended { key, .. })) => assert_eq!(key, "lock:busy:1"),
        other => panic!("expected Contended, got {other:?}"),
    }
    assert!(
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(400),
        "{elapsed:?}"
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the body ran without the lock"
    );

    // Unlocked twin: the same body without the attribute runs while B holds the key.
    count_run(&ran).await.expect("undecorated");
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    held.release().await.expect("B releases");
    guarded_body(&a, 1, &ran).await.expect("free now");
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

#[distributed_lock(key = "counter", ttl_ms = 5000, wait_ms = 20_000, manager = m)]
async fn locked_increment(
    m: &LockManager,
    con: &mut MultiplexedConnection,
) -> Result<(), AppError> {
    non_atomic_increment(con).await;
    Ok(())
}

async fn run_attribute_increments(server: &RedisServer, locked: bool) -> i64 {
    const TASKS: usize = 5;
    const ROUNDS: usize = 10;
    let fast_retry = LockOptions::default()
        .retry_base(Duration::from_millis(1))
        .retry_cap(Duration::from_millis(8));
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let m = manager_with(server, |builder| {
            builder.default_options(fast_retry.clone())
        })
        .await;
        let mut con = server.connection().await;
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            for _ in 0..ROUNDS {
                if locked {
                    locked_increment(&m, &mut con)
                        .await
                        .expect("locked increment");
                } else {
                    non_atomic_increment(&mut con).await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let total = counter_value(server).await;
    assert!(total <= (TASKS * ROUNDS) as i64);
    total
}

/// Five clients x 10 increments through the wrapped fn: exactly 50. The unlocked twin (the
/// same increments, undecorated) loses updates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attribute_locked_increments_are_exact_and_twin_loses_updates() {
    let locked_server = RedisServer::start();
    assert_eq!(run_attribute_increments(&locked_server, true).await, 50);
    let unlocked_server = RedisServer::start();
    let total = run_attribute_increments(&unlocked_server, false).await;
    assert!(
        total < 50,
        "without the lock updates must be lost, got {total}"
    );
}

// ---- order with #[tokio::test] ----------------------------------------------------------------

/// What the test-order tests lock on. A `#[distributed_lock]` test needs its manager before its body
/// runs, so the server and the manager are made on first use, per test thread, and torn down
/// when that thread ends (libtest runs each test on its own thread). The manager lives on a
/// small runtime of its own, since the test's runtime is the one being set up.
struct C18Env {
    manager: LockManager,
    _stop: std::sync::mpsc::Sender<()>,
    _server: RedisServer,
}

thread_local! {
    static C18_ENV: RefCell<Option<C18Env>> = const { RefCell::new(None) };
}

fn c18_manager() -> LockManager {
    C18_ENV.with(|env| {
        let mut env = env.borrow_mut();
        if let Some(env) = env.as_ref() {
            return env.manager.clone();
        }
        let server = RedisServer::start();
        let url = server.url();
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("test-order runtime");
            let m = rt
                .block_on(LockManager::connect(&url))
                .expect("test-order manager");
            tx.send(m).expect("test-order test waits");
            // Keep the runtime (the manager's connection) alive until the test thread ends.
            let _ = stopped.recv();
        });
        let manager = rx.recv().expect("test-order manager built");
        *env = Some(C18Env {
            manager: manager.clone(),
            _stop: stop,
            _server: server,
        });
        manager
    })
}

static C18_RUNS_CURRENT: AtomicUsize = AtomicUsize::new(0);
static C18_RUNS_MULTI: AtomicUsize = AtomicUsize::new(0);

/// `#[distributed_lock]` above `#[tokio::test]`: the body runs once, with the lock held.
#[distributed_lock(key = "c18:current", ttl_ms = 5000, manager = c18_manager())]
#[tokio::test]
async fn c18_lock_above_tokio_test() -> Result<(), LockError> {
    assert_eq!(
        C18_RUNS_CURRENT.fetch_add(1, Ordering::SeqCst),
        0,
        "the test body ran twice"
    );
    assert_held(&c18_manager(), "c18:current").await
}

/// The same with a multi-thread `#[tokio::test]`.
#[distributed_lock(key = "c18:multi", ttl_ms = 5000, manager = c18_manager())]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c18_lock_above_tokio_test_multi_thread() -> Result<(), LockError> {
    assert_eq!(
        C18_RUNS_MULTI.fetch_add(1, Ordering::SeqCst),
        0,
        "the test body ran twice"
    );
    assert_held(&c18_manager(), "c18:multi").await
}

/// The decorated tests are registered exactly once each (never missing, never
/// duplicated): the test binary's own `--list` shows each name once.
#[test]
fn c18_decorated_tests_are_listed_exactly_once() {
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args(["--list", "--format", "terse"])
        .output()
        .expect("run the test binary with --list");
    let listing = String::from_utf8_lossy(&out.stdout);
    for name in [
        "c18_lock_above_tokio_test",
        "c18_lock_above_tokio_test_multi_thread",
    ] {
        let count = listing
            .lines()
            .filter(|l| *l == format!("{name}: test"))
            .count();
        assert_eq!(count, 1, "{name} listed {count} times in:\n{listing}");
    }
}

/// Key templates render byte for byte: `<<` is a literal `<` with or without placeholders,
/// braces stay (hash tags), other text is copied.
#[distributed_lock(key = "a<<b{tag}", manager = m, wait_ms = 0, guard = g)]
async fn literal_template(m: &LockManager) -> Result<String, AppError> {
    Ok(g.key().to_owned())
}

#[distributed_lock(key = "a<<b{tag}:<id>", manager = m, wait_ms = 0, guard = g)]
async fn placeholder_template(m: &LockManager, id: u64) -> Result<String, AppError> {
    Ok(g.key().to_owned())
}

#[tokio::test]
async fn key_templates_render_escapes_and_braces_literally() {
    let server = RedisServer::start();
    let m = manager(&server).await;
    assert_eq!(
        literal_template(&m).await.expect("literal"),
        full("a<b{tag}")
    );
    assert_eq!(
        placeholder_template(&m, 7).await.expect("placeholder"),
        full("a<b{tag}:7")
    );
}
