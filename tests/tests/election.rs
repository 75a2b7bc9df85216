//! Leader election: `LockManager::campaign`, `Leadership` and `LockManager::holder`. Terms
//! strictly increase across resign, crash (SIGKILL) and pause (SIGSTOP past the TTL, then
//! SIGCONT) of a campaigning child process (`src/bin/campaigner.rs`); `lost()` completes within
//! one renewal interval once the key is taken; the take-over after a resign is one hand-off and
//! after a crash at most the TTL plus one re-check; `holder` reports the leader's metadata.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;
use std::time::{Duration, SystemTime};

use lockcore::{FencingCounter, LockError, LockManager, LockOptions};
use lockcore_tests::*;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

/// One re-check interval of a queued waiter (`handoff::refresh_delay`).
const RECHECK: Duration = Duration::from_millis(250);

/// The waiter queue list of a user key.
fn queue_key(key: &str) -> String {
    queue_of(&full(key)).0
}

/// Waits until one campaigner is queued for `key` (its first attempt found the key held).
async fn one_queued(server: &RedisServer, key: &str) {
    poll_reply_until(
        &mut server.connection().await,
        &cmd(&["LLEN", &queue_key(key)]),
        Duration::from_secs(2),
        "the standby to queue",
        |n| n == "1",
    )
    .await;
}

fn campaign_opts(ttl_ms: u64) -> LockOptions {
    LockOptions::new(Duration::from_millis(ttl_ms)).wait(Duration::MAX)
}

/// A campaigning child process and its report lines.
struct Campaigner {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Campaigner {
    fn spawn(server: &RedisServer, key: &str, ttl_ms: u64, label: &str) -> Campaigner {
        let mut child = Command::new(env!("CARGO_BIN_EXE_campaigner"))
            .args([&server.url(), key, &ttl_ms.to_string(), label])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the campaigner");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Campaigner { child, lines }
    }

    fn pid(&self) -> rustix::process::Pid {
        let pid = self.child.id().expect("running");
        rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid")
    }

    /// The next report line, within `within`.
    async fn line(&mut self, within: Duration) -> String {
        match tokio::time::timeout(within, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            other => panic!("no report from the campaigner within {within:?}: {other:?}"),
        }
    }

