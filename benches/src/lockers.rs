//! The implementations under test behind one small trait: the raw redis-rs floor, lockcore, and
//! the peer crates, each configured with its documented defaults and the same wait budget.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lockcore::{FencingCounter, LockError, LockManager, LockManagerBuilder, LockOptions};
use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::{IntoConnectionInfo, Script};

/// Why an acquire did not return a lock.
#[derive(Debug)]
pub(crate) enum AcqError {
    /// The wait budget was spent while another holder had the key.
    Timeout,
    /// Anything else (a Redis error, an API error), as text.
    Failed(String),
}

/// One lock implementation: acquire with its own retry policy within the wait budget, release.
pub(crate) trait Locker: Send + Sync + 'static {
    type Guard: Send + 'static;

    fn acquire(&self, key: &str) -> impl Future<Output = Result<Self::Guard, AcqError>> + Send;

    fn release(&self, guard: Self::Guard) -> impl Future<Output = Result<(), String>> + Send;
}

/// The lease TTL and wait budget that every implementation gets in one scenario.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
}

/// The implementations, as chosen on the command line and printed in the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Raw redis-rs: `MultiplexedConnection`, TCP_NODELAY on, `SET NX PX` + `EVALSHA` release.
    Floor,
    /// The floor with TCP_NODELAY off (redis-rs's default).
    FloorNagle,
    /// The floor, but acquiring with one `EVALSHA` that runs `SET NX PX` and `INCR`s a
    /// counter: the least a lock that hands out fencing tokens sends. TCP_NODELAY on.
    FloorFenced,
    /// The fenced floor with TCP_NODELAY off.
    FloorFencedNagle,
    /// lockcore with `handoff(false)`: plain jittered backoff.
    Lockcore,
    /// lockcore with `handoff(true)` (its default): a server-side queue and pushed wake-ups.
    LockcoreHandoff,
    /// lockcore's default with `fencing_counter(FencingCounter::Off)`: no fencing token.
    LockcoreFencingOff,
    /// lockcore's default, each acquire one permit of a semaphore of [`SEMAPHORE_PERMITS`]
    /// permits on the key.
    LockcoreSemaphore,
    Rslock,
    AsyncRedisLock,
    Rlock,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Floor => "floor (NODELAY on)",
            Kind::FloorNagle => "floor (NODELAY off)",
            Kind::FloorFenced => "floor + fencing token (NODELAY on)",
            Kind::FloorFencedNagle => "floor + fencing token (NODELAY off)",
            Kind::Lockcore => "lockcore (backoff)",
            Kind::LockcoreHandoff => "lockcore (handoff, default)",
            Kind::LockcoreFencingOff => "lockcore (fencing off)",
            Kind::LockcoreSemaphore => "lockcore semaphore (4 permits)",
            Kind::Rslock => "rslock 0.10",
            Kind::AsyncRedisLock => "async-redis-lock 0.4",
            Kind::Rlock => "rlock 0.2",
        }
    }

    /// Every implementation, in table order.
    pub(crate) const ALL: [Kind; 11] = [
        Kind::Floor,
        Kind::FloorNagle,
        Kind::FloorFenced,
        Kind::FloorFencedNagle,
        Kind::Lockcore,
        Kind::LockcoreHandoff,
        Kind::LockcoreFencingOff,
        Kind::LockcoreSemaphore,
        Kind::Rslock,
        Kind::AsyncRedisLock,
        Kind::Rlock,
    ];

    /// The two TCP_NODELAY settings of the floor (`fenced`: of the fenced floor).
    pub(crate) fn floors(fenced: bool) -> [Kind; 2] {
        if fenced {
            [Kind::FloorFenced, Kind::FloorFencedNagle]
        } else {
            [Kind::Floor, Kind::FloorNagle]
        }
    }

    /// How the implementation talks to Redis, as configured here (its documented constructor).
    pub(crate) fn connection_model(self) -> &'static str {
        match self {
            Kind::Floor | Kind::FloorFenced => {
                "one `MultiplexedConnection` per node, TCP_NODELAY on"
            }
            Kind::FloorNagle | Kind::FloorFencedNagle => {
                "one `MultiplexedConnection` per node, TCP_NODELAY off"
            }
            Kind::Lockcore
            | Kind::LockcoreHandoff
            | Kind::LockcoreFencingOff
            | Kind::LockcoreSemaphore => {
                "one `ConnectionManager` (multiplexed, reconnecting) per node, TCP_NODELAY off, scripts preloaded; one node: plus one pub/sub connection per manager for wake-ups"
            }
            Kind::Rslock => {
                "one lazily opened `MultiplexedConnection` per node behind a tokio `Mutex`, TCP_NODELAY off (redis-rs default)"
            }
            Kind::AsyncRedisLock => {
                "one `ConnectionManager`, TCP_NODELAY off; spawns a renewal task per lock"
            }
            Kind::Rlock => {
                "one `ConnectionManager`, TCP_NODELAY off; each acquire and release runs in a spawned task"
            }
        }
    }

    /// The retry policy, as configured here.
    pub(crate) fn retry_policy(self) -> &'static str {
        match self {
            Kind::Floor | Kind::FloorNagle => "none (one `SET NX PX`; used uncontended only)",
            Kind::FloorFenced | Kind::FloorFencedNagle => {
                "none (one `EVALSHA` running `SET NX PX` and, when set, `INCR` of a counter: a fencing token as lockcore mints one; used uncontended only)"
            }
            Kind::Lockcore => {
                "`acquire`: exponential backoff, full jitter, base 50 ms, cap 1 s (defaults), wait 5 s"
            }
            Kind::LockcoreHandoff => {
                "`acquire`, `handoff(true)` (default): queued in Redis, woken by the release; re-checks every 125-250 ms; wait 5 s"
            }
            Kind::LockcoreFencingOff => {
                "as the default, built with `fencing_counter(FencingCounter::Off)`: the acquire mints no fencing token"
            }
            Kind::LockcoreSemaphore => {
                "`Semaphore::acquire` of one of 4 permits on the key, queued as the default (hand-off); wait 5 s"
            }
            Kind::Rslock => {
                "`lock()` (3 tries, uniform 0-200 ms apart: defaults) called again until 5 s have passed, as its `acquire` loops forever"
            }
            Kind::AsyncRedisLock => "fixed 100 ms retry (default), `timeout(Some(5 s))`",
            Kind::Rlock => "fixed 100 ms retry (default), `lock_timeout(Some(5 s))`",
        }
    }
}

