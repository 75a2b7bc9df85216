//! `--topology single|sentinel|cluster|redlock`: the Redis the demo locks on, started by the
//! demo itself on free ports of 127.0.0.1 (or the caller's `REDIS_URL`, single only), and how
//! a worker connects to it.

use std::error::Error;

use lockcore::{LockError, LockManager};
use lockcore_tests::{RedisCluster, RedisServer, SentinelSetup};

/// Which kind of Redis to lock on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Topology {
    /// One redis-server.
    Single,
    /// 1 primary + 1 replica + 3 sentinels.
    Sentinel,
    /// 3 primaries + 3 replicas.
    Cluster,
    /// Redlock over 5 independent servers.
    Redlock,
}

/// Where a worker connects: the topology, its URLs (sentinels, seeds or masters) and the
/// Sentinel master name.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Target {
    #[arg(long, value_enum, default_value_t = Topology::Single)]
    pub(crate) topology: Topology,
    /// Redis URLs (repeat the flag): the node, the sentinels, the cluster seeds or the Redlock
    /// masters.
    #[arg(long = "redis-url", required = true)]
    pub(crate) urls: Vec<String>,
    #[arg(long)]
    pub(crate) master_name: Option<String>,
}

impl Target {
    /// The worker's command-line arguments for this target.
    pub(crate) fn args(&self) -> Vec<String> {
        let topology = clap::ValueEnum::to_possible_value(&self.topology)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        let mut args = vec!["--topology".to_owned(), topology];
        for url in &self.urls {
            args.extend(["--redis-url".to_owned(), url.clone()]);
        }
        if let Some(name) = &self.master_name {
            args.extend(["--master-name".to_owned(), name.clone()]);
        }
        args
    }

    /// A manager on this target.
    pub(crate) async fn connect(&self) -> Result<LockManager, LockError> {
        let builder = LockManager::builder();
        let builder = match self.topology {
            Topology::Single => builder.url(self.urls.first().cloned().unwrap_or_default()),
            Topology::Redlock => builder.nodes(&self.urls),
            Topology::Cluster => builder.cluster(&self.urls),
            Topology::Sentinel => {
                builder.sentinel(&self.urls, self.master_name.as_deref().unwrap_or_default())
            }
        };
        builder.build().await
    }

    /// A one-line description for the demo's header.
    pub(crate) fn describe(&self) -> String {
        format!("{:?} {}", self.topology, self.urls.join(" ")).to_lowercase()
    }
}

/// The servers the demo started; stopped when dropped.
#[allow(dead_code)] // held for their `Drop`
pub(crate) enum Servers {
    Single(RedisServer),
    Sentinel(SentinelSetup),
    Cluster(RedisCluster),
    Redlock(Vec<RedisServer>),
}

/// Starts `topology` on free loopback ports. Blocking: run it off the runtime threads.
///
/// # Errors
/// When the harness cannot start it (its panic message, with the install command when a
/// binary is missing).
pub(crate) fn start(topology: Topology) -> Result<(Servers, Target), Box<dyn Error + Send + Sync>> {
    let started = std::panic::catch_unwind(|| match topology {
        Topology::Single => {
            let server = RedisServer::start();
            let urls = vec![server.url()];
            (Servers::Single(server), urls, None)
        }
        Topology::Sentinel => {
            let setup = SentinelSetup::start();
            let urls = setup.sentinel_urls();
            let name = setup.master_name().to_owned();
            (Servers::Sentinel(setup), urls, Some(name))
        }
        Topology::Cluster => {
            let cluster = RedisCluster::start();
            let urls = cluster.seed_urls();
            (Servers::Cluster(cluster), urls, None)
        }
        Topology::Redlock => {
            let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
            let urls = servers.iter().map(RedisServer::url).collect();
            (Servers::Redlock(servers), urls, None)
        }
    });
    match started {
        Ok((servers, urls, master_name)) => Ok((
            servers,
            Target {
                topology,
                urls,
                master_name,
            },
        )),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "unknown error".to_owned());
            Err(format!("could not start the {topology:?} topology: {message}").into())
        }
    }
}
