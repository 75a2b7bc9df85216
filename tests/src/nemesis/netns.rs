//! Network namespaces for real partitions: one for the server (and the coordinator, which
//! re-executes itself there), one per worker, and a veth pair from the server's namespace to
//! each worker's, `10.231.<i>.1` (server side) and `10.231.<i>.2` (worker side), `/30`. Every
//! address lives inside a namespace this run created; nothing is routed anywhere else. A
//! partition takes the server side of a worker's veth down and brings it back.
//!
//! [`Namespaces`] deletes what it created on drop (a panic unwinds through it), after killing
//! every process still inside (`ip netns pids`): the coordinator, `redis-server`, workers.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use super::BoxError;

/// Runs `ip args..`; the error has its stderr.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether `ip netns add` works here; the error says why not.
pub fn probe() -> Result<(), String> {
    let name = format!("lcnprobe{}", std::process::id());
    ip(&["netns", "add", &name])?;
    ip(&["netns", "del", &name])
}

/// The name prefix of a run's namespaces and links (short: link names have 15 bytes).
pub fn prefix_for(pid: u32) -> String {
    format!("lcn{}", pid % 100_000)
}

/// The server's namespace.
pub fn server_ns(prefix: &str) -> String {
    format!("{prefix}s")
}

/// Worker `i`'s namespace.
pub fn worker_ns(prefix: &str, i: u32) -> String {
    format!("{prefix}w{i}")
}

/// The server side of worker `i`'s veth (in the server's namespace).
pub fn server_link(prefix: &str, i: u32) -> String {
    format!("{prefix}s{i}")
}

fn worker_link(prefix: &str, i: u32) -> String {
    format!("{prefix}w{i}")
}

/// The server's address as worker `i` sees it.
pub fn server_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 231, u8::try_from(i).unwrap_or(u8::MAX), 1)
}

/// Sets a link in the current namespace up or down (a partition and its heal).
///
/// # Errors
/// When `ip link set` fails.
pub fn set_link(link: &str, up: bool) -> Result<(), BoxError> {
    Ok(ip(&[
        "link",
        "set",
        "dev",
        link,
        if up { "up" } else { "down" },
    ])?)
}

/// The namespaces of one run.
#[derive(Debug)]
pub struct Namespaces {
    prefix: String,
    created: Vec<String>,
}

impl Namespaces {
    /// Creates the server's namespace and `workers` worker namespaces with their veth pairs.
    ///
    /// # Errors
    /// When an `ip` command fails; what was created so far is deleted (on drop).
    pub fn create(prefix: &str, workers: u32) -> Result<Namespaces, BoxError> {
        let mut this = Namespaces {
            prefix: prefix.to_owned(),
            created: Vec::new(),
        };
        let server = server_ns(prefix);
        ip(&["netns", "add", &server])?;
        this.created.push(server.clone());
        ip(&["-n", &server, "link", "set", "lo", "up"])?;
        for i in 0..workers {
            let ns = worker_ns(prefix, i);
            ip(&["netns", "add", &ns])?;
            this.created.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            let (s_link, w_link) = (server_link(prefix, i), worker_link(prefix, i));
            ip(&[
                "-n", &server, "link", "add", &s_link, "type", "veth", "peer", "name", &w_link,
                "netns", &ns,
            ])?;
            let s_addr = format!("{}/30", server_addr(i));
            let w_addr = format!("10.231.{i}.2/30");
            ip(&["-n", &server, "addr", "add", &s_addr, "dev", &s_link])?;
            ip(&["-n", &ns, "addr", "add", &w_addr, "dev", &w_link])?;
            ip(&["-n", &server, "link", "set", &s_link, "up"])?;
            ip(&["-n", &ns, "link", "set", &w_link, "up"])?;
        }
        Ok(this)
    }

    /// The run's prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Kills every process inside the run's namespaces (`SIGCONT` first, for stopped ones).
    pub fn kill_inside(&self) {
        for ns in &self.created {
            let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() else {
                continue;
            };
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let Some(pid) = pid
                    .parse::<i32>()
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                else {
                    continue;
                };
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        self.kill_inside();
        // Deleting a namespace deletes the veth ends inside it.
        for ns in self.created.iter().rev() {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("nemesis: cleanup: {e}");
            }
        }
    }
}