/// Any implementation, for heterogeneous lists; dispatch with [`with_locker!`].
#[derive(Clone)]
pub(crate) enum Impl {
    Floor(Arc<Floor>),
    Lockcore(Arc<Lockcore>),
    Rslock(Arc<Rslock>),
    AsyncRedisLock(Arc<Arl>),
    Rlock(Arc<Rlock>),
}

/// Runs `$body` with `$l` bound to the concrete `Arc<impl Locker>` inside an [`Impl`].
macro_rules! with_locker {
    ($imp:expr, $l:ident => $body:expr) => {
        match $imp {
            $crate::lockers::Impl::Floor($l) => $body,
            $crate::lockers::Impl::Lockcore($l) => $body,
            $crate::lockers::Impl::Rslock($l) => $body,
            $crate::lockers::Impl::AsyncRedisLock($l) => $body,
            $crate::lockers::Impl::Rlock($l) => $body,
        }
    };
}
pub(crate) use with_locker;

/// Builds one instance (its own manager and connections) of `kind` over `urls` (one URL, or
/// several for Redlock), and makes one acquire+release so that connections are open and scripts
/// loaded before anything is measured.
pub(crate) async fn connect(kind: Kind, urls: &[String], budget: Budget) -> Result<Impl, String> {
    let floor = |fenced, nodelay| Floor::connect(urls, budget, fenced, nodelay);
    let lockcore = |handoff| Lockcore::build(LockManager::builder().nodes(urls), budget, handoff);
    let imp = match kind {
        Kind::Floor => Impl::Floor(Arc::new(floor(false, true).await?)),
        Kind::FloorNagle => Impl::Floor(Arc::new(floor(false, false).await?)),
        Kind::FloorFenced => Impl::Floor(Arc::new(floor(true, true).await?)),
        Kind::FloorFencedNagle => Impl::Floor(Arc::new(floor(true, false).await?)),
        Kind::Lockcore => Impl::Lockcore(Arc::new(lockcore(false).await?)),
        Kind::LockcoreHandoff => Impl::Lockcore(Arc::new(lockcore(true).await?)),
        Kind::LockcoreFencingOff => Impl::Lockcore(Arc::new(
            Lockcore::build(
                LockManager::builder()
                    .nodes(urls)
                    .fencing_counter(FencingCounter::Off),
                budget,
                true,
            )
            .await?,
        )),
        Kind::LockcoreSemaphore => Impl::Lockcore(Arc::new(
            lockcore(true).await?.with_permits(SEMAPHORE_PERMITS),
        )),
        Kind::Rslock => Impl::Rslock(Arc::new(Rslock::connect(urls, budget)?)),
        Kind::AsyncRedisLock => Impl::AsyncRedisLock(Arc::new(Arl::connect(urls, budget).await?)),
        Kind::Rlock => Impl::Rlock(Arc::new(Rlock::connect(urls, budget).await?)),
    };
    with_locker!(&imp, l => warm(&**l, kind.name()).await)?;
    Ok(imp)
}

