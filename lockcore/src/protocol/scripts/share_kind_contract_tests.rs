//! The share scripts' rules on the kind of a key and on its marker, against a real
//! redis-server: a share counts only under the marker of its kind (renewal, release, and no
//! share admitted beside the live shares of a vanished marker); the marker lives exactly as long
//! as the latest share; a waiter that can never be served beside the shares held is refused when
//! its script sees them, and a release passes over it.

use lockcore_tests::RedisServer;
use redis::Value;

use super::contract_tests::{call, cmd, ints, node};
use super::share_contract_tests::{A, B, C, KEYS, first, permit, reader};
use super::*;

const PAIR: [&str; 2] = [KEYS[0], KEYS[4]];

fn plain(token: &str) -> String {
    format!("{token} {{\"pid\":1,\"acquired_at\":5}}")
}

fn refused(kind: &str) -> Value {
    Value::Array(vec![Value::Int(-2), Value::BulkString(kind.into())])
}

/// Queues `value` by hand with a live entry (deadline far ahead) and the default counter.
async fn queue(node: &crate::transport::node::Node, value: &str) {
    let entry = format!("99999999999999|5000|1|700|{}|{}ch", KEYS[1].len(), KEYS[1]);
    let _: i64 = cmd(node, &["RPUSH", KEYS[2], value]).await;
    let _: i64 = cmd(node, &["HSET", KEYS[3], &value[..36], &entry]).await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_share_renews_and_releases_only_under_the_marker_of_its_kind() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let (a, b) = (permit(A, 2), permit(B, 2));
    for value in [&a, &b] {
        assert_eq!(
            first(&call(&node, &ACQUIRE_SHARE, &KEYS, &[value, "5000", "0 0 0 0 "]).await),
            1
        );
    }
    // With its marker: renewed, and the marker follows the latest deadline, shorter too.
    assert_eq!(
        call(
            &node,
            &RENEW_SHARE,
            &[KEYS[0], KEYS[4], KEYS[0], KEYS[4]],
            &[&a, "300", &b, "200"]
        )
        .await,
        ints(&[1, 1])
    );
    let ttl: i64 = cmd(&node, &["PTTL", KEYS[0]]).await;
    assert!((1..=300).contains(&ttl), "{ttl}");
    let ttl: i64 = cmd(&node, &["PTTL", KEYS[4]]).await;
    assert!((1..=300).contains(&ttl), "{ttl}");
    // Under a marker of another kind, or none: lost, and its member is dropped.
    let _: () = cmd(
        &node,
        &["SET", KEYS[0], "__shares__ {\"permits\":3}", "PX", "5000"],
    )
    .await;
    assert_eq!(
        call(&node, &RENEW_SHARE, &PAIR, &[&a, "5000"]).await,
        ints(&[0])
    );
    let _: i64 = cmd(&node, &["DEL", KEYS[0]]).await;
    assert_eq!(
        call(&node, &RENEW_SHARE, &PAIR, &[&b, "5000"]).await,
        ints(&[0])
    );
    assert_eq!(cmd::<i64>(&node, &["EXISTS", KEYS[4]]).await, 0);
    // A release without the marker is no release of a held share.
    call(&node, &ACQUIRE_SHARE, &KEYS, &[&a, "5000", "0 0 0 0 "]).await;
    let _: () = cmd(&node, &["SET", KEYS[0], &plain(C), "PX", "5000"]).await;
    assert_eq!(
        call(&node, &RELEASE_SHARE, &KEYS, &[&a]).await,
        Value::Int(0)
    );
    assert_eq!(cmd::<String>(&node, &["GET", KEYS[0]]).await, plain(C));
}

