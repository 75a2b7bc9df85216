//! What a run starts and owns: the `redis-server`, one fault proxy per worker, the worker
//! processes, and a control connection straight to the server (not through a proxy).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::process::{Child, Command};

use super::BoxError;
use super::netns;
use super::resources::{Seen, counter_key};
use super::workload::WorkerSpec;
use crate::history::{Event, Fun, Phase};
use crate::{FaultProxy, RedisServer};

/// How the workers reach the server.
#[derive(Debug, Clone)]
pub enum Network {
    /// Every worker on loopback, through its own proxy; partitions are proxy blackholes.
    Loopback,
    /// Every worker in its own namespace (names from this prefix); partitions take its veth
    /// link down.
    Namespaces(String),
}

/// One worker process and what it was started with.
#[derive(Debug)]
pub struct Worker {
    /// Its spec (the incarnation is bumped on each restart).
    pub spec: WorkerSpec,
    child: Option<Child>,
}

impl Worker {
    /// The OS process id, while it runs.
    pub fn pid(&self) -> Option<rustix::process::Pid> {
        let id = self.child.as_ref()?.id()?;
        rustix::process::Pid::from_raw(i32::try_from(id).ok()?)
    }
}

/// The server, the proxies, the workers.
#[derive(Debug)]
pub struct Fleet {
    /// The server.
    pub server: RedisServer,
    /// Worker `i`'s proxy.
    pub proxies: Vec<FaultProxy>,
    /// The workers.
    pub workers: Vec<Worker>,
    /// How they are connected.
    pub network: Network,
    /// The control connection (use [`Fleet::control`]).
    control: ConnectionManager,
    exe: PathBuf,
    dir: PathBuf,
}

/// Sends `signal` to `pid`; a process that has gone already is not an error.
pub fn signal(pid: rustix::process::Pid, signal: rustix::process::Signal) {
    let _ = rustix::process::kill_process(pid, signal);
}