/// One acquire+release, so that connections are open and scripts loaded.
pub(crate) async fn warm<L: Locker>(l: &L, name: &str) -> Result<(), String> {
    let warm_key = format!("bench:warm:{}", uuid::Uuid::new_v4().simple());
    let guard = l
        .acquire(&warm_key)
        .await
        .map_err(|e| format!("{name}: warm-up acquire: {e:?}"))?;
    l.release(guard)
        .await
        .map_err(|e| format!("{name}: warm-up release: {e}"))
}

fn single_url(urls: &[String], who: &str) -> Result<String, String> {
    match urls {
        [url] => Ok(url.clone()),
        _ => Err(format!("{who} supports one Redis node only")),
    }
}

/// A raw redis-rs client whose connections have TCP_NODELAY on.
pub(crate) fn nodelay_client(url: &str) -> Result<redis::Client, String> {
    let info = url
        .into_connection_info()
        .map_err(|e| e.to_string())?
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
    redis::Client::open(info).map_err(|e| e.to_string())
}

/// A raw redis-rs connection with TCP_NODELAY on.
pub(crate) async fn nodelay_connection(url: &str) -> Result<MultiplexedConnection, String> {
    nodelay_client(url)?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connect {url}: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Floor

/// The compare-and-delete every implementation uses in some form.
static RELEASE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(lockcore_tests::lua::COMPARE_AND_DELETE));

/// The fenced floor's acquire: `SET NX PX`, and on success `INCR` of the fencing counter.
static ACQUIRE_FENCED: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(lockcore_tests::lua::SET_NX_INCR));

/// The fencing counter of the fenced floor.
const FENCE_COUNTER: &str = "bench:floor:fence";

/// The floor: what any Redis lock has to send at least. One node: `SET key token NX PX ttl`,
/// then `EVALSHA` compare-and-delete. N nodes: the same to all of them in parallel, quorum
/// N/2 + 1, without Redlock's validity bookkeeping. No retry: it is measured uncontended.
pub(crate) struct Floor {
    conns: Vec<MultiplexedConnection>,
    ttl_ms: u64,
    /// Acquire with [`ACQUIRE_FENCED`] instead of `SET NX PX`.
    fenced: bool,
}

pub(crate) struct FloorGuard {
    key: String,
    token: String,
}

impl Floor {
    async fn connect(
        urls: &[String],
        budget: Budget,
        fenced: bool,
        nodelay: bool,
    ) -> Result<Floor, String> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            let mut conn = if nodelay {
                nodelay_connection(url).await?
            } else {
                redis::Client::open(url.as_str())
                    .map_err(|e| e.to_string())?
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| format!("connect {url}: {e}"))?
            };
            for script in [&*RELEASE, &*ACQUIRE_FENCED] {
                script
                    .load_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            conns.push(conn);
        }
        Ok(Floor {
            conns,
            ttl_ms: u64::try_from(budget.ttl.as_millis()).unwrap_or(u64::MAX),
            fenced,
        })
    }

    /// The first node's connection, for round-trip probes.
    pub(crate) fn connection(&self) -> Option<MultiplexedConnection> {
        self.conns.first().cloned()
    }

    async fn release_all(&self, key: &str, token: &str) -> Result<usize, String> {
        let replies = join_all(self.conns.iter().map(|conn| {
            let mut conn = conn.clone();
            async move {
                RELEASE
                    .key(key)
                    .arg(token)
                    .invoke_async::<i64>(&mut conn)
                    .await
            }
        }))
        .await;
        let mut deleted = 0;
        for reply in replies {
            deleted += usize::from(reply.map_err(|e| e.to_string())? == 1);
        }
        Ok(deleted)
    }
}

impl Locker for Floor {
    type Guard = FloorGuard;