#[tokio::test(flavor = "current_thread")]
async fn no_share_is_admitted_beside_the_live_shares_of_a_vanished_marker() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let a = reader(A);
    call(&node, &ACQUIRE_SHARE, &KEYS, &[&a, "5000", "0 0 0 0 "]).await;
    let _: i64 = cmd(&node, &["DEL", KEYS[0]]).await;
    for (value, ticket) in [(permit(B, 1), "1 1 700 800 ch"), (reader(C), "0 0 0 0 ")] {
        let reply = call(&node, &ACQUIRE_SHARE, &KEYS, &[&value, "5000", ticket]).await;
        assert!(
            matches!(&reply, Value::Array(v) if v[0] == Value::Int(0) && matches!(v[1], Value::Int(ms) if ms > 4_000)),
            "{reply:?}"
        );
    }
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", KEYS[0]]).await,
        0,
        "no marker"
    );
    assert_eq!(cmd::<i64>(&node, &["ZCARD", KEYS[4]]).await, 1);
    assert_eq!(
        call(&node, &SHARES_COUNT, &PAIR, &[]).await,
        ints(&[3, 1]),
        "counted as keeping the key"
    );
    // The reader's release (lost: its marker is gone) lets the queued permit in.
    assert_eq!(
        call(&node, &RELEASE_SHARE, &KEYS, &[&a]).await,
        Value::Int(0)
    );
    assert_eq!(
        cmd::<String>(&node, &["GET", KEYS[0]]).await,
        "__shares__ {\"permits\":1}"
    );
    assert!(
        cmd::<Option<f64>>(&node, &["ZSCORE", KEYS[4], B])
            .await
            .is_some()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_waiter_of_another_kind_is_refused_when_its_script_sees_the_marker() {
    let server = RedisServer::start();
    let node = node(&server).await;
    // A re-check serves the waiter ahead (a semaphore of 3), then sees that marker.
    queue(&node, &permit(A, 3)).await;
    queue(&node, &permit(B, 5)).await;
    let reply = call(
        &node,
        &ACQUIRE_SHARE,
        &KEYS,
        &[&permit(B, 5), "5000", "2 2 700 800 ch"],
    )
    .await;
    assert_eq!(reply, refused("\"permits\":3"));
    assert!(
        cmd::<Option<f64>>(&node, &["ZSCORE", KEYS[4], A])
            .await
            .is_some()
    );
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", KEYS[2], KEYS[3]]).await,
        0,
        "the refused waiter left the queue"
    );
    // A plain lock's re-check, the same; and its first attempt on the semaphore's key.
    let _: i64 = cmd(&node, &["DEL", KEYS[0], KEYS[4]]).await;
    queue(&node, &permit(A, 3)).await;
    queue(&node, &plain(C)).await;
    let reply = call(
        &node,
        &ACQUIRE_QUEUED,
        &KEYS,
        &[&plain(C), "5000", "2 2 700 800 ch"],
    )
    .await;
    assert_eq!(reply, refused("\"permits\":3"));
    assert_eq!(cmd::<i64>(&node, &["EXISTS", KEYS[2], KEYS[3]]).await, 0);
    for ticket in ["1 1 700 800 ch", "0 0 0 0 "] {
        let reply = call(
            &node,
            &ACQUIRE_QUEUED,
            &KEYS[..4],
            &[&plain(C), "5000", ticket],
        )
        .await;
        assert_eq!(reply, refused("\"permits\":3"), "{ticket}");
    }
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", KEYS[2]]).await,
        0,
        "not queued"
    );
    // Behind readers a plain lock waits, queued.
    let _: i64 = cmd(&node, &["DEL", KEYS[0], KEYS[4]]).await;
    queue(&node, &reader(A)).await;
    queue(&node, &plain(C)).await;
    let reply = call(
        &node,
        &ACQUIRE_QUEUED,
        &KEYS,
        &[&plain(C), "5000", "2 2 700 800 ch"],
    )
    .await;
    assert_eq!(first(&reply), 0);
    assert_eq!(
        cmd::<Vec<String>>(&node, &["LRANGE", KEYS[2], "0", "-1"]).await,
        [plain(C)]
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_release_passes_over_a_waiter_that_can_never_join_the_shares_and_wakes_it() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let holder = plain("44444444-4444-4444-8444-444444444444");
    let _: () = cmd(&node, &["SET", KEYS[0], &holder, "PX", "5000"]).await;
    for value in [
        permit(A, 3),
        permit(B, 5),
        plain(C),
        permit(A.replace('1', "5").as_str(), 3),
    ] {
        queue(&node, &value).await;
    }
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &KEYS, &[&holder]).await,
        Value::Int(1)
    );
    assert_eq!(
        cmd::<i64>(&node, &["ZCARD", KEYS[4]]).await,
        2,
        "both permits of 3, past the others"
    );
    assert_eq!(cmd::<i64>(&node, &["EXISTS", KEYS[2], KEYS[3]]).await, 0);
}
