//! The share scripts (a semaphore's permits, a read-write lock's readers) against a real
//! redis-server, through their `KEYS`/`ARGV` contracts; and the plain scripts' grants to
//! queued share waiters.

use std::time::Duration;

use lockcore_tests::RedisServer;
use redis::Value;

use super::contract_tests::{call, cmd, ints, node};
use super::*;
use crate::protocol::call::Call;

pub(super) const KEYS: [&str; 5] = [
    "lock:p",
    "lock:__fencing_counter__",
    "lock:__waitq__{x}p",
    "lock:__waiters__{x}p",
    "lock:__shares__{x}p",
];
pub(super) const A: &str = "11111111-1111-4111-8111-111111111111";
pub(super) const B: &str = "22222222-2222-4222-8222-222222222222";
pub(super) const C: &str = "33333333-3333-4333-8333-333333333333";

pub(super) fn permit(token: &str, permits: u32) -> String {
    format!("{token} {{\"pid\":1,\"acquired_at\":5,\"permits\":{permits}}}")
}

pub(super) fn reader(token: &str) -> String {
    format!("{token} {{\"pid\":1,\"acquired_at\":5,\"mode\":\"read\"}}")
}

pub(super) fn first(reply: &Value) -> i64 {
    match reply {
        Value::Array(items) => match items.first() {
            Some(Value::Int(n)) => *n,
            _ => panic!("{reply:?}"),
        },
        _ => panic!("{reply:?}"),
    }
}

/// A live entry for a waiter (deadline far ahead) with the default counter.
fn entry(seq: u32, channel: &str) -> String {
    format!(
        "99999999999999|5000|{seq}|700|{}|{}{channel}",
        KEYS[1].len(),
        KEYS[1]
    )
}

