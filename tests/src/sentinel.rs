//! A private Sentinel set-up on loopback: 1 primary + 1 replica (or more) + 3
//! sentinels, one process each, killed on drop; optionally with the sentinels
//! (and so the clients they direct) reaching the first primary through a
//! [`FaultProxy`].

use std::fmt;
use std::fs;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::FaultProxy;
use crate::admin::{info_field, query, query_async};
use crate::flavour::{ServerFlavour, ensure_installed, server_flavour};
use crate::poll::{poll_async, poll_sync};
use crate::ports::{HOST, free_ports};
use crate::process::{Member, ServerProcess, arg};

/// The name the sentinels monitor the primary under.
pub const MASTER_NAME: &str = "lockcore-primary";

/// `down-after-milliseconds`: how long the primary may be unreachable before
/// a sentinel flags it down. Small, so fail-over tests are fast.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// `failover-timeout` (a failed attempt is retried after twice this).
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(3000);

/// Sentinels, and the quorum that agrees the primary is down.
const SENTINELS: usize = 3;
const QUORUM: usize = 2;

/// How long the set-up may take to settle (sentinels find each other through
/// hello messages sent every 2 s), and a manual fail-over to complete.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
const SETTLE_POLL: Duration = Duration::from_millis(50);

/// Slot indices in `processes`.
const FIRST_DATA_NODE: usize = 0;
const SECOND_DATA_NODE: usize = 1;

/// 1 primary + 1 replica + 3 sentinels on `127.0.0.1` and free ports
/// (`sentinel monitor lockcore-primary 127.0.0.1 PORT 2`,
/// `down-after-milliseconds` 1000, `failover-timeout` 3000), each in its own
/// temp dir. Every process is killed on drop (also on panic).
///
/// ```no_run
/// # async fn demo() {
/// let setup = lockcore_tests::SentinelSetup::start();
/// let old = setup.primary_url();
/// setup.kill_primary();
/// let took = setup.wait_for_failover(std::time::Duration::from_secs(30)).await;
/// assert_eq!(setup.current_primary_url(), setup.replica_url());
/// # drop((old, took));
/// # }
/// ```
pub struct SentinelSetup {
    // Field order: processes die before the dir is removed.
    data: Vec<Member>,
    sentinels: Vec<Member>,
    /// The primary's port (as the sentinels know it) before the last
    /// `kill_primary` / `manual_failover`.
    replaced_primary: Mutex<u16>,
    /// The port the sentinels were told the first primary is on: its own, or
    /// its proxy's.
    monitored_port: u16,
    flavour: ServerFlavour,
    dir: TempDir,
}

impl SentinelSetup {
    /// Start the primary, the replica (`--replicaof`) and three sentinels
    /// (`SERVER FILE --sentinel`), and wait until the replica's link is up and
    /// every sentinel sees the primary, the replica and the two other
    /// sentinels.
    ///
    /// # Panics
    ///
    /// If the binary is missing (with the install command) or the set-up does
    /// not settle within 30 s (with every process's log).
    pub fn start() -> SentinelSetup {
        let mut setup = Self::start_data_nodes(1);
        setup.start_sentinels(setup.data[FIRST_DATA_NODE].port);
        setup
    }

