//! The command line: `lockctl [--url|--cluster|--sentinel] list|inspect|release|watch`.

use clap::{ArgAction, ArgGroup, Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use lockcore::redact_url;

/// The environment variables a URL is read from, in this order, when no `--url`, `--cluster`
/// or `--sentinel` is given: a password then need not be on the command line (where `ps` and
/// the shell's history see it).
pub(crate) const URL_VARS: [&str; 2] = ["LOCKCTL_URL", "REDIS_URL"];

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

/// Where the locks live: at most one of `--url`, `--cluster` or `--sentinel`; with none, the
/// URL of one node from `LOCKCTL_URL`, else `REDIS_URL`.
#[derive(Debug, Args)]
pub(crate) struct Connect {
    /// One Redis node: `redis://[user:password@]host:port/[db]` or `rediss://...` (TLS).
    /// Without `--url`, `--cluster` or `--sentinel`: `LOCKCTL_URL`, else `REDIS_URL`.
    #[arg(long, global = true)]
    pub(crate) url: Option<String>,
    /// The variable `url` was read from, when no flag named the server.
    #[arg(skip)]
    pub(crate) url_from: Option<&'static str>,
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

impl Cli {
    /// Parses the command line (exiting as clap does on a usage error or `--help`). Without
    /// `--url`, `--cluster` or `--sentinel`, the URL is the first of [`URL_VARS`] that is set
    /// and not empty; `--help` says which one this run would use.
    pub(crate) fn parse_with_env() -> Cli {
        let from_env = url_from_env();
        let matches = Cli::command()
            .after_help(env_help(from_env.as_ref()))
            .get_matches();
        let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
        let connect = &mut cli.connect;
        if connect.url.is_none()
            && connect.cluster.is_empty()
            && connect.sentinel.is_empty()
            && let Some((var, url)) = from_env
        {
            connect.url = Some(url);
            connect.url_from = Some(var);
        }
        cli
    }
}

/// The first of [`URL_VARS`] that is set and not empty, with its value.
fn url_from_env() -> Option<(&'static str, String)> {
    URL_VARS.into_iter().find_map(|var| {
        let url = std::env::var(var).ok()?;
        (!url.trim().is_empty()).then_some((var, url))
    })
}

/// The end of `--help`: where the server comes from, and what this run would use (the URL
/// with its password masked).
fn env_help(from_env: Option<&(&'static str, String)>) -> String {
    let now = match from_env {
        Some((var, url)) => format!(
            "Now: without a flag, lockctl uses `{var}` ({}).",
            redact_url(url)
        ),
        None => "Now: neither is set.".to_owned(),
    };
    format!(
        "Server: `--url`, `--cluster` or `--sentinel`; without one of them, the URL of one node \
         is read from `{}`, or else from `{}`, so that a password need not be on the command \
         line.\n{now}",
        URL_VARS[0], URL_VARS[1]
    )
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
