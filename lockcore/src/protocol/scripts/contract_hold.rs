//! The minimum hold (`lua/hold.lua`) through the acquire and release scripts' contracts: the
//! acquire stamps the server's time, the release keeps the key for what is left of the
//! minimum (never past its TTL), and without the minimum it deletes as before.

use lockcore_tests::RedisServer;
use redis::Value;

use super::contract_tests::{call, cmd, node};
use super::*;

const VALUE: &str = "11111111-1111-4111-8111-111111111111 {\"pid\":1,\"acquired_at\":5}";
const OTHER: &str = "22222222-2222-4222-8222-222222222222 {\"pid\":2,\"acquired_at\":6}";

/// The server's clock in ms.
async fn server_ms(node: &crate::transport::node::Node) -> u64 {
    let (secs, micros): (u64, u64) = cmd(node, &["TIME"]).await;
    secs * 1000 + micros / 1000
}

/// The `acquired_at` of a stored value.
fn acquired_at(value: &str) -> u64 {
    let json = value.split_once(' ').map_or("", |(_, json)| json);
    let meta: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
    meta["acquired_at"].as_u64().unwrap_or_default()
}

/// The stored value of a won `{1, token, stored}` reply.
fn stored(reply: &Value) -> String {
    match reply {
        Value::Array(v) if v.len() == 3 && v[0] == Value::Int(1) => {
            redis::from_redis_value_ref(&v[2]).unwrap_or_else(|e| panic!("{e}"))
        }
        other => panic!("expected a won reply with the stored value, got {other:?}"),
    }
}

