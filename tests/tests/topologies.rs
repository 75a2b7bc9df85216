//! Proof that each topology of the harness works, with raw redis-rs clients
//! (not lockcore): Redis Cluster, Sentinel, TLS and ACL users. Runs on the
//! flavour `LOCKCORE_TEST_SERVER` picks (redis or valkey).

// Helpers outside `#[test]` fns may panic on failure too.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod topologies {
    mod acl;
    mod cluster;
    mod cluster_client;
    mod sentinel;
    mod tls;
}

/// Print what ran, so a test log states the server version.
fn announce(topology: &str) {
    eprintln!("{topology} on {}", lockcore_tests::server_description());
}
