//! Free loopback ports for test servers: never 6379, never shared between
//! the servers of one topology.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::{Mutex, PoisonError};

/// The address every test server binds to. Never anything but loopback.
pub(crate) const HOST: &str = "127.0.0.1";

/// The port a developer's own Redis most likely uses. A test must never touch it.
pub(crate) const FORBIDDEN_PORT: u16 = 6379;

/// A Redis Cluster node also listens on its port + 10000 (the cluster bus).
pub(crate) const CLUSTER_BUS_OFFSET: u16 = 10_000;

/// `n` distinct free ports on loopback, none of them 6379. With `cluster_bus`,
/// each port + 10000 is free too (and below 65536).
///
/// All probes are held open until every port is found, so the ports differ, and
/// no port (or bus port) is handed out twice in one process: tests that run in
/// parallel never race for a port one of them has not bound yet. Another process
/// may still take one before the server binds it, which the callers report with
/// the server log.
///
/// # Panics
///
/// If no such ports are found within a bounded number of probes.
pub(crate) fn free_ports(n: usize, cluster_bus: bool) -> Vec<u16> {
    let mut handed = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let mut held: Vec<TcpListener> = Vec::new();
    let mut ports = Vec::with_capacity(n);
    for _ in 0..(n * 50) {
        if ports.len() == n {
            break;
        }
        let Ok(listener) = TcpListener::bind((HOST, 0)) else {
            continue;
        };
        let Ok(port) = listener.local_addr().map(|a| a.port()) else {
            continue;
        };
        if port == FORBIDDEN_PORT || ports.contains(&port) || handed.contains(&port) {
            continue;
        }
        if cluster_bus {
            let Some(bus) = port.checked_add(CLUSTER_BUS_OFFSET) else {
                continue;
            };
            if handed.contains(&bus) {
                continue;
            }
            match TcpListener::bind((HOST, bus)) {
                Ok(bus_listener) => held.push(bus_listener),
                Err(_) => continue,
            }
            handed.insert(bus);
        }
        held.push(listener);
        ports.push(port);
    }
    handed.extend(ports.iter().copied());
    assert_eq!(
        ports.len(),
        n,
        "could not find {n} free loopback ports (cluster bus: {cluster_bus})"
    );
    ports
}

/// Every port (and cluster bus port) this process has handed out.
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// One free loopback port (never 6379) that nothing listens on once this returns: a
/// connection to it is refused.
pub fn free_port() -> u16 {
    free_ports(1, false)[0]
}
