//! The command line: `lockctl [--url|--cluster|--sentinel] list|inspect|release|watch`.

use clap::{ArgAction, ArgGroup, Args, Parser, Subcommand};

/// Inspect and operate lockcore locks in Redis.
///
/// KEY and PATTERN are full Redis keys, prefix included, exactly as `list` prints them.
#[derive(Debug, Parser)]
#[command(
    name = "lockctl",
    version,
    about,
    group = ArgGroup::new("target").args(["url", "cluster", "sentinel"])
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) connect: Connect,
    /// The lock manager's key prefix: the default PATTERN is `<prefix>*`, and the library's
    /// auxiliary keys (fencing counter, waiter queues) are found under it.
    #[arg(long, global = true, default_value = lockcore::DEFAULT_KEY_PREFIX)]
    pub(crate) prefix: String,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where the locks live: exactly one of `--url`, `--cluster` or `--sentinel`.
#[derive(Debug, Args)]
pub(crate) struct Connect {
    /// One Redis node: `redis://[user:password@]host:port/[db]` or `rediss://...` (TLS).
    #[arg(long, global = true)]
    pub(crate) url: Option<String>,
    /// Redis Cluster seed nodes; every primary is scanned. Several URLs: repeat the flag or
    /// separate them with commas.
    #[arg(long, global = true, action = ArgAction::Append, value_delimiter = ',')]
    pub(crate) cluster: Vec<String>,
    /// Sentinel nodes; the primary of `--master` is resolved through them (several URLs as
    /// for `--cluster`).
    #[arg(
        long,
        global = true,
        action = ArgAction::Append,
        value_delimiter = ',',
        requires = "master"
    )]
    pub(crate) sentinel: Vec<String>,
    /// The Sentinel master name (with `--sentinel`).
    #[arg(long, global = true)]
    pub(crate) master: Option<String>,
    /// Trust this CA (a PEM file) for `rediss://` URLs, instead of the system's roots.
    #[arg(long, global = true, value_name = "PEM_FILE")]
    pub(crate) tls_ca: Option<std::path::PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List locks (SCAN, never KEYS), with holder, TTL and waiters.
    List {
        /// A Redis glob over full keys; default `<prefix>*`.
        pattern: Option<String>,
        /// Print one JSON array of objects.
        #[arg(long)]
        json: bool,
    },
    /// Show one lock.
    Inspect {
        /// The full key, prefix included.
        key: String,
        /// Print one JSON array with one object.
        #[arg(long)]
        json: bool,
    },
    /// Free a lock whose holder is gone: a compare-and-delete of the value just read, so a
    /// lock that changed hands in between is never freed.
    Release {
        /// The full key, prefix included.
        key: String,
        /// Required: say that you mean it.
        #[arg(long)]
        force: bool,
        /// Release only if this token (as `list` prints it) still holds the lock.
        #[arg(long)]
        token: Option<String>,
    },
    /// A live table of locks, refreshed in place.
    Watch {
        /// A Redis glob over full keys; default `<prefix>*`.
        pattern: Option<String>,
        /// Milliseconds between refreshes.
        #[arg(long, default_value_t = 1000)]
        interval: u64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        iterations: Option<u64>,
    },
}
