//! The nemesis's faults: each one applied, held for a bounded time, and healed before the next
//! one starts. The schedule draws them from a shuffled deck (seeded), so that every kind comes
//! up once before any comes up twice.

use std::time::Duration;

use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use super::BoxError;
use super::fleet::{Fleet, Network, signal};
use super::netns;
use super::workload::TTL_MS;
use crate::Direction;
use crate::history::now_ns;

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// `SIGSTOP` a worker that holds a lease (as its history tells) past the TTL, then
    /// `SIGCONT`.
    HolderPause,
    /// `SIGSTOP` the server for less than the TTL.
    ServerPauseShort,
    /// `SIGSTOP` the server for more than the TTL.
    ServerPauseLong,
    /// `CLIENT PAUSE .. WRITE`.
    ClientPauseWrite,
    /// `CLIENT KILL` of random clients and of the pub/sub clients.
    ClientKill,
    /// The next `EVALSHA` reply of two workers is lost (an ambiguous acquire, write or release).
    ReplyLoss,
    /// Replies (and requests) delayed through the proxies.
    Latency,
    /// `SCRIPT FLUSH`.
    ScriptFlush,
    /// `SIGKILL` the server and start it again on its data (AOF, unless the run has none).
    Restart,
    /// One worker cut off from the server (veth down, or its proxy blackholed).
    Partition,
    /// `SIGKILL` a worker (mid-body, most likely) and start a new one in its place.
    KillWorker,
}

impl FaultKind {
    /// Every kind, in the deck's order before shuffling.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::HolderPause,
        FaultKind::ServerPauseShort,
        FaultKind::ServerPauseLong,
        FaultKind::ClientPauseWrite,
        FaultKind::ClientKill,
        FaultKind::ReplyLoss,
        FaultKind::Latency,
        FaultKind::ScriptFlush,
        FaultKind::Restart,
        FaultKind::Partition,
        FaultKind::KillWorker,
    ];

    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::HolderPause => "holder-pause",
            FaultKind::ServerPauseShort => "server-pause-short",
            FaultKind::ServerPauseLong => "server-pause-long",
            FaultKind::ClientPauseWrite => "client-pause-write",
            FaultKind::ClientKill => "client-kill",
            FaultKind::ReplyLoss => "reply-loss",
            FaultKind::Latency => "latency",
            FaultKind::ScriptFlush => "script-flush",
            FaultKind::Restart => "restart",
            FaultKind::Partition => "partition",
            FaultKind::KillWorker => "kill-worker",
        }
    }
}

/// One fault as it happened.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRecord {
    /// What.
    pub kind: FaultKind,
    /// On whom, in words.
    pub target: String,
    /// When it started ([`now_ns`]).
    pub start_ns: u64,
    /// When it was healed.
    pub heal_ns: u64,
}

/// Draws kinds from a shuffled deck of `kinds`.
#[derive(Debug)]
pub struct Deck {
    kinds: Vec<FaultKind>,
    left: Vec<FaultKind>,
}

impl Deck {
    /// A deck of `kinds` (every kind when empty).
    pub fn new(kinds: &[FaultKind]) -> Deck {
        let kinds = if kinds.is_empty() {
            FaultKind::ALL.to_vec()
        } else {
            kinds.to_vec()
        };
        Deck {
            kinds,
            left: Vec::new(),
        }
    }