impl Fleet {
    /// Starts the server (with `server_args`), the proxies and the control connection.
    ///
    /// # Errors
    /// When the server does not start (the harness's panic, caught) or a connection fails.
    pub async fn start(
        server_args: &[&str],
        workers: u32,
        network: Network,
        exe: PathBuf,
        dir: PathBuf,
    ) -> Result<Fleet, BoxError> {
        let server = std::panic::catch_unwind(|| RedisServer::start_with_args(server_args))
            .map_err(|_| "redis-server did not start (see the message above)")?;
        let bind = match network {
            Network::Loopback => Ipv4Addr::LOCALHOST,
            Network::Namespaces(_) => Ipv4Addr::UNSPECIFIED,
        };
        let mut proxies = Vec::new();
        for _ in 0..workers {
            proxies.push(FaultProxy::start_on(bind, server.port()).await);
        }
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(Duration::from_secs(2)))
            .set_connection_timeout(Some(Duration::from_secs(1)));
        let control = ConnectionManager::new_with_config(server.client(), config).await?;
        Ok(Fleet {
            server,
            proxies,
            workers: Vec::new(),
            network,
            control,
            exe,
            dir,
        })
    }

    /// Runs `cmd` on the control connection; a dropped connection (the server restarted, or
    /// killed it) is retried, bounded: 5 tries, 200 ms apart.
    ///
    /// # Errors
    /// The last try's error.
    pub async fn control<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> Result<T, BoxError> {
        let mut last = None;
        for attempt in 0..5 {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            match cmd.query_async(&mut self.control).await {
                Ok(v) => return Ok(v),
                Err(e) => {
                    eprintln!("nemesis: control command failed (try {attempt}): {e}");
                    last = Some(e);
                }
            }
        }
        Err(last.map_or_else(|| "no try".into(), |e| e.into()))
    }

    /// The counter of lock key `key`, read on the control connection.
    ///
    /// # Errors
    /// A Redis error, or a value that is not `count:writer`.
    pub async fn counter(&mut self, key: &str) -> Result<Seen, BoxError> {
        let value: Option<String> = self
            .control(redis::cmd("HGET").arg(counter_key(key)).arg("value"))
            .await?;
        Ok(Seen::parse(value.as_deref())?)
    }

    /// The URL worker `i` connects to.
    pub fn worker_url(&self, i: u32) -> String {
        let port = self.proxies.get(i as usize).map_or(0, FaultProxy::port);
        match self.network {
            Network::Loopback => format!("redis://127.0.0.1:{port}/"),
            Network::Namespaces(_) => format!("redis://{}:{port}/", netns::server_addr(i)),
        }
    }

    /// Starts the process of `spec` (in its namespace, if any), stdout and stderr to a log file.
    ///
    /// # Errors
    /// When the process cannot be spawned.
    pub fn spawn(&mut self, spec: WorkerSpec) -> Result<(), BoxError> {
        let log = std::fs::File::create(
            self.dir
                .join(format!("worker-{}-{}.log", spec.process, spec.incarnation)),
        )?;
        let json = serde_json::to_string(&spec)?;
        let mut command = match &self.network {
            Network::Loopback => Command::new(&self.exe),
            Network::Namespaces(prefix) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", &netns::worker_ns(prefix, spec.process)]);
                c.arg(&self.exe);
                c
            }
        };
        command
            .args(["worker", "--spec", &json])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true);
        let child = command.spawn()?;
        let slot = spec.process as usize;
        let worker = Worker {
            spec,
            child: Some(child),
        };
        if slot < self.workers.len() {
            self.workers[slot] = worker;
        } else {
            self.workers.push(worker);
        }
        Ok(())
    }

    /// `SIGKILL`s worker `i` and waits for it (bounded: 2 s).
    pub async fn kill(&mut self, i: usize) {
        let Some(worker) = self.workers.get_mut(i) else {
            return;
        };
        if let Some(mut child) = worker.child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
        }
    }

    /// Restarts worker `i` as its next incarnation, with a fresh history file and seed.
    ///
    /// # Errors
    /// When the process cannot be spawned.
    pub fn respawn(&mut self, i: usize, seed: u64) -> Result<(), BoxError> {
        let Some(worker) = self.workers.get(i) else {
            return Ok(());
        };
        let mut spec = worker.spec.clone();
        spec.incarnation += 1;
        spec.seed = seed;
        spec.history = self.dir.join(format!(
            "history-{}-{}.jsonl",
            spec.process, spec.incarnation
        ));
        self.spawn(spec)
    }

    /// The workers that hold a lease right now, as their histories tell (the last 64 KiB of
    /// each current history: leases acquired and not yet released).
    pub fn holders(&self) -> Vec<usize> {
        let mut holders = Vec::new();
        for (i, worker) in self.workers.iter().enumerate() {
            let Ok(text) = std::fs::read(&worker.spec.history) else {
                continue;
            };
            let tail = &text[text.len().saturating_sub(64 * 1024)..];
            let mut held = std::collections::HashSet::new();
            for line in tail.split(|&b| b == b'\n') {
                let Ok(event) = serde_json::from_slice::<Event>(line) else {
                    continue;
                };
                match (event.fun, event.phase) {
                    (Fun::Acquire, Phase::Ok) => {
                        held.insert((event.task, event.op));
                    }
                    (Fun::Release, Phase::Invoke) => {
                        held.remove(&(event.task, event.op));
                    }
                    _ => {}
                }
            }
            if !held.is_empty() {
                holders.push(i);
            }
        }
        holders
    }

    /// Every history file written so far.
    pub fn histories(&self) -> Vec<PathBuf> {
        let mut paths = Vec::new();
        for worker in &self.workers {
            for incarnation in 0..=worker.spec.incarnation {
                let path = self.dir.join(format!(
                    "history-{}-{incarnation}.jsonl",
                    worker.spec.process
                ));
                if path.exists() {
                    paths.push(path);
                }
            }
        }
        paths
    }

    /// Waits for every worker to exit by itself until `within` has passed, then kills the rest
    /// (`SIGCONT` first). Returns how many had to be killed.
    pub async fn finish(&mut self, within: Duration) -> usize {
        let until = tokio::time::Instant::now() + within;
        let mut killed = 0;
        for worker in &mut self.workers {
            let Some(mut child) = worker.child.take() else {
                continue;
            };
            if tokio::time::timeout_at(until, child.wait()).await.is_err() {
                if let Some(pid) = child
                    .id()
                    .and_then(|id| rustix::process::Pid::from_raw(i32::try_from(id).ok()?))
                {
                    signal(pid, rustix::process::Signal::CONT);
                }
                let _ = child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                killed += 1;
            }
        }
        killed
    }
}
