//! Which server binary the harness runs: the one place that decides it.
//!
//! `LOCKCORE_TEST_SERVER=redis|valkey` (default `redis`) picks the flavour;
//! [`RedisServer`](crate::RedisServer) and every topology then spawn
//! `redis-server`/`valkey-server` and `redis-cli`/`valkey-cli` from `PATH`.

use std::fmt;
use std::io::ErrorKind;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The environment variable that picks the server flavour.
pub const SERVER_ENV: &str = "LOCKCORE_TEST_SERVER";

/// The command that installs `redis-server` on the project's machines (Debian).
pub const INSTALL_HINT: &str = "sudo apt-get update && sudo apt-get install -y redis-server";

/// The command that installs `valkey-server` and `valkey-cli` (Valkey 8.1).
pub const VALKEY_INSTALL_HINT: &str = "scripts/ensure-valkey";

/// A server implementation the harness can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFlavour {
    /// `redis-server` / `redis-cli` (Debian's Redis 7.0 on the project's machines).
    Redis,
    /// `valkey-server` / `valkey-cli` (Valkey 8.1 from `scripts/ensure-valkey`).
    Valkey,
}

impl ServerFlavour {
    /// The server binary, looked up on `PATH`.
    pub fn server_bin(self) -> &'static str {
        match self {
            ServerFlavour::Redis => "redis-server",
            ServerFlavour::Valkey => "valkey-server",
        }
    }

    /// The CLI binary (used for `--cluster create`), looked up on `PATH`.
    pub fn cli_bin(self) -> &'static str {
        match self {
            ServerFlavour::Redis => "redis-cli",
            ServerFlavour::Valkey => "valkey-cli",
        }
    }

    /// The command that installs this flavour's binaries.
    pub fn install_hint(self) -> &'static str {
        match self {
            ServerFlavour::Redis => INSTALL_HINT,
            ServerFlavour::Valkey => VALKEY_INSTALL_HINT,
        }
    }

    /// The first line of `SERVER --version`, e.g.
    /// `Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=...`.
    ///
    /// # Panics
    ///
    /// If the binary is not installed (the message has the install command).
    pub fn version_line(self) -> String {
        let out = match Command::new(self.server_bin())
            .arg("--version")
            .stdin(Stdio::null())
            .output()
        {
            Ok(out) => out,
            Err(e) => panic!("{}", missing_message(self, self.server_bin(), &e)),
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// The version number from [`version_line`](Self::version_line), e.g. `7.0.15`.
    pub fn version(self) -> String {
        let line = self.version_line();
        line.split_whitespace()
            .find_map(|word| word.strip_prefix("v="))
            .unwrap_or("unknown")
            .to_owned()
    }
}

impl fmt::Display for ServerFlavour {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerFlavour::Redis => "redis",
            ServerFlavour::Valkey => "valkey",
        })
    }
}

/// The flavour picked by `LOCKCORE_TEST_SERVER` (read once per process).
///
/// # Panics
///
/// If the variable holds anything but `redis`, `valkey` or nothing.
pub fn server_flavour() -> ServerFlavour {
    static FLAVOUR: OnceLock<ServerFlavour> = OnceLock::new();
    *FLAVOUR.get_or_init(|| match std::env::var(SERVER_ENV) {
        Err(_) => ServerFlavour::Redis,
        Ok(v) if v.is_empty() || v.eq_ignore_ascii_case("redis") => ServerFlavour::Redis,
        Ok(v) if v.eq_ignore_ascii_case("valkey") => ServerFlavour::Valkey,
        Ok(v) => panic!("{SERVER_ENV}={v:?}: expected `redis` or `valkey`"),
    })
}

/// What runs, for test output and the README: e.g. `redis 7.0.15` or `valkey 8.1.8`.
pub fn server_description() -> String {
    static DESCRIPTION: OnceLock<String> = OnceLock::new();
    DESCRIPTION
        .get_or_init(|| {
            let flavour = server_flavour();
            format!("{flavour} {}", flavour.version())
        })
        .clone()
}

/// Panic with the install command when `bin` (one of `flavour`'s binaries)
/// cannot be executed.
pub(crate) fn ensure_installed(flavour: ServerFlavour, bin: &str) {
    let probe = Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Err(e) = probe {
        panic!("{}", missing_message(flavour, bin, &e));
    }
}

fn missing_message(flavour: ServerFlavour, bin: &str, e: &std::io::Error) -> String {
    let hint = flavour.install_hint();
    if e.kind() == ErrorKind::NotFound {
        format!(
            "`{bin}` was not found on PATH ({SERVER_ENV}={flavour}); the lockcore integration \
             tests need a real server. Install it with:\n    {hint}"
        )
    } else {
        format!("cannot run `{bin} --version` ({e}); install it with:\n    {hint}")
    }
}