    /// The next kind.
    pub fn draw(&mut self, rng: &mut fastrand::Rng) -> FaultKind {
        if self.left.is_empty() {
            self.left = self.kinds.clone();
            rng.shuffle(&mut self.left);
        }
        self.left.pop().unwrap_or(FaultKind::ScriptFlush)
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Applies `kind`, holds it, heals it; returns what happened.
///
/// # Errors
/// When a fault cannot be applied or healed (a command to the server failed after its heal,
/// a worker could not be restarted).
pub async fn apply(
    fleet: &mut Fleet,
    kind: FaultKind,
    rng: &mut fastrand::Rng,
) -> Result<FaultRecord, BoxError> {
    let start_ns = now_ns();
    let workers = fleet.workers.len().max(1);
    let victim = rng.usize(..workers);
    let mut target = format!("worker {victim}");
    match kind {
        FaultKind::HolderPause => {
            let holders = fleet.holders();
            let victim = if holders.is_empty() {
                victim
            } else {
                holders[rng.usize(..holders.len())]
            };
            target = format!(
                "worker {victim}{}",
                if holders.contains(&victim) {
                    " (holding a lease)"
                } else {
                    ""
                }
            );
            if let Some(pid) = fleet.workers.get(victim).and_then(|w| w.pid()) {
                signal(pid, Signal::STOP);
                tokio::time::sleep(ms(TTL_MS + 400)).await;
                signal(pid, Signal::CONT);
            }
        }
        FaultKind::ServerPauseShort | FaultKind::ServerPauseLong => {
            let hold = if kind == FaultKind::ServerPauseShort {
                ms(TTL_MS * 3 / 8)
            } else {
                ms(TTL_MS + 500)
            };
            target = format!("server for {} ms", hold.as_millis());
            let pid = fleet
                .server
                .pid()
                .and_then(|p| rustix::process::Pid::from_raw(i32::try_from(p).ok()?));
            if let Some(pid) = pid {
                signal(pid, Signal::STOP);
                tokio::time::sleep(hold).await;
                signal(pid, Signal::CONT);
            }
        }
        FaultKind::ClientPauseWrite => {
            target = "all clients, 600 ms".into();
            let _: () = fleet
                .control(redis::cmd("CLIENT").arg("PAUSE").arg(600).arg("WRITE"))
                .await?;
            tokio::time::sleep(ms(600)).await;
            let _: () = fleet.control(redis::cmd("CLIENT").arg("UNPAUSE")).await?;
        }
        FaultKind::ClientKill => {
            target = client_kill(fleet, rng).await?;
        }
        FaultKind::ReplyLoss => {
            let other = (victim + 1 + rng.usize(..workers.saturating_sub(1).max(1))) % workers;
            target = format!("workers {victim} and {other}");
            for i in [victim, other] {
                if let Some(proxy) = fleet.proxies.get(i) {
                    proxy.drop_reply_to("EVALSHA");
                }
            }
            tokio::time::sleep(ms(1_000)).await;
            for proxy in &fleet.proxies {
                proxy.heal();
            }
        }
        FaultKind::Latency => {
            target = "all workers, 150 ms replies + 50 ms requests".into();
            for proxy in &fleet.proxies {
                proxy.set_latency(Direction::Replies, ms(150));
                proxy.set_latency(Direction::Requests, ms(50));
            }
            tokio::time::sleep(ms(1_200)).await;
            for proxy in &fleet.proxies {
                proxy.heal();
            }
        }
        FaultKind::ScriptFlush => {
            target = "server".into();
            let _: () = fleet.control(redis::cmd("SCRIPT").arg("FLUSH")).await?;
        }
        FaultKind::Restart => {
            target = "server".into();
            let server = &mut fleet.server;
            tokio::task::block_in_place(|| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.restart()))
            })
            .map_err(|_| "redis-server did not restart (see the message above)")?;
        }
        FaultKind::Partition => {
            let hold = ms(TTL_MS * 2);
            match &fleet.network {
                Network::Namespaces(prefix) => {
                    let link = netns::server_link(prefix, victim as u32);
                    target = format!("worker {victim} (veth {link} down)");
                    netns::set_link(&link, false)?;
                    tokio::time::sleep(hold).await;
                    netns::set_link(&link, true)?;
                }
                Network::Loopback => {
                    target = format!("worker {victim} (proxy blackhole)");
                    if let Some(proxy) = fleet.proxies.get(victim) {
                        proxy.set_blackhole(true);
                        tokio::time::sleep(hold).await;
                        proxy.set_blackhole(false);
                    }
                }
            }
        }
        FaultKind::KillWorker => {
            fleet.kill(victim).await;
            tokio::time::sleep(ms(200)).await;
            fleet.respawn(victim, rng.u64(..))?;
        }
    }
    Ok(FaultRecord {
        kind,
        target,
        start_ns,
        heal_ns: now_ns(),
    })
}

/// Kills up to three random clients and every pub/sub client (never the control connection).
async fn client_kill(fleet: &mut Fleet, rng: &mut fastrand::Rng) -> Result<String, BoxError> {
    let own: i64 = fleet.control(redis::cmd("CLIENT").arg("ID")).await?;
    let list: String = fleet.control(redis::cmd("CLIENT").arg("LIST")).await?;
    let mut ids: Vec<i64> = list
        .lines()
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .filter(|id| *id != own)
        .collect();
    rng.shuffle(&mut ids);
    let mut killed = 0;
    for id in ids.iter().take(3) {
        let n: i64 = fleet
            .control(redis::cmd("CLIENT").arg("KILL").arg("ID").arg(*id))
            .await
            .unwrap_or(0);
        killed += n;
    }
    let pubsub: i64 = fleet
        .control(redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub"))
        .await
        .unwrap_or(0);
    Ok(format!("{killed} clients + {pubsub} pub/sub"))
}