    async fn acquire(&self, key: &str) -> Result<FloorGuard, AcqError> {
        let token = uuid::Uuid::new_v4().hyphenated().to_string();
        let set = |mut conn: MultiplexedConnection| {
            let token = &token;
            async move {
                if self.fenced {
                    let fence = ACQUIRE_FENCED
                        .key(key)
                        .key(FENCE_COUNTER)
                        .arg(token)
                        .arg(self.ttl_ms)
                        .invoke_async::<u64>(&mut conn)
                        .await?;
                    return Ok((fence > 0).then_some(()));
                }
                redis::cmd("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(self.ttl_ms)
                    .query_async::<Option<()>>(&mut conn)
                    .await
            }
        };
        let won = if let [conn] = self.conns.as_slice() {
            usize::from(
                set(conn.clone())
                    .await
                    .map_err(|e| AcqError::Failed(e.to_string()))?
                    .is_some(),
            )
        } else {
            let replies = join_all(self.conns.iter().cloned().map(set)).await;
            replies
                .into_iter()
                .filter(|r| matches!(r, Ok(Some(_))))
                .count()
        };
        if won > self.conns.len() / 2 {
            Ok(FloorGuard {
                key: key.to_owned(),
                token,
            })
        } else {
            if self.conns.len() > 1 {
                let _ = self.release_all(key, &token).await;
            }
            Err(AcqError::Failed(
                "floor: key held (the floor does not retry)".to_owned(),
            ))
        }
    }

    async fn release(&self, guard: FloorGuard) -> Result<(), String> {
        let deleted = self.release_all(&guard.key, &guard.token).await?;
        if deleted > self.conns.len() / 2 {
            Ok(())
        } else {
            Err("floor: lock was lost".to_owned())
        }
    }
}

// ---------------------------------------------------------------------------------------------
// lockcore

pub(crate) struct Lockcore {
    manager: LockManager,
    opts: LockOptions,
    /// Each acquire takes one permit of a semaphore of this many permits on the key.
    permits: Option<u32>,
}

/// The permits of [`Kind::LockcoreSemaphore`]'s semaphores.
pub(crate) const SEMAPHORE_PERMITS: u32 = 4;

impl Lockcore {
    /// A manager from `builder`, with the scenario's TTL and wait budget.
    pub(crate) async fn build(
        builder: LockManagerBuilder,
        budget: Budget,
        handoff: bool,
    ) -> Result<Lockcore, String> {
        let manager = builder
            .build()
            .await
            .map_err(|e| format!("lockcore: {e}"))?;
        let opts = LockOptions::new(budget.ttl)
            .wait(budget.wait)
            .handoff(handoff);
        Ok(Lockcore {
            manager,
            opts,
            permits: None,
        })
    }

    /// Each acquire takes one permit of a semaphore of `permits` on the key instead.
    pub(crate) fn with_permits(self, permits: u32) -> Lockcore {
        Lockcore {
            permits: Some(permits),
            ..self
        }
    }

    /// A manager and options for the watchdog scenario.
    pub(crate) async fn watchdog(
        url: &str,
        ttl: Duration,
        handoff: bool,
    ) -> Result<(LockManager, LockOptions), String> {
        let manager = LockManager::connect(url)
            .await
            .map_err(|e| format!("lockcore: {e}"))?;
        let opts = LockOptions::new(ttl).watchdog(true).handoff(handoff);
        Ok((manager, opts))
    }
}

impl Locker for Lockcore {
    type Guard = lockcore::LockGuard;

    async fn acquire(&self, key: &str) -> Result<lockcore::LockGuard, AcqError> {
        let acquired = match self.permits {
            None => self.manager.acquire(key, &self.opts).await,
            Some(n) => self.manager.semaphore(key, n).acquire(&self.opts).await,
        };
        acquired.map_err(|e| match e {
            LockError::Contended { .. } => AcqError::Timeout,
            other => AcqError::Failed(other.to_string()),
        })
    }

