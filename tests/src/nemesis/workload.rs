//! One worker process: several tasks that lock random keys (hot and cold) through the public
//! API and through the attribute, and inside the lock increment the key's Redis counter and
//! SQLite row; every step goes to this process's history. The control (`control = true`) runs
//! the same loop with a naive lock: `SET NX PX`, plain `DEL` release, no fencing.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockcore::{LockError, LockManager, LockOptions};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};

use super::BoxError;
use super::naive;
use super::resources::{self, Outcome, Seen};
use crate::history::{Event, Fun, HistoryWriter, OpId, Phase, instant_ns, now_ns};

/// The lease of every lock the workload takes, in ms (the attribute's `ttl_ms` literal too).
pub const TTL_MS: u64 = 800;
/// The wait budget of every acquire, in ms (the attribute's `wait_ms` literal too).
pub const WAIT_MS: u64 = 1_500;
/// The lock keys, the first ones hot: `pick_key` takes `hot` half of the time.
pub const KEYS: [&str; 5] = ["hot", "warm", "cold:1", "cold:2", "cold:3"];
/// The lock key prefix of the run.
pub const PREFIX: &str = "nemesis:";

/// What one worker process is told (as JSON on its command line).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// The worker's number.
    pub process: u32,
    /// How many times this worker was restarted before.
    pub incarnation: u32,
    /// The Redis URL (a fault proxy in front of the server).
    pub url: String,
    /// Tasks in the process.
    pub tasks: u32,
    /// Stop starting operations at this [`now_ns`].
    pub until_ns: u64,
    /// This incarnation's history file.
    pub history: PathBuf,
    /// The shared SQLite file.
    pub db: PathBuf,
    /// Run the naive lock instead of lockcore.
    pub control: bool,
    /// Seed of this incarnation's random choices.
    pub seed: u64,
}

/// What every task of the process shares.
struct Ctx {
    spec: WorkerSpec,
    locks: LockManager,
    redis: ConnectionManager,
    history: HistoryWriter,
}

/// The error of the attribute-wrapped operation.
#[derive(Debug)]
pub struct WorkError(LockError);

impl From<LockError> for WorkError {
    fn from(e: LockError) -> Self {
        WorkError(e)
    }
}

/// Runs a worker to the end of its spec.
///
/// # Errors
/// When the history cannot be created, or Redis cannot be reached for 10 s at start.
pub fn worker_main(spec: WorkerSpec) -> Result<(), BoxError> {
    super::runtime()?.block_on(run_tasks(spec))
}

