//! B6: what `wait_for_replicas` costs on a primary with one replica, and the hand-off and the
//! acquire+release on a 3+3 Redis Cluster against a single node.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockcore::{LockManager, LockManagerBuilder};
use lockcore_tests::RedisCluster;

use crate::b3::{Handoffs, ping_pong};
use crate::lockers::{self, Lockcore};
use crate::scenarios::{BUDGET, Config, Cycles, cycles, start_server};

/// Task counts of B6 (a).
pub(crate) const B6_TASKS: [usize; 2] = [1, 8];
/// The `wait_for_replicas` timeout of B6 (a).
pub(crate) const B6_WAIT_TIMEOUT: Duration = Duration::from_millis(100);

pub(crate) struct B6 {
    /// B6 (a): per manager (plain, then with `wait_for_replicas(1, 100 ms)`), its name and one
    /// `Cycles` per entry of [`B6_TASKS`].
    pub(crate) replicas: Result<Vec<(&'static str, Vec<Cycles>)>, String>,
    /// B6 (b): a single node, then the cluster.
    pub(crate) topologies: Vec<Topology>,
}

/// B6 (b): hand-offs (as in B3) and 1-task acquire+release cycles on one topology.
pub(crate) struct Topology {
    pub(crate) name: &'static str,
    pub(crate) result: Result<(Handoffs, Cycles), String>,
}

pub(crate) async fn b6(cfg: &Config) -> B6 {
    let replicas = replicated(cfg).await;
    let single = {
        let server = start_server(cfg);
        let url = server.url();
        topology(cfg, || LockManager::builder().url(&url)).await
    };
    let cluster = async {
        let cluster = std::panic::catch_unwind(RedisCluster::start)
            .map_err(|_| "the 3+3 cluster did not start (see stderr)".to_owned())?;
        if let Some(pin) = cfg.pin {
            for node in cluster.nodes() {
                if let Some(pid) = child_pid_by_port(node.port()) {
                    crate::pin::pin_pid(pid, pin.server_cpu);
                }
            }
        }
        let seeds = cluster.seed_urls();
        topology(cfg, || LockManager::builder().cluster(&seeds)).await
    }
    .await;
    B6 {
        replicas,
        topologies: vec![
            Topology {
                name: "single node",
                result: single,
            },
            Topology {
                name: "Redis Cluster, 3 primaries + 3 replicas",
                result: cluster,
            },
        ],
    }
}

/// A primary and a replica (`REPLICAOF`, link up), lockcore's default with and without
/// `wait_for_replicas(1, 100 ms)`, interleaved over the rounds.
async fn replicated(cfg: &Config) -> Result<Vec<(&'static str, Vec<Cycles>)>, String> {
    let primary = start_server(cfg);
    let replica = start_server(cfg);
    let mut conn = lockers::nodelay_connection(&replica.url()).await?;
    let () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(primary.port())
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("REPLICAOF: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await
            .map_err(|e| e.to_string())?;
        if info.lines().any(|l| l.trim() == "master_link_status:up") {
            break;
        }
        if Instant::now() >= deadline {
            return Err("the replica's link did not come up within 10 s".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = primary.url();
    let plain = Lockcore::build(LockManager::builder().url(&url), BUDGET, true).await?;
    let waiting = LockManager::builder()
        .url(&url)
        .wait_for_replicas(1, B6_WAIT_TIMEOUT);
    let waiting = Lockcore::build(waiting, BUDGET, true).await?;
    let managers = [
        ("lockcore (handoff, default)", Arc::new(plain)),
        (
            "lockcore (handoff, default) + `wait_for_replicas(1, 100 ms)`",
            Arc::new(waiting),
        ),
    ];
    for (name, l) in &managers {
        lockers::warm(&**l, name).await?;
    }
    let per_round = cfg.latency_cell / cfg.rounds;
    let mut acc = vec![vec![Cycles::new(); B6_TASKS.len()]; managers.len()];
    for (ti, &tasks) in B6_TASKS.iter().enumerate() {
        for round in 0..cfg.rounds {
            for (i, (_, l)) in managers.iter().enumerate() {
                let prefix = format!("b6:r:{i}:{ti}:{round}:");
                acc[i][ti].merge(cycles(Arc::clone(l), tasks, per_round, &prefix).await);
            }
        }
    }
    Ok(managers.iter().map(|(name, _)| *name).zip(acc).collect())
}

/// Two managers from `make` take turns on one key (B3's ping-pong); then one of them runs
/// acquire+release cycles with one task.
async fn topology(
    cfg: &Config,
    make: impl Fn() -> LockManagerBuilder,
) -> Result<(Handoffs, Cycles), String> {
    let a = Arc::new(Lockcore::build(make(), BUDGET, true).await?);
    let b = Arc::new(Lockcore::build(make(), BUDGET, true).await?);
    lockers::warm(&*a, "lockcore").await?;
    lockers::warm(&*b, "lockcore").await?;
    let handoffs = ping_pong(&a, &b, cfg).await;
    let c = cycles(a, 1, cfg.latency_cell, "b6:topology:").await;
    Ok((handoffs, c))
}

/// The pid of the redis-server child of this process that serves `port` (the cluster harness
/// does not expose its nodes' pids): its `/proc` command line holds the port, as an argument
/// or in the process title Redis sets.
fn child_pid_by_port(port: u16) -> Option<u32> {
    let me = std::process::id().to_string();
    let port = port.to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let (comm, rest) = stat.rsplit_once(')')?;
            let ppid = rest.split_whitespace().nth(1)?;
            if ppid != me || !comm.contains("redis-server") {
                return None;
            }
            let cmdline = std::fs::read_to_string(entry.path().join("cmdline")).ok()?;
            cmdline
                .split(|c: char| !c.is_ascii_digit())
                .any(|t| t == port)
                .then_some(pid)
        })
}
