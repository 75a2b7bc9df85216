//! B3: hand-off latency (see `benches/README.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, mpsc};

use crate::lockers::{self, AcqError, Impl, Kind, Locker};
use crate::scenarios::{BUDGET, Config, Cycles, Row, pings, start_server};
use crate::stats::Hist;

pub(crate) struct Handoffs {
    pub(crate) hist: Hist,
    pub(crate) timeouts: u64,
    pub(crate) errors: u64,
    pub(crate) first_error: Option<String>,
}

pub(crate) struct B3 {
    /// `PING` round trips on a raw TCP_NODELAY connection to the same server, on the same
    /// runtime, taken before each implementation's turn: each after an idle pause like the
    /// holds (the yardstick), and back to back.
    pub(crate) rtt_idle: Cycles,
    pub(crate) rtt_hot: Cycles,
    /// The least a pushed hand-off costs on this machine: see [`raw_handoffs`].
    pub(crate) raw_handoff: Result<Cycles, String>,
    pub(crate) rows: Vec<Row<Handoffs>>,
}

pub(crate) async fn b3(cfg: &Config, kinds: &[Kind]) -> Result<B3, String> {
    let server = start_server(cfg);
    let urls = [server.url()];
    let probe = lockers::nodelay_connection(&urls[0]).await?;
    let (mut rtt_idle, mut rtt_hot) = (Cycles::new(), Cycles::new());
    let raw_handoff = raw_handoffs(&urls[0], cfg).await;
    let mut rows = Vec::new();
    for &kind in kinds {
        rtt_hot.merge(pings(probe.clone(), Duration::from_millis(100), false).await);
        rtt_idle.merge(pings(probe.clone(), cfg.handoff_cell / 6, true).await);
        let cells = async {
            let a = lockers::connect(kind, &urls, BUDGET).await?;
            let b = lockers::connect(kind, &urls, BUDGET).await?;
            Ok::<_, String>(match (&a, &b) {
                (Impl::Lockcore(a), Impl::Lockcore(b)) => ping_pong(a, b, cfg).await,
                (Impl::Rslock(a), Impl::Rslock(b)) => ping_pong(a, b, cfg).await,
                (Impl::AsyncRedisLock(a), Impl::AsyncRedisLock(b)) => ping_pong(a, b, cfg).await,
                (Impl::Rlock(a), Impl::Rlock(b)) => ping_pong(a, b, cfg).await,
                _ => return Err("no hand-off for this implementation".to_owned()),
            })
        }
        .await;
        rows.push(Row { kind, cells });
    }
    drop(server);
    Ok(B3 {
        rtt_idle,
        rtt_hot,
        raw_handoff,
        rows,
    })
}

/// The pushed hand-off floor, in raw redis-rs: the holder's release is one script that deletes
/// the key, sets it to the waiter's token and `PUBLISH`es that token; the waiter, subscribed on
/// its own connection, runs one claim script (compare, `PEXPIRE`, `INCR`) when the message
/// arrives. No queue, no bookkeeping: one waiter, known in advance. A sample is the time from
/// the release call to the claim's reply, after an idle pause like B3's holds.
async fn raw_handoffs(url: &str, cfg: &Config) -> Result<Cycles, String> {
    use futures_util::StreamExt;
    let release = redis::Script::new(lockcore_tests::lua::RAW_HAND_OVER);
    let claim = redis::Script::new(lockcore_tests::lua::RAW_CLAIM);
    let client = lockers::nodelay_client(url)?;
    let mut holder = lockers::nodelay_connection(url).await?;
    let mut waiter = lockers::nodelay_connection(url).await?;
    let channel = format!("b3:raw:{}", uuid::Uuid::new_v4().simple());
    let mut pubsub = client.get_async_pubsub().await.map_err(|e| e.to_string())?;
    pubsub
        .subscribe(&channel)
        .await
        .map_err(|e| e.to_string())?;
    let mut messages = pubsub.into_on_message();
    for script in [&release, &claim] {
        script
            .prepare_invoke()
            .load_async(&mut holder)
            .await
            .map_err(|e| e.to_string())?;
    }
    let mut c = Cycles::new();
    let start = Instant::now();
    while start.elapsed() < cfg.handoff_cell && c.ops < cfg.handoff_max as u64 {
        tokio::time::sleep(Duration::from_micros(fastrand::u64(2_000..=10_000))).await;
        let mut invocation = release.key("b3:raw");
        invocation.arg("waiter").arg(&channel);
        let t0 = Instant::now();
        let released = invocation.invoke_async::<i64>(&mut holder);
        let claimed = async {
            if messages.next().await.is_none() {
                return Err("subscription closed".to_owned());
            }
            let fence = claim
                .key("b3:raw")
                .key("b3:raw:fence")
                .arg("waiter")
                .invoke_async::<i64>(&mut waiter)
                .await
                .map_err(|e| e.to_string())?;
            if fence > 0 {
                Ok(t0.elapsed())
            } else {
                Err("claim found another token".to_owned())
            }
        };
        match tokio::time::timeout(Duration::from_secs(1), async {
            tokio::join!(released, claimed)
        })
        .await
        {
            Ok((Ok(_), Ok(took))) => {
                c.hist.record(took);
                c.ops += 1;
            }
            Ok((Err(e), _)) => {
                c.errors += 1;
                c.first_error.get_or_insert(e.to_string());
            }
            Ok((_, Err(e))) => {
                c.errors += 1;
                c.first_error.get_or_insert(e);
            }
            Err(_) => return Err("raw hand-off: no wake-up within 1 s".to_owned()),
        }
    }
    c.elapsed = start.elapsed();
    Ok(c)
}

