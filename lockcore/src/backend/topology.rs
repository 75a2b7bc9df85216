//! [`Topology`]: where a manager's locks live, as its builder was told, and how the backend for
//! it is opened (the connections, the wake-up subscription, the fencing counter's place).

use std::time::Duration;

use tokio::runtime::Handle;

use crate::backend::Backend;
use crate::backend::redlock::Redlock;
use crate::backend::replicas::WaitForReplicas;
use crate::backend::single::Single;
use crate::error::LockError;
use crate::protocol::fencing::FencingCounter;
use crate::transport::connect::{ConnectOptions, check_client, client};
use crate::transport::node::Node;
use crate::transport::sentinel::SentinelPrimary;
use crate::util::redact::redact_url;

/// Where the locks live.
#[derive(Clone)]
pub(crate) enum Topology {
    Unset,
    /// One node, or Redlock over several.
    Nodes(Vec<String>),
    /// One node, through the application's own client.
    Client(redis::Client),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
}

/// What the backend is opened with, besides the topology.
pub(crate) struct Settings {
    pub(crate) key_prefix: String,
    /// `None`: per prefix, or per slot on a cluster.
    pub(crate) fencing_counter: Option<FencingCounter>,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) replicas: Option<WaitForReplicas>,
    pub(crate) connect: ConnectOptions,
}

impl Topology {
    /// The topology for `Debug`: URLs with their passwords masked, a client by its address.
    pub(crate) fn describe(&self) -> String {
        let urls = |urls: &[String]| urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>();
        match self {
            Topology::Unset => "unset".to_owned(),
            Topology::Nodes(nodes) => format!("nodes {:?}", urls(nodes)),
            // The address only: never the client's credentials.
            Topology::Client(client) => format!("client {}", client.get_connection_info().addr()),
            Topology::Cluster(seeds) => format!("cluster {:?}", urls(seeds)),
            Topology::Sentinel {
                sentinels,
                master_name,
            } => format!("sentinel {:?} master {master_name:?}", urls(sentinels)),
        }
    }

    /// Connects and opens the backend, and says where its fencing counter lives.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] when no URL was given, a URL or client is refused, Redlock
    /// is asked to wait for replicas, or a per-prefix counter is asked for on a cluster;
    /// [`LockError::Redis`] when a node, the cluster or the sentinels cannot be reached.
    pub(crate) async fn open(
        &self,
        settings: &Settings,
    ) -> Result<(Backend, FencingCounter), LockError> {
        let runtime = Handle::current();
        let options = &settings.connect;
        let node = match self {
            Topology::Unset => return Err(no_url()),
            Topology::Nodes(urls) if urls.is_empty() => return Err(no_url()),
            Topology::Cluster(seeds) if seeds.is_empty() => return Err(no_url()),
            Topology::Sentinel { sentinels, .. } if sentinels.is_empty() => return Err(no_url()),
            Topology::Nodes(urls) if urls.len() > 1 => {
                if settings.replicas.is_some() {
                    return Err(LockError::InvalidOptions {
                        reason: "wait_for_replicas is for one node, Sentinel and Cluster; Redlock's masters are independent, with no replicas to wait for".to_owned(),
                    });
                }
                let nodes = urls
                    .iter()
                    .map(|url| Node::lazy(client(url, options)?, options))
                    .collect::<Result<Vec<Node>, LockError>>()?;
                let counter = counter(settings.fencing_counter, false)?;
                let redlock = Redlock::new(nodes, settings.node_timeout, runtime.clone());
                return Ok((Backend::redlock(redlock, runtime), counter));
            }
            Topology::Nodes(urls) => Node::plain(client(&urls[0], options)?, options).await?,
            Topology::Client(client) => {
                check_client(client)?;
                Node::plain(client.clone(), options).await?
            }
            Topology::Cluster(seeds) => Node::cluster(seeds, options).await?,
            Topology::Sentinel {
                sentinels,
                master_name,
            } => {
                let primary =
                    SentinelPrimary::resolve(sentinels, master_name, options, &runtime).await?;
                Node::sentinel(primary, master_name)
            }
        };
        let counter = counter(
            settings.fencing_counter,
            matches!(self, Topology::Cluster(_)),
        )?;
        let single = Single::open(
            node,
            settings.key_prefix.clone(),
            counter,
            settings.replicas,
            options.response_timeout,
            &runtime,
        )
        .await;
        Ok((Backend::single(single, runtime), counter))
    }
}

fn no_url() -> LockError {
    LockError::InvalidOptions {
        reason: "no Redis URL given; call `.url(\"redis://host:port/\")`, `.client(..)`, `.nodes([..])`, `.cluster([..])` or `.sentinel([..], name)` on the builder".to_owned(),
    }
}

/// The fencing counter placement: the caller's choice, else per slot on a cluster.
///
/// # Errors
/// [`LockError::InvalidOptions`] for a per-prefix counter on a cluster (`CROSSSLOT`).
fn counter(chosen: Option<FencingCounter>, cluster: bool) -> Result<FencingCounter, LockError> {
    match (chosen, cluster) {
        (Some(FencingCounter::PerPrefix), true) => Err(LockError::InvalidOptions {
            reason: "fencing_counter is PerPrefix on Redis Cluster, where the counter would sit in another slot than most lock keys (CROSSSLOT); expected PerSlot (the default on a cluster)".to_owned(),
        }),
        (Some(counter), _) => Ok(counter),
        (None, true) => Ok(FencingCounter::PerSlot),
        (None, false) => Ok(FencingCounter::PerPrefix),
    }
}