    /// Waits for `elected <term> <pid>`; returns the term.
    async fn elected(&mut self, within: Duration) -> u64 {
        let line = self.line(within).await;
        let term = line
            .strip_prefix("elected ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|term| term.parse().ok());
        term.unwrap_or_else(|| panic!("expected `elected <term> <pid>`, got {line:?}"))
    }

    fn signal(&self, signal: rustix::process::Signal) {
        rustix::process::kill_process(self.pid(), signal).expect("signal the campaigner");
    }
}

#[tokio::test]
async fn terms_strictly_increase_across_resign_and_the_take_over_is_one_hand_off() {
    let (_server, locks, _raw) = start_with_manager().await;
    let standby = manager(&_server).await;
    let first = locks
        .campaign("leader:a", &campaign_opts(5_000))
        .await
        .unwrap();
    assert!(first.is_leader());
    let mut terms = vec![first.term()];
    let mut leader = first;
    let mut take_overs = Vec::new();
    for round in 0..5 {
        let (next_locks, opts) = if round % 2 == 0 {
            (standby.clone(), campaign_opts(5_000))
        } else {
            (locks.clone(), campaign_opts(5_000))
        };
        let campaign = tokio::spawn(async move {
            let won = next_locks.campaign("leader:a", &opts).await.unwrap();
            (won, Instant::now())
        });
        // The standby queues as a waiter: its first attempt finds the key held.
        one_queued(&_server, "leader:a").await;
        let resigned_at = Instant::now();
        leader.resign().await.unwrap();
        let (next, elected_at) = campaign.await.unwrap();
        take_overs.push(elected_at.saturating_duration_since(resigned_at));
        assert!(
            next.term() > *terms.last().unwrap(),
            "terms {terms:?} then {}",
            next.term()
        );
        terms.push(next.term());
        leader = next;
    }
    leader.resign().await.unwrap();
    let worst = take_overs.iter().max().copied().unwrap_or_default();
    eprintln!("take-over after resign: {take_overs:?} (terms {terms:?})");
    // One hand-off: the resign's own call grants the key and wakes the standby; no re-check.
    assert!(worst < RECHECK, "take-over after resign took {worst:?}");
}

#[tokio::test]
async fn a_crashed_leader_is_followed_within_the_ttl_and_one_re_check() {
    let server = RedisServer::start();
    let standby = manager(&server).await;
    let mut child = Campaigner::spawn(&server, "leader:crash", 1_000, "child");
    let crashed_term = child.elected(Duration::from_secs(10)).await;
    let campaign = tokio::spawn(async move {
        let won = standby
            .campaign("leader:crash", &campaign_opts(1_000))
            .await
            .unwrap();
        (won, Instant::now())
    });
    one_queued(&server, "leader:crash").await;
    let killed_at = Instant::now();
    child.signal(rustix::process::Signal::KILL);
    let (next, elected_at) = campaign.await.unwrap();
    let take_over = elected_at.saturating_duration_since(killed_at);
    eprintln!("take-over after SIGKILL (ttl 1 s): {take_over:?}");
    assert!(next.term() > crashed_term);
    assert!(
        take_over <= Duration::from_millis(1_000) + RECHECK + Duration::from_millis(150),
        "take-over after a crash took {take_over:?}"
    );
    next.resign().await.unwrap();
}

#[tokio::test]
async fn a_leader_paused_past_its_ttl_is_deposed_and_learns_it_on_resume() {
    let server = RedisServer::start();
    let standby = manager(&server).await;
    let mut child = Campaigner::spawn(&server, "leader:pause", 1_000, "child");
    let paused_term = child.elected(Duration::from_secs(10)).await;
    child.signal(rustix::process::Signal::STOP);
    let stopped_at = Instant::now();
    let next = standby
        .campaign("leader:pause", &campaign_opts(1_000))
        .await
        .unwrap();
    let take_over = stopped_at.elapsed();
    eprintln!("take-over after SIGSTOP (ttl 1 s): {take_over:?}");
    assert!(
        next.term() > paused_term,
        "{} after {paused_term}",
        next.term()
    );
    assert!(take_over <= Duration::from_millis(1_000) + RECHECK + Duration::from_millis(150));
    child.signal(rustix::process::Signal::CONT);
    // Resumed, the old leader finds its lease's deadline passed: `lost()` completes at once.
    let line = child.line(Duration::from_millis(500)).await;
    assert_eq!(line, format!("lost {paused_term} leader=false"));
    assert!(next.is_leader());
    let holder = standby.holder("leader:pause").await.unwrap().expect("led");
    assert_eq!(holder.pid, std::process::id());
    next.resign().await.unwrap();
}

/// The naive twin of the pause test: a "leader" that checks a plain key once and then believes
/// it leads (no lease, no term) still believes it after a pause in which another took over.
#[tokio::test]
async fn without_a_lease_a_paused_leader_keeps_believing() {
    let (_server, _locks, mut raw) = start_with_manager().await;
    let won: bool = redis::cmd("SET")
        .arg("naive:leader")
        .arg("old")
        .arg("NX")
        .arg("PX")
        .arg(300)
        .query_async::<Option<String>>(&mut raw)
        .await
        .unwrap()
        .is_some();
    let believes_it_leads = won;
    tokio::time::sleep(Duration::from_millis(400)).await; // the pause, past the ttl
    let other: Option<String> = redis::cmd("SET")
        .arg("naive:leader")
        .arg("new")
        .arg("NX")
        .arg("PX")
        .arg(300)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(other.is_some(), "another process took over");
    assert!(believes_it_leads, "two processes believe they lead");
}

#[tokio::test]
async fn lost_completes_within_one_renewal_interval_after_the_key_is_taken() {
    let (server, locks, mut raw) = start_with_manager().await;
    let ttl = Duration::from_millis(1_500);
    let renewal_interval = ttl / 3;
    for how in ["DEL", "force_release"] {
        let leadership = locks
            .campaign("leader:taken", &campaign_opts(1_500))
            .await
            .unwrap();
        let key = full("leader:taken");
        let taken_at = Instant::now();
        match how {
            "DEL" => del(&mut raw, &key).await,
            _ => {
                let value = get(&mut raw, &key).await.expect("held");
                let outcome =
                    lockcore::admin::force_release(&mut raw, "lock:", &key, value.as_bytes())
                        .await
                        .unwrap();
                assert_eq!(outcome, lockcore::admin::ForceRelease::Released);
            }
        }
        let other = manager(&server).await;
        let usurper = other
            .try_acquire("leader:taken", &LockOptions::new(ttl))
            .await
            .unwrap();
        assert!(usurper.is_some(), "the key was free to take");
        tokio::time::timeout(
            renewal_interval + Duration::from_millis(200),
            leadership.lost(),
        )
        .await
        .unwrap_or_else(|_| panic!("lost() did not complete after {how}"));
        eprintln!("lost() after {how}: {:?}", taken_at.elapsed());
        assert!(!leadership.is_leader());
        assert!(matches!(
            leadership.resign().await,
            Err(LockError::Lost { .. })
        ));
        drop(usurper);
        assert_gone_within(&mut raw, &key, Duration::from_secs(1)).await;
    }
}

#[tokio::test]
async fn holder_reports_the_leaders_metadata_and_none_when_free() {
    let server = RedisServer::start();
    let locks = manager_with(&server, |b| b.process_label("blue")).await;
    assert_eq!(locks.holder("leader:who").await.unwrap(), None);
    let before = SystemTime::now() - Duration::from_secs(1);
    let leadership = locks
        .campaign("leader:who", &campaign_opts(5_000))
        .await
        .unwrap();
    let holder = locks.holder("leader:who").await.unwrap().expect("led");
    assert_eq!(holder.pid(), std::process::id());
    assert_eq!(holder.label(), Some("blue"));
    assert!(!holder.host().is_empty());
    assert_eq!(holder.token(), leadership.guard().token());
    assert!(
        holder.since() >= before && holder.since() <= SystemTime::now() + Duration::from_secs(1)
    );
    assert!(
        holder
            .expires_in()
            .is_some_and(|ttl| ttl <= Duration::from_secs(5))
    );
    // A child leads: its pid and label.
    leadership.resign().await.unwrap();
    let mut child = Campaigner::spawn(&server, "leader:who", 5_000, "green");
    child.elected(Duration::from_secs(10)).await;
    let holder = locks
        .holder("leader:who")
        .await
        .unwrap()
        .expect("led by the child");
    assert_eq!(Some(holder.pid), child.child.id());
    assert_eq!(holder.label.as_deref(), Some("green"));
    let stdin = child.child.stdin.as_mut().expect("stdin");
    stdin.write_all(b"resign\n").await.unwrap();
    let line = child.line(Duration::from_secs(2)).await;
    assert!(line.starts_with("resigned "), "{line}");
    assert_eq!(locks.holder("leader:who").await.unwrap(), None);
    assert!(matches!(
        locks.holder("").await,
        Err(LockError::InvalidKey { .. })
    ));
}

#[tokio::test]
async fn a_campaign_needs_fencing_and_honours_its_wait_budget() {
    let server = RedisServer::start();
    let unfenced = manager_with(&server, |b| b.fencing_counter(FencingCounter::Off)).await;
    assert!(matches!(
        unfenced.campaign("leader:b", &campaign_opts(1_000)).await,
        Err(LockError::InvalidOptions { .. })
    ));
    let locks = manager(&server).await;
    let leader = locks
        .campaign("leader:b", &campaign_opts(5_000))
        .await
        .unwrap();
    let other = LockManager::connect(&server.url()).await.unwrap();
    let started = Instant::now();
    let opts = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_millis(300));
    assert!(matches!(
        other.campaign("leader:b", &opts).await,
        Err(LockError::Contended { .. })
    ));
    assert!(started.elapsed() < Duration::from_secs(2));
    leader.resign().await.unwrap();
}

#[tokio::test]
async fn under_redlock_the_leader_is_the_token_on_a_quorum() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let build = |label: &'static str| {
        let urls = urls.clone();
        async move {
            LockManager::builder()
                .nodes(urls)
                .process_label(label)
                .build()
                .await
                .unwrap()
        }
    };
    let (a, b) = (build("a").await, build("b").await);
    let first = a
        .campaign("leader:rl", &campaign_opts(2_000))
        .await
        .unwrap();
    let holder = b.holder("leader:rl").await.unwrap().expect("led");
    assert_eq!(
        (holder.label(), holder.token()),
        (Some("a"), first.guard().token())
    );
    let standby = tokio::spawn(async move {
        b.campaign("leader:rl", &campaign_opts(2_000))
            .await
            .unwrap()
    });
    tokio::time::sleep(Duration::from_millis(100)).await; // the standby polls meanwhile
    let term = first.term();
    first.resign().await.unwrap();
    let next = standby.await.unwrap();
    assert!(next.term() > term);
    // A token on one node of three is not a leader.
    next.resign().await.unwrap();
    let mut raw = servers[0].connection().await;
    set_px(&mut raw, &full("leader:rl"), "t {\"pid\":1}", 5_000).await;
    assert_eq!(a.holder("leader:rl").await.unwrap(), None);
}
