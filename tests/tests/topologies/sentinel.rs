//! `SentinelSetup`: the primary resolved by name, kill + fail-over, manual
//! fail-over with its `+switch-master` announcement.

use std::time::Duration;

use futures_util::StreamExt;
use lockcore_tests::SentinelSetup;
use redis::AsyncCommands;
use redis::sentinel::{SentinelClient, SentinelServerType};

use crate::announce;

/// A connection to the primary, resolved through the sentinels by name.
async fn primary_connection(setup: &SentinelSetup) -> (String, redis::aio::MultiplexedConnection) {
    let mut client = SentinelClient::build(
        setup.sentinel_urls(),
        setup.master_name(),
        None,
        SentinelServerType::Master,
    )
    .expect("sentinel client");
    let resolved = client
        .async_get_client()
        .await
        .expect("resolve the primary");
    let addr = resolved.get_connection_info().addr().to_string();
    let con = resolved
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to the primary {addr}: {e}\n{}", setup.log()));
    (addr, con)
}

async fn role(url: &str) -> String {
    let mut con = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    let role: Vec<redis::Value> = redis::cmd("ROLE")
        .query_async(&mut con)
        .await
        .expect("ROLE");
    match role.first() {
        Some(redis::Value::BulkString(r)) => String::from_utf8_lossy(r).into_owned(),
        other => panic!("ROLE of {url}: {other:?}"),
    }
}

fn port_of(url: &str) -> String {
    url.trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap_or("")
        .to_owned()
}

#[tokio::test]
async fn sentinel_resolves_the_primary_by_name() {
    announce("sentinel");
    let setup = SentinelSetup::start();
    assert_eq!(setup.sentinel_urls().len(), 3);
    assert_eq!(setup.current_primary_url(), setup.primary_url());

    let (addr, mut con) = primary_connection(&setup).await;
    assert!(addr.ends_with(&port_of(&setup.primary_url())), "{addr}");
    let _: () = con.set("lock:s", "v").await.expect("SET on the primary");
    assert_eq!(role(&setup.primary_url()).await, "master");
    assert_eq!(role(&setup.replica_url()).await, "slave");
    let acks: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5_000)
        .query_async(&mut con)
        .await
        .expect("WAIT");
    assert_eq!(acks, 1);
}

#[tokio::test]
async fn killed_primary_fails_over_to_the_replica() {
    announce("sentinel");
    let setup = SentinelSetup::start();
    let killed = setup.kill_primary();
    assert_eq!(killed, setup.primary_url());

    let took = setup.wait_for_failover(Duration::from_secs(30)).await;
    eprintln!("sentinel fail-over after kill -9 took {took:?}");

    assert_eq!(setup.current_primary_url(), setup.replica_url());
    let (addr, mut con) = primary_connection(&setup).await;
    assert!(addr.ends_with(&port_of(&setup.replica_url())), "{addr}");
    let _: () = con
        .set("lock:after", "v")
        .await
        .expect("SET on the new primary");
}

#[tokio::test]
async fn manual_failover_is_announced_as_switch_master() {
    announce("sentinel");
    let setup = SentinelSetup::start();
    let sentinel = redis::Client::open(setup.sentinel_urls()[0].as_str()).expect("url");
    let mut pubsub = sentinel
        .get_async_pubsub()
        .await
        .expect("pubsub to a sentinel");
    pubsub.subscribe("+switch-master").await.expect("SUBSCRIBE");

    let new = setup.manual_failover().await;

    assert_eq!(new, setup.replica_url());
    let msg = tokio::time::timeout(Duration::from_secs(10), pubsub.on_message().next())
        .await
        .expect("+switch-master within 10 s")
        .expect("a message");
    let payload: String = msg.get_payload().expect("text payload");
    // "<name> <old ip> <old port> <new ip> <new port>"
    let fields: Vec<&str> = payload.split(' ').collect();
    assert_eq!(fields.len(), 5, "{payload}");
    assert_eq!(fields[0], setup.master_name());
    assert_eq!(fields[2], port_of(&setup.primary_url()));
    assert_eq!(fields[4], port_of(&setup.replica_url()));
    // The demoted primary turns into a replica (bounded wait: sentinel reconfigures it).
    let mut demoted = String::new();
    for _ in 0..100 {
        demoted = role(&setup.primary_url()).await;
        if demoted == "slave" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(demoted, "slave");
}