    /// As [`start`](Self::start), with `replicas` replicas (at least 1), and
    /// the sentinels monitoring the primary through a [`FaultProxy`] in front
    /// of it (started on the current runtime): the sentinels, and every client
    /// that asks them, reach the first primary only through the proxy, so its
    /// faults (latency, blackhole) make the sentinels fail over while the
    /// primary keeps running. The replicas replicate from the primary
    /// directly; a promoted replica is reached directly too.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub async fn start_behind_proxy(replicas: usize) -> (SentinelSetup, FaultProxy) {
        let mut setup = Self::start_data_nodes(replicas.max(1));
        let proxy = FaultProxy::start_to_port(setup.data[FIRST_DATA_NODE].port).await;
        setup.start_sentinels(proxy.port());
        (setup, proxy)
    }

    /// The primary and `replicas` replicas, synced; no sentinel yet.
    fn start_data_nodes(replicas: usize) -> SentinelSetup {
        let flavour = server_flavour();
        ensure_installed(flavour, flavour.server_bin());
        let dir = tempfile::Builder::new()
            .prefix("lockcore-sentinel")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temp dir for the sentinels: {e}"));
        let ports = free_ports(1 + replicas, false);
        let mut setup = SentinelSetup {
            data: Vec::new(),
            sentinels: Vec::new(),
            replaced_primary: Mutex::new(ports[0]),
            monitored_port: ports[0],
            flavour,
            dir,
        };
        setup.spawn_data_node(ports[0], None);
        for &port in &ports[1..] {
            setup.spawn_data_node(port, Some(ports[0]));
        }
        setup.wait_started(&setup.data);
        for &port in &ports[1..] {
            if let Err(e) = poll_sync(SETTLE_TIMEOUT, SETTLE_POLL, || replica_link_up(port)) {
                setup.fail(&format!("the replica {port} did not sync: {e}"));
            }
        }
        setup
    }

    /// Three sentinels that monitor the primary at `monitored_port`; returns
    /// once they have settled.
    fn start_sentinels(&mut self, monitored_port: u16) {
        self.monitored_port = monitored_port;
        *self.replaced() = monitored_port;
        for port in free_ports(SENTINELS, false) {
            self.spawn_sentinel(port, monitored_port);
        }
        self.wait_started(&self.sentinels);
        if let Err(e) = poll_sync(SETTLE_TIMEOUT, SETTLE_POLL, || self.check_settled()) {
            self.fail(&format!("the sentinels did not settle: {e}"));
        }
    }

    fn spawn_data_node(&mut self, port: u16, replica_of: Option<u16>) {
        let node_dir = self.member_dir(&format!("data-{port}"));
        let mut args = vec![
            arg("--port"),
            arg(port.to_string()),
            arg("--bind"),
            arg(HOST),
            arg("--save"),
            arg(""),
            arg("--appendonly"),
            arg("no"),
            arg("--dir"),
            arg(&node_dir),
            arg("--enable-debug-command"),
            arg("yes"),
            // A replica that needs a full sync after a fail-over gets it at once, not after
            // the default 5 s wait for more replicas.
            arg("--repl-diskless-sync-delay"),
            arg("0"),
        ];
        if let Some(primary) = replica_of {
            args.extend([arg("--replicaof"), arg(HOST), arg(primary.to_string())]);
        }
        let process = ServerProcess::spawn(self.flavour, &format!("data-{port}"), &node_dir, &args);
        self.data.push(Member::new(port, process));
    }

    fn spawn_sentinel(&mut self, port: u16, primary: u16) {
        let sentinel_dir = self.member_dir(&format!("sentinel-{port}"));
        let config = sentinel_dir.join("sentinel.conf");
        let down = DOWN_AFTER.as_millis();
        let failover = FAILOVER_TIMEOUT.as_millis();
        let text = format!(
            "port {port}\nbind {HOST}\ndir {dir}\n\
             sentinel monitor {MASTER_NAME} {HOST} {primary} {QUORUM}\n\
             sentinel down-after-milliseconds {MASTER_NAME} {down}\n\
             sentinel failover-timeout {MASTER_NAME} {failover}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            dir = sentinel_dir.display()
        );
        fs::write(&config, text)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", config.display()));
        let args = vec![arg(&config), arg("--sentinel")];
        let label = format!("sentinel-{port}");
        let process = ServerProcess::spawn(self.flavour, &label, &sentinel_dir, &args);
        self.sentinels.push(Member::new(port, process));
    }

    fn member_dir(&self, name: &str) -> std::path::PathBuf {
        let path = self.dir.path().join(name);
        fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        path
    }

    fn wait_started(&self, members: &[Member]) {
        for member in members {
            let ready = member.process().wait_ready(member.port);
            if let Err(e) = ready {
                self.fail(&format!("{} did not start: {e}", member.port));
            }
        }
    }

    /// The flavour the processes run (`redis` or `valkey`).
    pub fn flavour(&self) -> ServerFlavour {
        self.flavour
    }

    /// The name the sentinels know the primary by.
    pub fn master_name(&self) -> &str {
        MASTER_NAME
    }

    /// `redis://127.0.0.1:PORT/` of every sentinel still running.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .filter(|s| s.process().is_running())
            .map(|s| url(s.port))
            .collect()
    }

    /// The node started as the primary (it may have been failed over since:
    /// see [`current_primary_url`](Self::current_primary_url)).
    pub fn primary_url(&self) -> String {
        url(self.data[FIRST_DATA_NODE].port)
    }

    /// The node started as the replica.
    pub fn replica_url(&self) -> String {
        url(self.data[SECOND_DATA_NODE].port)
    }

    /// Every data node's own URL (never a proxy's): the first primary first,
    /// then the replicas in start order.
    pub fn data_urls(&self) -> Vec<String> {
        self.data.iter().map(|m| url(m.port)).collect()
    }

    /// The primary as the first answering sentinel reports it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    ///
    /// # Panics
    ///
    /// If no sentinel answers (the message has the logs).
    pub fn current_primary_url(&self) -> String {
        let mut errors = Vec::new();
        for port in self.live_sentinel_ports() {
            match master_addr_sync(port) {
                Ok(primary) => return url(primary),
                Err(e) => errors.push(e),
            }
        }
        self.fail(&format!("no sentinel answered: {errors:?}"))
    }

    /// Kill (`SIGKILL`) the current primary (as the sentinels report it) and
    /// return its URL once the process is dead.
    pub fn kill_primary(&self) -> String {
        let primary = self.current_primary_url();
        let Some(member) = self.member_at(&primary) else {
            self.fail(&format!(
                "the sentinels report an unknown primary {primary}"
            ))
        };
        *self.replaced() = self.port_known_for(member);
        member.process().kill();
        primary
    }

    /// The data node the sentinels report at `reported` (a proxy's URL maps to
    /// the first primary).
    fn member_at(&self, reported: &str) -> Option<&Member> {
        if *reported == url(self.monitored_port) {
            return self.data.get(FIRST_DATA_NODE);
        }
        self.data.iter().find(|m| url(m.port) == reported)
    }

    /// The port the sentinels know `member` by.
    fn port_known_for(&self, member: &Member) -> u16 {
        if member.port == self.data[FIRST_DATA_NODE].port {
            self.monitored_port
        } else {
            member.port
        }
    }

    /// Wait until every live sentinel reports a primary other than the one
    /// before the last [`kill_primary`](Self::kill_primary) /
    /// [`manual_failover`](Self::manual_failover) (the start primary if
    /// neither ran), and that node answers `ROLE` as master. Returns the time
    /// waited.
    ///
    /// # Panics
    ///
    /// If that does not happen within `timeout` (the message has the logs).
    pub async fn wait_for_failover(&self, timeout: Duration) -> Duration {
        let started = Instant::now();
        let old = *self.replaced();
        let switched = poll_async(timeout, SETTLE_POLL, || async {
            let mut agreed = None;
            for port in self.live_sentinel_ports() {
                let primary = master_addr(port).await?;
                if primary == old {
                    return Err(format!("sentinel {port} still reports {old}"));
                }
                if agreed.is_some_and(|p| p != primary) {
                    return Err(format!("sentinels disagree: {agreed:?} vs {primary}"));
                }
                agreed = Some(primary);
            }
            let primary = agreed.ok_or("no live sentinel")?;
            let role: Vec<redis::Value> = query_async(primary, &redis::cmd("ROLE")).await?;
            match role.first() {
                Some(redis::Value::BulkString(r)) if r == b"master" => Ok(()),
                other => Err(format!("{primary} answers ROLE {other:?}")),
            }
        })
        .await;
        if let Err(e) = switched {
            self.fail(&format!("no fail-over away from {old}: {e}"));
        }
        started.elapsed()
    }

    /// `SENTINEL FAILOVER` on the first live sentinel, then wait (up to 30 s)
    /// until the sentinels report the other node as the primary. Returns the
    /// new primary's URL.
    ///
    /// # Panics
    ///
    /// If the sentinel refuses or the switch does not complete (with the logs).
    pub async fn manual_failover(&self) -> String {
        let old = self.current_primary_url();
        if let Some(member) = self.member_at(&old) {
            *self.replaced() = self.port_known_for(member);
        }
        let Some(sentinel) = self.live_sentinel_ports().next() else {
            self.fail("no live sentinel")
        };
        let failover = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .to_owned();
        if let Err(e) = query_async::<()>(sentinel, &failover).await {
            self.fail(&format!("SENTINEL FAILOVER on {sentinel}: {e}"));
        }
        self.wait_for_failover(SETTLE_TIMEOUT).await;
        self.current_primary_url()
    }

    /// The logs of every process, for panic messages.
    pub fn log(&self) -> String {
        let mut log = String::new();
        for member in self.data.iter().chain(&self.sentinels) {
            log.push_str(&member.process().log());
        }
        log
    }

    fn replaced(&self) -> MutexGuard<'_, u16> {
        self.replaced_primary
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn live_sentinel_ports(&self) -> impl Iterator<Item = u16> + '_ {
        self.sentinels
            .iter()
            .filter(|s| s.process().is_running())
            .map(|s| s.port)
    }

    /// Every sentinel: the primary is the monitored one, every replica known
    /// and one not down, two other sentinels.
    fn check_settled(&self) -> Result<(), String> {
        let primary = self.monitored_port;
        let replicas = (self.data.len() - 1).to_string();
        for sentinel in &self.sentinels {
            let port = sentinel.port;
            let fields: Vec<String> =
                query(port, redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME))?;
            let field = |name: &str| {
                fields
                    .chunks(2)
                    .find(|pair| pair[0] == name)
                    .and_then(|pair| pair.get(1).cloned())
                    .unwrap_or_default()
            };
            let others = (SENTINELS - 1).to_string();
            if field("port") != primary.to_string()
                || field("num-slaves") != replicas
                || field("num-other-sentinels") != others
                || field("flags") != "master"
            {
                return Err(format!(
                    "sentinel {port}: primary port {}, flags {}, replicas {}, other sentinels {}",
                    field("port"),
                    field("flags"),
                    field("num-slaves"),
                    field("num-other-sentinels")
                ));
            }
            let replicas: Vec<Vec<String>> = query(
                port,
                redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME),
            )?;
            let healthy = replicas.iter().any(|fields| {
                fields.chunks(2).any(|pair| {
                    pair[0] == "flags" && pair.get(1).map(String::as_str) == Some("slave")
                })
            });
            if !healthy {
                return Err(format!(
                    "sentinel {port}: replica not healthy yet: {replicas:?}"
                ));
            }
        }
        Ok(())
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "SentinelSetup ({}): {what}\nlogs:\n{}",
            self.flavour,
            self.log()
        )
    }
}