/// Two contenders with their own managers take turns on one key. The holder tells the other
/// that it holds the lock, so the other calls acquire and waits; the holder keeps it 2-10 ms
/// (uniform), notes the time, and calls release. A sample is the time from that note to the
/// waiter's acquire returning. The releaser does not contend again until the waiter holds the
/// lock, so every sample is a hand-off to the other contender.
pub(crate) async fn ping_pong<L: Locker>(a: &Arc<L>, b: &Arc<L>, cfg: &Config) -> Handoffs {
    let key = format!("b3:{}", uuid::Uuid::new_v4().simple());
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let samples = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + cfg.handoff_cell;
    let (a_tx, a_rx) = mpsc::channel(1);
    let (b_tx, b_rx) = mpsc::channel(1);
    let first = tokio::spawn(participant(
        Arc::clone(a),
        key.clone(),
        true,
        b_tx,
        a_rx,
        Arc::clone(&released_at),
        Arc::clone(&samples),
        (deadline, cfg.handoff_max),
    ));
    let second = tokio::spawn(participant(
        Arc::clone(b),
        key,
        false,
        a_tx,
        b_rx,
        released_at,
        samples,
        (deadline, cfg.handoff_max),
    ));
    let mut out = Handoffs {
        hist: Hist::new(),
        timeouts: 0,
        errors: 0,
        first_error: None,
    };
    for h in [first, second] {
        match h.await {
            Ok(p) => {
                out.hist.add(&p.hist);
                out.timeouts += p.timeouts;
                out.errors += p.errors;
                if out.first_error.is_none() {
                    out.first_error = p.first_error;
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert(format!("task failed: {e}"));
            }
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
async fn participant<L: Locker>(
    locker: Arc<L>,
    key: String,
    first: bool,
    tell_other: mpsc::Sender<()>,
    mut other_holds: mpsc::Receiver<()>,
    released_at: Arc<Mutex<Option<Instant>>>,
    samples: Arc<AtomicUsize>,
    (deadline, max): (Instant, usize),
) -> Handoffs {
    let mut out = Handoffs {
        hist: Hist::new(),
        timeouts: 0,
        errors: 0,
        first_error: None,
    };
    if !first && other_holds.recv().await.is_none() {
        return out;
    }
    loop {
        let guard = match locker.acquire(&key).await {
            Ok(g) => g,
            Err(AcqError::Timeout) => {
                out.timeouts += 1;
                return out;
            }
            Err(AcqError::Failed(e)) => {
                out.errors += 1;
                out.first_error = Some(e);
                return out;
            }
        };
        let acquired = Instant::now();
        if let Some(t0) = released_at.lock().await.take() {
            out.hist.record(acquired - t0);
            samples.fetch_add(1, Ordering::Relaxed);
        }
        let done = Instant::now() >= deadline || samples.load(Ordering::Relaxed) >= max;
        if !done && tell_other.send(()).await.is_err() {
            // The other one has stopped.
            let _ = locker.release(guard).await;
            return out;
        }
        tokio::time::sleep(Duration::from_micros(fastrand::u64(2_000..=10_000))).await;
        if !done {
            *released_at.lock().await = Some(Instant::now());
        }
        if let Err(e) = locker.release(guard).await {
            out.errors += 1;
            out.first_error.get_or_insert(format!("release: {e}"));
        }
        if done || other_holds.recv().await.is_none() {
            return out;
        }
    }
}