#[tokio::test(flavor = "current_thread")]
async fn acquires_stamp_the_server_time_and_releases_keep_the_minimum() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let keys = [
        "lock:j",
        "lock:__fencing_counter__",
        "lock:__waitq__{x}j",
        "lock:__waiters__{x}j",
    ];
    // Mode 1 (the fast path) and mode 0 (one attempt) both stamp the server's clock.
    for ticket in ["1 1 700 800 ch", "0 0 0 0 "] {
        let before = server_ms(&node).await;
        let reply = call(&node, &ACQUIRE_QUEUED, &keys, &[VALUE, "5000", ticket, "1"]).await;
        let stored = stored(&reply);
        let at = acquired_at(&stored);
        assert!(at >= before && at <= server_ms(&node).await, "{stored}");
        assert_eq!(cmd::<String>(&node, &["GET", keys[0]]).await, stored);
        // Another holder's release leaves it alone, minimum or not.
        assert_eq!(
            call(&node, &RELEASE_HANDOFF, &keys, &[OTHER, "3000"]).await,
            Value::Int(-1)
        );
        // Released with a 3 s minimum: kept, with the value, for what is left of it.
        assert_eq!(
            call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "3000"]).await,
            Value::Int(1)
        );
        assert_eq!(cmd::<String>(&node, &["GET", keys[0]]).await, stored);
        let pttl: i64 = cmd(&node, &["PTTL", keys[0]]).await;
        assert!((2000..=3000).contains(&pttl), "pttl {pttl}");
        // A second run of the same release (a re-sent command) keeps it the same way.
        assert_eq!(
            call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "3000"]).await,
            Value::Int(1)
        );
        assert!(cmd::<i64>(&node, &["PTTL", keys[0]]).await <= pttl);
        let _: i64 = cmd(&node, &["DEL", keys[0]]).await;
    }
    // Without the flag, the value is set as sent (no TIME in the fast path).
    assert_eq!(
        call(
            &node,
            &ACQUIRE_QUEUED,
            &keys,
            &[VALUE, "5000", "1 1 700 800 ch"]
        )
        .await,
        Value::Array(vec![Value::Int(1), Value::Int(3)])
    );
    // A minimum that has passed (acquired_at 5: 1970) deletes, as without one.
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "3000"]).await,
        Value::Int(1)
    );
    assert_eq!(cmd::<i64>(&node, &["EXISTS", keys[0]]).await, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn the_ttl_stays_the_upper_bound_and_queued_waiters_wait_for_the_minimum() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let keys = [
        "lock:t",
        "lock:__fencing_counter__",
        "lock:__waitq__{x}t",
        "lock:__waiters__{x}t",
    ];
    let reply = call(
        &node,
        &ACQUIRE_QUEUED,
        &keys,
        &[VALUE, "800", "1 1 700 800 ch", "1"],
    )
    .await;
    let stored = stored(&reply);
    // The minimum (5 s) is longer than the key's TTL (800 ms): the TTL is not lengthened.
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "5000"]).await,
        Value::Int(1)
    );
    let pttl: i64 = cmd(&node, &["PTTL", keys[0]]).await;
    assert!((1..=800).contains(&pttl), "pttl {pttl}");
    // A live waiter queued behind a kept key is not handed it by the release.
    let _: () = cmd(&node, &["SET", keys[0], &stored, "PX", "5000"]).await;
    let queued = call(
        &node,
        &ACQUIRE_QUEUED,
        &keys,
        &[OTHER, "5000", "1 1 700 800 ch"],
    )
    .await;
    assert!(
        matches!(&queued, Value::Array(v) if v[0] == Value::Int(0)),
        "{queued:?}"
    );
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "2000"]).await,
        Value::Int(1)
    );
    assert_eq!(cmd::<String>(&node, &["GET", keys[0]]).await, stored);
    assert_eq!(
        cmd::<Vec<String>>(&node, &["LRANGE", keys[2], "0", "-1"]).await,
        [OTHER]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn redlock_nodes_stamp_and_keep_by_their_own_clock() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let (k, c) = ("lock:n", "lock:__fencing_counter__");
    let before = server_ms(&node).await;
    assert_eq!(
        call(&node, &ACQUIRE, &[k, c], &[VALUE, "5000", "1"]).await,
        Value::Array(vec![Value::Int(1), Value::Int(1)])
    );
    let value: String = cmd(&node, &["GET", k]).await;
    assert!(value.starts_with(VALUE.split(' ').next().unwrap_or_default()));
    assert!(acquired_at(&value) >= before, "{value}");
    assert_eq!(
        call(&node, &RELEASE, &[k], &[OTHER, "3000"]).await,
        Value::Int(0)
    );
    // The release names the token only (the node's value differs from the client's).
    let token = VALUE.split(' ').next().unwrap_or_default();
    assert_eq!(
        call(&node, &RELEASE, &[k], &[token, "3000"]).await,
        Value::Int(1)
    );
    let pttl: i64 = cmd(&node, &["PTTL", k]).await;
    assert!((2000..=3000).contains(&pttl), "pttl {pttl}");
    // Without the minimum: deleted.
    assert_eq!(call(&node, &RELEASE, &[k], &[token]).await, Value::Int(1));
    assert_eq!(cmd::<i64>(&node, &["EXISTS", k]).await, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_key_on_its_claim_window_is_kept_for_the_minimum_up_to_the_lease_ttl() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let keys = [
        "lock:h",
        "lock:__fencing_counter__",
        "lock:__waitq__{x}h",
        "lock:__waiters__{x}h",
    ];
    let reply = call(
        &node,
        &ACQUIRE_QUEUED,
        &keys,
        &[VALUE, "5000", "1 1 700 800 ch", "1"],
    )
    .await;
    let stored = stored(&reply);
    // A hand-over's claim window: the key lives 500 ms of a 5 s lease.
    let _: () = cmd(&node, &["SET", keys[0], &stored, "PX", "500"]).await;
    // Without the lease's TTL the key's TTL bounds the minimum: it ends with the claim window.
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "3000"]).await,
        Value::Int(1)
    );
    assert!(cmd::<i64>(&node, &["PTTL", keys[0]]).await <= 500);
    // With it (ARGV[3]) the minimum is kept, up to the lease's TTL.
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "3000", "5000"]).await,
        Value::Int(1)
    );
    let pttl: i64 = cmd(&node, &["PTTL", keys[0]]).await;
    assert!((2000..=3000).contains(&pttl), "pttl {pttl}");
    assert_eq!(cmd::<String>(&node, &["GET", keys[0]]).await, stored);
    // A lease TTL below what is left of the minimum is the bound.
    let _: () = cmd(&node, &["SET", keys[0], &stored, "PX", "500"]).await;
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE, "3000", "1000"]).await,
        Value::Int(1)
    );
    let pttl: i64 = cmd(&node, &["PTTL", keys[0]]).await;
    assert!((501..=1000).contains(&pttl), "pttl {pttl}");
}