fn get_master_addr() -> redis::Cmd {
    redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(MASTER_NAME)
        .to_owned()
}

fn parse_master_addr(port: u16, addr: Vec<String>) -> Result<u16, String> {
    addr.get(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("sentinel {port}: bad master address {addr:?}"))
}

/// The primary's port as sentinel `port` reports it.
async fn master_addr(port: u16) -> Result<u16, String> {
    parse_master_addr(port, query_async(port, &get_master_addr()).await?)
}

/// The sync twin of [`master_addr`].
fn master_addr_sync(port: u16) -> Result<u16, String> {
    parse_master_addr(port, query(port, &get_master_addr())?)
}

fn replica_link_up(port: u16) -> Result<(), String> {
    let info: String = query(port, redis::cmd("INFO").arg("replication"))?;
    match info_field(&info, "master_link_status") {
        Some("up") => Ok(()),
        other => Err(format!("replica {port}: master_link_status {other:?}")),
    }
}

fn url(port: u16) -> String {
    format!("redis://{HOST}:{port}/")
}

impl fmt::Debug for SentinelSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelSetup")
            .field("flavour", &self.flavour)
            .field(
                "data",
                &self.data.iter().map(|m| m.port).collect::<Vec<_>>(),
            )
            .field(
                "sentinels",
                &self.sentinels.iter().map(|m| m.port).collect::<Vec<_>>(),
            )
            .field("dir", &self.dir.path())
            .finish()
    }
}