    async fn release(&self, guard: lockcore::LockGuard) -> Result<(), String> {
        guard.release().await.map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// rslock

pub(crate) struct Rslock {
    manager: rslock::LockManager,
    budget: Budget,
}

impl Rslock {
    fn connect(urls: &[String], budget: Budget) -> Result<Rslock, String> {
        // `LockManager::new` unwraps `Client::open`; check the URLs first so that a bad one is
        // an error here and not a panic inside the peer.
        let mut clients = Vec::with_capacity(urls.len());
        for url in urls {
            clients.push(redis::Client::open(url.as_str()).map_err(|e| e.to_string())?);
        }
        Ok(Rslock {
            manager: rslock::LockManager::from_clients(clients),
            budget,
        })
    }

    /// A manager for the watchdog scenario (`LockManager::using`).
    pub(crate) fn manager(url: &str) -> Result<rslock::LockManager, String> {
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        Ok(rslock::LockManager::from_clients(vec![client]))
    }
}

impl Locker for Rslock {
    type Guard = rslock::Lock;

    async fn acquire(&self, key: &str) -> Result<rslock::Lock, AcqError> {
        // rslock's `acquire` calls `lock()` until it succeeds, forever. This is the same loop,
        // stopped once the wait budget is spent.
        let started = Instant::now();
        loop {
            match self.manager.lock(key.as_bytes(), self.budget.ttl).await {
                Ok(lock) => return Ok(lock),
                Err(rslock::LockError::Unavailable) => {
                    if started.elapsed() >= self.budget.wait {
                        return Err(AcqError::Timeout);
                    }
                }
                Err(other) => return Err(AcqError::Failed(other.to_string())),
            }
        }
    }

    async fn release(&self, guard: rslock::Lock) -> Result<(), String> {
        // Best effort by design: rslock reports nothing.
        guard.release().await;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// async-redis-lock

pub(crate) struct Arl {
    locker: async_redis_lock::Locker,
    opts: async_redis_lock::Options,
}

impl Arl {
    async fn connect(urls: &[String], budget: Budget) -> Result<Arl, String> {
        let url = single_url(urls, "async-redis-lock")?;
        let locker = async_redis_lock::Locker::from_redis_url(&url)
            .await
            .map_err(|e| e.to_string())?;
        // Documented defaults (retry 100 ms, extend 1 s, operation timeout 1 s) but the
        // scenario's TTL and wait budget.
        let opts = async_redis_lock::Options::new()
            .timeout(Some(budget.wait))
            .ttl(budget.ttl);
        Ok(Arl { locker, opts })
    }

    /// A locker and options (ttl 3 s, extend 1 s: its defaults) for the watchdog scenario.
    pub(crate) async fn watchdog(
        url: &str,
        ttl: Duration,
    ) -> Result<(async_redis_lock::Locker, async_redis_lock::Options), String> {
        let locker = async_redis_lock::Locker::from_redis_url(url)
            .await
            .map_err(|e| e.to_string())?;
        Ok((locker, async_redis_lock::Options::new().ttl(ttl)))
    }
}

impl Locker for Arl {
    type Guard = async_redis_lock::Lock;

    async fn acquire(&self, key: &str) -> Result<async_redis_lock::Lock, AcqError> {
        self.locker
            .acquire_with_options(&self.opts, key)
            .await
            .map_err(|e| match e {
                async_redis_lock::Error::Timeout => AcqError::Timeout,
                other => AcqError::Failed(other.to_string()),
            })
    }

    async fn release(&self, guard: async_redis_lock::Lock) -> Result<(), String> {
        guard.release().await.map_err(|e| e.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// rlock

pub(crate) struct Rlock {
    rlock: rlock::async_lock::RLock,
    opts: rlock::AcquireOptions,
}

impl Rlock {
    async fn connect(urls: &[String], budget: Budget) -> Result<Rlock, String> {
        let url = single_url(urls, "rlock")?;
        let rlock = rlock::async_lock::RLock::new(url.as_str())
            .await
            .map_err(|e| e.to_string())?;
        // Documented defaults (retry 100 ms, automatic renewal at ttl/2) but the scenario's
        // TTL and wait budget.
        let opts = rlock::AcquireOptions::builder()
            .ttl(budget.ttl)
            .lock_timeout(Some(budget.wait))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Rlock { rlock, opts })
    }

    /// A manager and options (automatic renewal at ttl/2: the default) for the watchdog
    /// scenario.
    pub(crate) async fn watchdog(
        url: &str,
        ttl: Duration,
    ) -> Result<(rlock::async_lock::RLock, rlock::AcquireOptions), String> {
        let rlock = rlock::async_lock::RLock::new(url)
            .await
            .map_err(|e| e.to_string())?;
        let opts = rlock::AcquireOptions::builder()
            .ttl(ttl)
            .build()
            .map_err(|e| e.to_string())?;
        Ok((rlock, opts))
    }
}

impl Locker for Rlock {
    type Guard = rlock::async_lock::RLockGuard;

    async fn acquire(&self, key: &str) -> Result<rlock::async_lock::RLockGuard, AcqError> {
        self.rlock
            .acquire_mutex_with_options(key, self.opts.clone())
            .await
            .map_err(|e| match e {
                rlock::AcquireError::LockTimeout => AcqError::Timeout,
                other => AcqError::Failed(other.to_string()),
            })
    }

    async fn release(&self, mut guard: rlock::async_lock::RLockGuard) -> Result<(), String> {
        guard.release().await.map_err(|e| e.to_string())
    }
}