async fn connect(spec: &WorkerSpec) -> Result<(LockManager, ConnectionManager), BoxError> {
    let mut last = String::new();
    // Bounded: the server may be paused or restarting when a worker (re)starts.
    for _ in 0..40 {
        let locks = LockManager::builder()
            .url(spec.url.clone())
            .key_prefix(PREFIX)
            .response_timeout(Duration::from_millis(400))
            .connection_timeout(Duration::from_millis(500))
            .build()
            .await;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_millis(400)))
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_number_of_retries(2);
        let redis = match redis::Client::open(spec.url.as_str()) {
            Ok(client) => ConnectionManager::new_with_config(client, config).await,
            Err(e) => Err(e),
        };
        match (locks, redis) {
            (Ok(locks), Ok(redis)) => return Ok((locks, redis)),
            (locks, redis) => {
                last = format!("{:?} / {:?}", locks.err(), redis.err());
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    Err(format!("worker {}: cannot reach {}: {last}", spec.process, spec.url).into())
}

async fn run_tasks(spec: WorkerSpec) -> Result<(), BoxError> {
    let history = HistoryWriter::create(&spec.history)?;
    let (locks, redis) = connect(&spec).await?;
    let ctx = Arc::new(Ctx {
        spec,
        locks,
        redis,
        history,
    });
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..ctx.spec.tasks {
        let db = resources::open_db(&ctx.spec.db)?;
        let seed = ctx.spec.seed ^ (u64::from(task) << 32);
        tasks.spawn(task_loop(Arc::clone(&ctx), task, Mutex::new(db), seed));
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// One task: operations until the spec's end, a few of them dropped mid-flight.
async fn task_loop(ctx: Arc<Ctx>, task: u32, db: Mutex<Connection>, seed: u64) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut op = 0_u64;
    // Bounded by the end time, and by a count far above what the time allows.
    while now_ns() < ctx.spec.until_ns && op < 1_000_000 {
        op += 1;
        let key = pick_key(&mut rng);
        let record = Op {
            ctx: Arc::clone(&ctx),
            id: OpId {
                process: ctx.spec.process,
                incarnation: ctx.spec.incarnation,
                task,
                op,
            },
            key: key.to_owned(),
            long_body: rng.u32(..100) < 3,
            pause_us: rng.u64(..3_000),
            held: AtomicBool::new(false),
            released: AtomicBool::new(false),
        };
        let attribute = rng.bool();
        let run = async {
            if ctx.spec.control {
                naive::naive_op(&record, &db).await;
            } else if attribute {
                let _ = attribute_op(&record, key, &db).await;
                record.attribute_done();
            } else {
                api_op(&record, &db).await;
            }
        };
        if rng.u32(..100) < 3 {
            // A dropped future: the operation is cut at a random `.await`.
            let cut = Duration::from_micros(rng.u64(200..15_000));
            let _ = tokio::time::timeout(cut, run).await;
        } else {
            run.await;
        }
        drop(record);
        tokio::time::sleep(Duration::from_millis(rng.u64(..10))).await;
    }
}

fn pick_key(rng: &mut fastrand::Rng) -> &'static str {
    match rng.u32(..100) {
        0..50 => KEYS[0],
        50..75 => KEYS[1],
        n => KEYS[2 + (n as usize % 3)],
    }
}

/// One operation's record keeper: it writes the steps, and when it is dropped while its lease
/// is held (a dropped future), it writes the release that the guard's `Drop` starts.
pub(super) struct Op {
    ctx: Arc<Ctx>,
    id: OpId,
    key: String,
    /// Sleep past the TTL between the claims and the writes (3 % of the operations).
    long_body: bool,
    pause_us: u64,
    held: AtomicBool,
    released: AtomicBool,
}

impl Op {
    pub(super) fn record(&self, fun: Fun, phase: Phase, fill: impl FnOnce(&mut Event)) {
        let mut event = Event::now(self.id, &self.key, fun, phase);
        fill(&mut event);
        self.ctx.history.record(&event);
    }

    pub(super) fn key(&self) -> &str {
        &self.key
    }

    pub(super) fn redis(&self) -> ConnectionManager {
        self.ctx.redis.clone()
    }

    pub(super) fn full_key(&self) -> String {
        format!("{PREFIX}{}", self.key)
    }

    /// The acquire returned a lease.
    pub(super) fn acquired(&self, token: &str, fencing_token: u64, deadline_ns: u64) {
        self.held.store(true, Ordering::SeqCst);
        self.record(Fun::Acquire, Phase::Ok, |e| {
            e.token = Some(token.to_owned());
            e.fencing_token = Some(fencing_token);
            e.deadline_ns = Some(deadline_ns);
        });
    }

    /// The holder is done with the lease (before the release is sent).
    pub(super) fn release_invoke(&self) {
        self.released.store(true, Ordering::SeqCst);
        self.record(Fun::Release, Phase::Invoke, |_| {});
    }

    fn attribute_done(&self) {
        if self.released.load(Ordering::SeqCst) {
            self.record(Fun::Release, Phase::Ok, |e| {
                e.note = Some("attribute".into())
            });
        }
    }

    /// Increments the counter and the row under `fencing_token` (or plainly in the control).
    pub(super) async fn body(&self, db: &Mutex<Connection>, fencing_token: u64, fenced: bool) {
        let mut redis = self.redis();
        let read = self
            .step(Fun::Claim, "counter", fencing_token, None, async {
                if fenced {
                    resources::claim_counter(&mut redis, &self.key, fencing_token).await
                } else {
                    resources::read_counter_plain(&mut redis, &self.key).await
                }
            })
            .await;
        if let Some(seen) = read {
            self.pause().await;
            let v = seen.count;
            let _ = self
                .step(Fun::Write, "counter", fencing_token, Some(seen), async {
                    let written = if fenced {
                        resources::write_counter(&mut redis, &self.key, fencing_token, v + 1).await
                    } else {
                        resources::write_counter_plain(&mut redis, &self.key, fencing_token, v + 1)
                            .await
                    };
                    written.map(|()| wrote(v, fencing_token))
                })
                .await;
        }
        let with_db = |f: &dyn Fn(&Connection) -> Outcome<Seen>| {
            tokio::task::block_in_place(|| match db.lock() {
                Ok(db) => f(&db),
                Err(_) => Outcome::Fail("sqlite connection poisoned".into()),
            })
        };
        let read = self
            .step(Fun::Claim, "row", fencing_token, None, async {
                with_db(&|db| {
                    if fenced {
                        resources::claim_row(db, &self.key, fencing_token)
                    } else {
                        resources::read_row(db, &self.key)
                    }
                })
            })
            .await;
        if let Some(seen) = read {
            tokio::time::sleep(Duration::from_micros(self.pause_us)).await;
            let v = seen.count;
            let _ = self
                .step(Fun::Write, "row", fencing_token, Some(seen), async {
                    with_db(&|db| {
                        let written = if fenced {
                            resources::write_row(db, &self.key, fencing_token, v + 1)
                        } else {
                            resources::write_row_plain(db, &self.key, fencing_token, v + 1)
                        };
                        written.map(|()| wrote(v, fencing_token))
                    })
                })
                .await;
        }
    }

    /// The pause between the counter's claim and its write: a few ms, or past the TTL.
    async fn pause(&self) {
        let pause = if self.long_body {
            Duration::from_millis(TTL_MS + TTL_MS / 4)
        } else {
            Duration::from_micros(self.pause_us)
        };
        tokio::time::sleep(pause).await;
    }

    /// Records a claim or write around `run` (a write names the value it read); returns the
    /// value read or written on `ok`.
    async fn step(
        &self,
        fun: Fun,
        resource: &str,
        fencing_token: u64,
        read: Option<Seen>,
        run: impl Future<Output = Outcome<Seen>>,
    ) -> Option<Seen> {
        let fill = |e: &mut Event| {
            e.resource = Some(resource.to_owned());
            e.fencing_token = Some(fencing_token);
            if let Some(seen) = read {
                e.read = Some(seen.count);
                e.writer = Some(seen.writer);
                e.value = Some(seen.count + 1);
            }
        };
        self.record(fun, Phase::Invoke, fill);
        match run.await {
            Outcome::Ok(v) => {
                self.record(fun, Phase::Ok, |e| {
                    fill(e);
                    if fun == Fun::Claim {
                        e.read = Some(v.count);
                        e.writer = Some(v.writer);
                    }
                });
                Some(v)
            }
            Outcome::Fail(why) => {
                self.record(fun, Phase::Fail, |e| {
                    fill(e);
                    e.note = Some(why);
                });
                None
            }
            Outcome::Unknown(why) => {
                self.record(fun, Phase::Unknown, |e| {
                    fill(e);
                    e.note = Some(why);
                });
                None
            }
        }
    }
}

/// What a write of `read + 1` by `token` stores.
fn wrote(read: i64, token: u64) -> Seen {
    Seen {
        count: read + 1,
        writer: token,
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        if self.held.load(Ordering::SeqCst) && !self.released.load(Ordering::SeqCst) {
            self.record(Fun::Release, Phase::Invoke, |e| {
                e.note = Some("dropped".into())
            });
        }
    }
}

fn options() -> LockOptions {
    LockOptions::new(Duration::from_millis(TTL_MS)).wait(Duration::from_millis(WAIT_MS))
}

/// The explicit API: `acquire`, the body, `release`.
async fn api_op(op: &Op, db: &Mutex<Connection>) {
    op.record(Fun::Acquire, Phase::Invoke, |_| {});
    let guard = match op.ctx.locks.acquire(op.key(), &options()).await {
        Ok(guard) => guard,
        Err(e) => {
            op.record(Fun::Acquire, Phase::Fail, |ev| {
                ev.note = Some(e.to_string())
            });
            return;
        }
    };
    op.acquired(
        guard.token(),
        guard.fencing_token(),
        instant_ns(guard.deadline()),
    );
    op.body(db, guard.fencing_token(), true).await;
    op.release_invoke();
    match guard.release().await {
        Ok(()) => op.record(Fun::Release, Phase::Ok, |_| {}),
        Err(e) if e.is_lost() => op.record(Fun::Release, Phase::Fail, |ev| {
            ev.note = Some(e.to_string());
        }),
        Err(e) => op.record(Fun::Release, Phase::Unknown, |ev| {
            ev.note = Some(e.to_string());
        }),
    }
}

/// The attribute: the wrapper acquires and releases, the body records what it sees. Its
/// `ttl_ms` and `wait_ms` literals are [`TTL_MS`] and [`WAIT_MS`].
#[lockcore::distributed_lock(
    key = "<key>",
    ttl_ms = 800,
    wait_ms = 1500,
    manager = op.ctx.locks,
    watchdog = false,
    guard = lease
)]
async fn attribute_body(op: &Op, key: &str, db: &Mutex<Connection>) -> Result<(), WorkError> {
    op.acquired(
        lease.token(),
        lease.fencing_token(),
        instant_ns(lease.deadline()),
    );
    op.body(db, lease.fencing_token(), true).await;
    op.release_invoke();
    Ok(())
}

async fn attribute_op(op: &Op, key: &str, db: &Mutex<Connection>) -> Result<(), WorkError> {
    op.record(Fun::Acquire, Phase::Invoke, |e| {
        e.note = Some("attribute".into())
    });
    let result = attribute_body(op, key, db).await;
    if let Err(WorkError(e)) = &result
        && !op.held.load(Ordering::SeqCst)
    {
        op.record(Fun::Acquire, Phase::Fail, |ev| {
            ev.note = Some(e.to_string())
        });
    }
    result
}
