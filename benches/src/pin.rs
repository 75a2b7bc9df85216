//! CPU pinning with `taskset` (util-linux): the client on one CPU, every redis-server on
//! another, so that each request crosses cores the same way in every cell instead of whatever
//! the scheduler picked at that moment.

use std::process::{Command, Stdio};

/// The CPUs of the client process and of the servers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pinning {
    pub(crate) client_cpu: usize,
    pub(crate) server_cpu: usize,
}

/// Pins every thread of process `pid` (and threads it creates later) to `cpu`. Returns false
/// when `taskset` is missing or refuses.
pub(crate) fn pin_pid(pid: u32, cpu: usize) -> bool {
    Command::new("taskset")
        .args(["-a", "-p", "-c", &cpu.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Pins this process to the client CPU, before any runtime thread exists. `None` on a single
/// CPU or without `taskset`.
pub(crate) fn pin_client(cores: usize) -> Option<Pinning> {
    if cores < 2 {
        return None;
    }
    let pinning = Pinning {
        client_cpu: 0,
        server_cpu: 1,
    };
    pin_pid(std::process::id(), pinning.client_cpu).then_some(pinning)
}