#[tokio::test(flavor = "current_thread")]
async fn acquire_share_takes_free_permits_then_queues_and_refuses_another_kind() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let (a, b, c) = (permit(A, 2), permit(B, 2), permit(C, 2));
    assert_eq!(
        call(
            &node,
            &ACQUIRE_SHARE,
            &KEYS,
            &[&a, "5000", "1 1 700 800 ch"]
        )
        .await,
        ints(&[1, 1])
    );
    let marker: String = cmd(&node, &["GET", KEYS[0]]).await;
    assert_eq!(marker, "__shares__ {\"permits\":2}");
    assert!(cmd::<i64>(&node, &["PTTL", KEYS[0]]).await > 4_000);
    assert!(cmd::<i64>(&node, &["PTTL", KEYS[4]]).await > 4_000);
    assert_eq!(
        call(&node, &ACQUIRE_SHARE, &KEYS, &[&b, "5000", "0 0 0 0 "]).await,
        ints(&[1, 2])
    );
    assert_eq!(cmd::<i64>(&node, &["ZCARD", KEYS[4]]).await, 2);
    // Full: mode 0 answers with the time until the first share ends; mode 1 queues.
    let full = call(&node, &ACQUIRE_SHARE, &KEYS, &[&c, "5000", "0 0 0 0 "]).await;
    assert!(
        matches!(&full, Value::Array(v) if v[0] == Value::Int(0) && matches!(v[1], Value::Int(ms) if ms > 4_000)),
        "{full:?}"
    );
    assert_eq!(
        first(
            &call(
                &node,
                &ACQUIRE_SHARE,
                &KEYS,
                &[&c, "5000", "1 1 700 800 ch"]
            )
            .await
        ),
        0
    );
    assert_eq!(
        cmd::<Vec<String>>(&node, &["LRANGE", KEYS[2], "0", "-1"]).await,
        [c.as_str()]
    );
    // Another number of permits, or readers: {-2, the kind held}.
    let other = call(
        &node,
        &ACQUIRE_SHARE,
        &KEYS,
        &[&permit(C, 3), "5000", "0 0 0 0 "],
    )
    .await;
    assert_eq!(
        other,
        Value::Array(vec![
            Value::Int(-2),
            Value::BulkString(b"\"permits\":2".to_vec())
        ])
    );
    let read = call(
        &node,
        &ACQUIRE_SHARE,
        &KEYS,
        &[&reader(C), "5000", "0 0 0 0 "],
    )
    .await;
    assert_eq!(first(&read), -2);
    // A plain value (no kind) is refused; a plain holder is waited for.
    let plain = Call::new(&ACQUIRE_SHARE, 5, 8, 64)
        .arg(&KEYS[..])
        .arg(format!("{A} {{\"pid\":1}}"))
        .arg("5000")
        .arg("0 0 0 0 ")
        .invoke::<Value>(&mut node.clone())
        .await;
    assert!(plain.is_err(), "{plain:?}");
    let _: i64 = cmd(&node, &["DEL", KEYS[0], KEYS[2], KEYS[3], KEYS[4]]).await;
    let _: () = cmd(&node, &["SET", KEYS[0], "someone-else", "PX", "3000"]).await;
    let held = call(&node, &ACQUIRE_SHARE, &KEYS, &[&a, "5000", "0 0 0 0 "]).await;
    assert!(
        matches!(&held, Value::Array(v) if v[0] == Value::Int(0) && matches!(v[1], Value::Int(ms) if ms > 2_000)),
        "{held:?}"
    );
    let _: i64 = cmd(&node, &["DEL", KEYS[0]]).await;
    let _: i64 = cmd(&node, &["RPUSH", KEYS[0], "x"]).await;
    let list = call(&node, &ACQUIRE_SHARE, &KEYS, &[&a, "5000", "0 0 0 0 "]).await;
    assert_eq!(
        list,
        Value::Array(vec![Value::Int(-1), Value::BulkString(b"list".to_vec())])
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_newcomer_reader_queues_behind_a_live_waiter_and_a_recheck_takes_its_turn() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let (a, b) = (reader(A), reader(B));
    assert_eq!(
        first(
            &call(
                &node,
                &ACQUIRE_SHARE,
                &KEYS,
                &[&a, "5000", "1 1 700 800 ch"]
            )
            .await
        ),
        1
    );
    // A writer is queued (live): a new reader does not pass it.
    let writer = format!("{C} {{\"pid\":3,\"acquired_at\":5}}");
    let _: i64 = cmd(&node, &["RPUSH", KEYS[2], &writer]).await;
    let _: i64 = cmd(&node, &["HSET", KEYS[3], C, &entry(1, "ch:w")]).await;
    assert_eq!(
        first(&call(&node, &ACQUIRE_SHARE, &KEYS, &[&b, "5000", "0 0 0 0 "]).await),
        0
    );
    assert_eq!(
        cmd::<i64>(&node, &["ZCARD", KEYS[4]]).await,
        1,
        "the new reader took nothing"
    );
    assert_eq!(
        first(
            &call(
                &node,
                &ACQUIRE_SHARE,
                &KEYS,
                &[&b, "5000", "1 1 700 800 ch"]
            )
            .await
        ),
        0
    );
    assert_eq!(cmd::<i64>(&node, &["LLEN", KEYS[2]]).await, 2);
    // The reader releases: the writer is granted the key alone; the queued reader stays.
    assert_eq!(
        call(&node, &RELEASE_SHARE, &KEYS, &[&a]).await,
        Value::Int(1)
    );
    let held: String = cmd(&node, &["GET", KEYS[0]]).await;
    assert!(held.starts_with(C), "{held}");
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", KEYS[4]]).await,
        0,
        "no share left"
    );
    // The writer releases (plain release, with the share set named): the reader is granted.
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &KEYS, &[&held]).await,
        Value::Int(1)
    );
    assert_eq!(
        cmd::<String>(&node, &["GET", KEYS[0]]).await,
        "__shares__ {\"mode\":\"read\"}"
    );
    let score: Option<f64> = cmd(&node, &["ZSCORE", KEYS[4], B]).await;
    assert!(score.is_some(), "the queued reader holds a share");
    // Its re-check finds the grant (a missed wake-up): acquired, stamped.
    let recheck = call(
        &node,
        &ACQUIRE_SHARE,
        &KEYS,
        &[&b, "5000", "2 2 700 800 ch"],
    )
    .await;
    assert_eq!(first(&recheck), 1);
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", KEYS[2], KEYS[3]]).await,
        0,
        "the queue is empty"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_release_grants_consecutive_readers_together_and_stops_at_a_writer() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let holder = format!("{A} {{\"pid\":1,\"acquired_at\":5}}");
    let _: () = cmd(&node, &["SET", KEYS[0], &holder, "PX", "5000"]).await;
    let writer = "44444444-4444-4444-8444-444444444444 {\"pid\":4,\"acquired_at\":5}";
    for (value, token) in [
        (reader(B), B),
        (reader(C), C),
        (writer.to_owned(), &writer[..36]),
    ] {
        let _: i64 = cmd(&node, &["RPUSH", KEYS[2], &value]).await;
        let _: i64 = cmd(&node, &["HSET", KEYS[3], token, &entry(1, "ch")]).await;
    }
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &KEYS, &[&holder]).await,
        Value::Int(1)
    );
    assert_eq!(
        cmd::<i64>(&node, &["ZCARD", KEYS[4]]).await,
        2,
        "both readers"
    );
    assert!(
        cmd::<i64>(&node, &["PTTL", KEYS[0]]).await <= 700,
        "the claim window"
    );
    assert_eq!(
        cmd::<Vec<String>>(&node, &["LRANGE", KEYS[2], "0", "-1"]).await,
        [writer]
    );
    // Without the share set (an older caller), a reader at the head is woken to take its turn.
    let _: i64 = cmd(&node, &["DEL", KEYS[0], KEYS[2], KEYS[3], KEYS[4]]).await;
    let _: () = cmd(&node, &["SET", KEYS[0], &holder, "PX", "5000"]).await;
    let _: i64 = cmd(&node, &["RPUSH", KEYS[2], &reader(B)]).await;
    let _: i64 = cmd(&node, &["HSET", KEYS[3], B, &entry(1, "ch")]).await;
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &KEYS[..4], &[&holder]).await,
        Value::Int(1)
    );
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", KEYS[0]]).await,
        0,
        "freed, not granted"
    );
    assert_eq!(
        cmd::<i64>(&node, &["LLEN", KEYS[2]]).await,
        1,
        "the reader keeps its turn"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn release_and_renew_share_touch_only_live_shares() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let (a, b) = (permit(A, 3), permit(B, 3));
    call(&node, &ACQUIRE_SHARE, &KEYS, &[&a, "300", "0 0 0 0 "]).await;
    call(&node, &ACQUIRE_SHARE, &KEYS, &[&b, "5000", "0 0 0 0 "]).await;
    let pair = [KEYS[0], KEYS[4]];
    // Renew sets the deadline (never adds) and keeps the marker at least as long.
    assert_eq!(
        call(&node, &RENEW_SHARE, &pair, &[A, "8000"]).await,
        ints(&[1])
    );
    assert!(cmd::<i64>(&node, &["PTTL", KEYS[0]]).await > 7_000);
    assert_eq!(
        call(
            &node,
            &RENEW_SHARE,
            &[KEYS[0], KEYS[4], KEYS[0], KEYS[4]],
            &[C, "8000", B, "100"]
        )
        .await,
        ints(&[0, 1])
    );
    // Counts: two live, of the kind the marker names.
    let count = call(&node, &SHARES_COUNT, &pair, &[]).await;
    assert_eq!(
        count,
        Value::Array(vec![
            Value::Int(2),
            Value::Int(2),
            Value::BulkString(b"\"permits\":3".to_vec())
        ])
    );
    // B's lease (100 ms) ends: its release reports 0, renewal refuses it, and it is not counted.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        call(&node, &RENEW_SHARE, &pair, &[B, "8000"]).await,
        ints(&[0])
    );
    assert_eq!(
        call(&node, &RELEASE_SHARE, &KEYS, &[&b]).await,
        Value::Int(0)
    );
    assert_eq!(
        call(&node, &RELEASE_SHARE, &KEYS, &[&b]).await,
        Value::Int(0),
        "twice: nothing"
    );
    // The last share's release deletes the marker and the set.
    assert_eq!(
        call(&node, &RELEASE_SHARE, &KEYS, &[&a]).await,
        Value::Int(1)
    );
    assert_eq!(cmd::<i64>(&node, &["EXISTS", KEYS[0], KEYS[4]]).await, 0);
    assert_eq!(call(&node, &SHARES_COUNT, &pair, &[]).await, ints(&[0]));
    let _: () = cmd(&node, &["SET", KEYS[0], "plain"]).await;
    assert_eq!(call(&node, &SHARES_COUNT, &pair, &[]).await, ints(&[1]));
}
