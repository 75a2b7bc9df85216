//! Semaphores and read-write locks on the other single-primary topologies: a Sentinel-resolved
//! primary and `rediss://` with a private CA (the cluster's test is in `cluster.rs`). Each
//! takes permits up to N, is refused the N+1st, hands a released permit to a waiter,
//! and shares readers while excluding the writer.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use lockcore_tests::{SentinelSetup, TlsServer};

async fn family_cycle(locks: &LockManager) {
    let once = LockOptions::new(Duration::from_secs(5)).wait(Duration::ZERO);
    let wait = LockOptions::new(Duration::from_secs(5)).wait(Duration::from_secs(5));
    let sem = locks.semaphore("topology:pool", 2);
    let a = sem.acquire(&once).await.unwrap();
    let b = sem.acquire(&once).await.unwrap();
    assert!(
        sem.try_acquire(&once).await.unwrap().is_none(),
        "both permits taken"
    );
    let queued = tokio::spawn({
        let (sem, wait) = (sem.clone(), wait.clone());
        async move { sem.acquire(&wait).await }
    });
    a.release().await.unwrap();
    let c = tokio::time::timeout(Duration::from_secs(5), queued)
        .await
        .expect("handed a permit")
        .unwrap()
        .unwrap();
    assert!(c.fencing_token() > b.fencing_token());
    b.release().await.unwrap();
    c.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);

    let rw = locks.rw_lock("topology:prices");
    let r1 = rw.try_read(&once).await.unwrap().expect("reader");
    let r2 = rw.try_read(&once).await.unwrap().expect("readers share");
    assert!(
        rw.try_write(&once).await.unwrap().is_none(),
        "readers exclude the writer"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    rw.write(&wait).await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rw_locks_on_a_sentinel_primary() {
    let setup = SentinelSetup::start();
    let locks = LockManager::builder()
        .sentinel(setup.sentinel_urls(), setup.master_name())
        .build()
        .await
        .unwrap_or_else(|e| panic!("sentinel manager: {e}\n{}", setup.log()));
    family_cycle(&locks).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_rw_locks_over_tls() {
    let server = TlsServer::start();
    let locks = LockManager::builder()
        .url(server.url())
        .tls_root_ca_pem(server.ca_pem())
        .build()
        .await
        .unwrap_or_else(|e| panic!("tls manager: {e}\n{}", server.log()));
    family_cycle(&locks).await;
}
