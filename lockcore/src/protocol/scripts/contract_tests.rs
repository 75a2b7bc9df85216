//! Each script against a real redis-server, through its `KEYS`/`ARGV` contract as its file's
//! header states it: what it replies and what it leaves in Redis.

use std::time::Duration;

use lockcore_tests::RedisServer;
use redis::Value;

use super::*;
use crate::protocol::call::Call;
use crate::protocol::lua::Lua;
use crate::transport::connect::{ConnectOptions, client};
use crate::transport::node::Node;
use crate::transport::tls::TlsFiles;

pub(super) async fn node(server: &RedisServer) -> Node {
    let options = ConnectOptions {
        connection_timeout: Duration::from_secs(2),
        response_timeout: Duration::from_secs(2),
        tcp_nodelay: false,
        tls: TlsFiles::default(),
    };
    let client = client(&server.url(), &options).unwrap_or_else(|e| panic!("{e}"));
    Node::plain(client, &options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

pub(super) async fn call(node: &Node, script: &Lua, keys: &[&str], args: &[&str]) -> Value {
    let mut call = Call::new(script, keys.len(), keys.len() + args.len(), 256);
    for key in keys {
        call.arg(*key);
    }
    for arg in args {
        call.arg(*arg);
    }
    call.invoke(&mut node.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

pub(super) async fn cmd<T: redis::FromRedisValue>(node: &Node, words: &[&str]) -> T {
    let mut cmd = redis::cmd(words[0]);
    for word in &words[1..] {
        cmd.arg(*word);
    }
    cmd.query_async(&mut node.clone())
        .await
        .unwrap_or_else(|e| panic!("{words:?}: {e}"))
}

pub(super) fn ints(values: &[i64]) -> Value {
    Value::Array(values.iter().map(|v| Value::Int(*v)).collect())
}

const VALUE: &str = "11111111-1111-4111-8111-111111111111 {\"pid\":1,\"acquired_at\":5}";
const OTHER: &str = "22222222-2222-4222-8222-222222222222 {\"pid\":2,\"acquired_at\":6}";

#[tokio::test(flavor = "current_thread")]
async fn acquire_sets_mints_reports_the_holder_and_refuses_other_types() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let (k, c) = ("lock:a", "lock:__fencing_counter__");
    assert_eq!(
        call(&node, &ACQUIRE, &[k, c], &[VALUE, "5000"]).await,
        ints(&[1, 1])
    );
    let held = call(&node, &ACQUIRE, &[k, c], &[OTHER, "5000"]).await;
    assert!(
        matches!(&held, Value::Array(v) if v[0] == Value::Int(0) && matches!(v[1], Value::Int(ms) if ms > 4000)),
        "{held:?}"
    );
    assert_eq!(cmd::<String>(&node, &["GET", k]).await, VALUE);
    assert_eq!(
        call(&node, &ACQUIRE, &["lock:b", "lock:b"], &[VALUE, "5000"]).await,
        ints(&[1, 0]),
        "fencing off"
    );
    let _: i64 = cmd(&node, &["RPUSH", "lock:l", "x"]).await;
    let list = call(&node, &ACQUIRE, &["lock:l", c], &[VALUE, "5000"]).await;
    let Value::Array(list) = list else {
        panic!("{list:?}")
    };
    assert_eq!(list[0], Value::Int(-1));
    assert_eq!(
        redis::from_redis_value_ref::<String>(&list[1])
            .ok()
            .as_deref(),
        Some("list")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn acquire_queued_takes_a_free_key_queues_rechecks_and_takes_its_turn() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let keys = [
        "lock:q",
        "lock:__fencing_counter__",
        "lock:__waitq__{x}q",
        "lock:__waiters__{x}q",
    ];
    // Mode 1, free: SET NX and INCR only.
    assert_eq!(
        call(
            &node,
            &ACQUIRE_QUEUED,
            &keys,
            &[OTHER, "5000", "1 1 700 800 ch"]
        )
        .await,
        ints(&[1, 1])
    );
    // Mode 1, held: queued with a live entry, and the holder's PTTL.
    let queued = call(
        &node,
        &ACQUIRE_QUEUED,
        &keys,
        &[VALUE, "5000", "1 1 700 800 ch"],
    )
    .await;
    assert!(
        matches!(&queued, Value::Array(v) if v[0] == Value::Int(0)),
        "{queued:?}"
    );
    assert_eq!(
        cmd::<Vec<String>>(&node, &["LRANGE", keys[2], "0", "-1"]).await,
        [VALUE]
    );
    let entry: String = cmd(
        &node,
        &["HGET", keys[3], "11111111-1111-4111-8111-111111111111"],
    )
    .await;
    assert!(
        entry.ends_with("|5000|1|700|24|lock:__fencing_counter__ch"),
        "{entry}"
    );
    // Mode 0 while a live waiter is queued: a free key is not taken.
    let _: i64 = cmd(&node, &["DEL", keys[0]]).await;
    let once = call(&node, &ACQUIRE_QUEUED, &keys, &[OTHER, "5000", "0 0 0 0 "]).await;
    assert_eq!(once, ints(&[0, 0]));
    // Mode 2, free key, this waiter first in line: taken, stamped with the server's clock.
    let turn = call(
        &node,
        &ACQUIRE_QUEUED,
        &keys,
        &[VALUE, "5000", "2 2 700 800 ch"],
    )
    .await;
    let Value::Array(turn) = turn else {
        panic!("{turn:?}")
    };
    assert_eq!(turn[0], Value::Int(1));
    let stored: String = redis::from_redis_value_ref(&turn[2]).unwrap_or_default();
    assert!(
        stored.starts_with("11111111-1111-4111-8111-111111111111 {\"pid\":1,\"acquired_at\":1"),
        "{stored}"
    );
    assert_eq!(cmd::<String>(&node, &["GET", keys[0]]).await, stored);
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", keys[2], keys[3]]).await,
        0,
        "the queue is empty"
    );
    // Mode 0 with no queue at all: the fast path (EXISTS, SET NX PX GET, INCR), no queue read;
    // held, the holder's PTTL.
    let _: i64 = cmd(&node, &["DEL", keys[0]]).await;
    let _: String = cmd(&node, &["CONFIG", "RESETSTAT"]).await;
    let once = call(&node, &ACQUIRE_QUEUED, &keys, &[OTHER, "5000", "0 0 0 0 "]).await;
    assert_eq!(once, ints(&[1, 3]));
    let stats: String = cmd(&node, &["INFO", "commandstats"]).await;
    assert!(
        stats.contains("cmdstat_exists") && !stats.contains("cmdstat_lindex"),
        "{stats}"
    );
    let held = call(&node, &ACQUIRE_QUEUED, &keys, &[VALUE, "5000", "0 0 0 0 "]).await;
    assert!(
        matches!(&held, Value::Array(v) if v[0] == Value::Int(0) && v[1] != Value::Int(0)),
        "{held:?}"
    );
    let bad = Call::new(&ACQUIRE_QUEUED, 4, 7, 64)
        .arg(&keys[..])
        .arg(VALUE)
        .arg("5000")
        .arg("9 x")
        .invoke::<Value>(&mut node.clone())
        .await;
    assert!(bad.is_err(), "a malformed ticket is an error: {bad:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn acquire_all_takes_every_key_or_none() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let c = "lock:__fencing_counter__";
    let keys = [
        "lock:m1",
        c,
        "lock:__waitq__{a}m1",
        "lock:m2",
        c,
        "lock:__waitq__{b}m2",
    ];
    assert_eq!(
        call(&node, &ACQUIRE_ALL, &keys, &["5000", VALUE, OTHER]).await,
        ints(&[1, 1, 2])
    );
    let _: i64 = cmd(&node, &["DEL", "lock:m1"]).await;
    assert_eq!(
        call(&node, &ACQUIRE_ALL, &keys, &["5000", VALUE, OTHER]).await,
        ints(&[0])
    );
    assert_eq!(
        cmd::<i64>(&node, &["EXISTS", "lock:m1"]).await,
        0,
        "nothing written"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn release_handoff_deletes_grants_withdraws_and_refuses_others() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let keys = [
        "lock:r",
        "lock:__fencing_counter__",
        "lock:__waitq__{x}r",
        "lock:__waiters__{x}r",
    ];
    let _: () = cmd(&node, &["SET", keys[0], VALUE, "PX", "5000"]).await;
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[OTHER]).await,
        Value::Int(-1)
    );
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE]).await,
        Value::Int(1)
    );
    assert_eq!(cmd::<i64>(&node, &["EXISTS", keys[0]]).await, 0);
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE]).await,
        Value::Int(0)
    );
    // A holder and a live waiter: the release grants the key to the waiter, mints its token
    // with the given counter and publishes the grant on its channel.
    let _: () = cmd(&node, &["SET", keys[0], VALUE, "PX", "5000"]).await;
    let _: () = cmd(&node, &["SET", keys[1], "41"]).await;
    let _: i64 = cmd(&node, &["RPUSH", keys[2], OTHER]).await;
    let entry = format!(
        "99999999999999|5000|3|700|{}|{}ch:w",
        keys[1].len(),
        keys[1]
    );
    let _: i64 = cmd(
        &node,
        &[
            "HSET",
            keys[3],
            "22222222-2222-4222-8222-222222222222",
            &entry,
        ],
    )
    .await;
    let mut sub = redis::Client::open(server.url())
        .unwrap_or_else(|e| panic!("{e}"))
        .get_async_pubsub()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    sub.subscribe("ch:w")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE]).await,
        Value::Int(1)
    );
    let granted: String = cmd(&node, &["GET", keys[0]]).await;
    assert!(
        granted.starts_with("22222222-2222-4222-8222-222222222222 "),
        "{granted}"
    );
    assert!(
        cmd::<i64>(&node, &["PTTL", keys[0]]).await <= 700,
        "the claim window"
    );
    assert_eq!(cmd::<String>(&node, &["GET", keys[1]]).await, "42");
    let message = tokio::time::timeout(
        Duration::from_secs(2),
        futures_util::StreamExt::next(&mut sub.on_message()),
    )
    .await
    .ok()
    .flatten()
    .unwrap_or_else(|| panic!("no wake-up"));
    let payload: String = message.get_payload().unwrap_or_default();
    assert_eq!(
        payload,
        format!("22222222-2222-4222-8222-222222222222 42 3 {granted}")
    );
    // A waiter that gives up withdraws: its queue entry and value go.
    let _: i64 = cmd(&node, &["RPUSH", keys[2], VALUE]).await;
    let _: i64 = cmd(
        &node,
        &[
            "HSET",
            keys[3],
            "11111111-1111-4111-8111-111111111111",
            &entry,
        ],
    )
    .await;
    assert_eq!(
        call(&node, &RELEASE_HANDOFF, &keys, &[VALUE]).await,
        Value::Int(-1)
    );
    assert_eq!(cmd::<i64>(&node, &["EXISTS", keys[2], keys[3]]).await, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn release_renew_and_raise_compare_before_they_write() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let _: () = cmd(&node, &["SET", "lock:x", VALUE, "PX", "5000"]).await;
    let _: () = cmd(&node, &["SET", "lock:y", OTHER, "PX", "5000"]).await;
    assert_eq!(
        call(&node, &RELEASE, &["lock:y"], &[VALUE]).await,
        Value::Int(0)
    );
    let token = "11111111-1111-4111-8111-111111111111";
    let renewed = call(
        &node,
        &RENEW,
        &["lock:x", "lock:y"],
        &[token, "9000", token, "9000"],
    )
    .await;
    assert_eq!(renewed, ints(&[1, 0]));
    assert!(cmd::<i64>(&node, &["PTTL", "lock:x"]).await > 8000);
    assert!(cmd::<i64>(&node, &["PTTL", "lock:y"]).await <= 5000);
    assert_eq!(
        call(&node, &RELEASE, &["lock:x"], &[token]).await,
        Value::Int(1)
    );
    let _: () = cmd(&node, &["SET", "lock:c", "9007199254740993"]).await;
    assert_eq!(
        call(&node, &RAISE_COUNTER, &["lock:c"], &["9007199254740995"]).await,
        Value::Int(1)
    );
    assert_eq!(
        cmd::<String>(&node, &["GET", "lock:c"]).await,
        "9007199254740995"
    );
    assert_eq!(
        call(&node, &RAISE_COUNTER, &["lock:c"], &["9007199254740994"]).await,
        Value::Int(1)
    );
    assert_eq!(
        cmd::<String>(&node, &["GET", "lock:c"]).await,
        "9007199254740995",
        "never lowered"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn write_if_held_and_fenced_set_write_only_when_allowed() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let (lock, record) = ("lock:__idem__{t}lock:r", "lock:__idem__{t}rec:r");
    assert_eq!(
        call(
            &node,
            &WRITE_IF_HELD,
            &[lock, record],
            &[VALUE, "{}", "5000"]
        )
        .await,
        Value::Int(0)
    );
    assert_eq!(cmd::<i64>(&node, &["EXISTS", record]).await, 0);
    let _: () = cmd(&node, &["SET", lock, VALUE, "PX", "5000"]).await;
    assert_eq!(
        call(
            &node,
            &WRITE_IF_HELD,
            &[lock, record],
            &[VALUE, "{}", "5000"]
        )
        .await,
        Value::Int(1)
    );
    assert!(cmd::<i64>(&node, &["PTTL", record]).await > 4000);
    let row = "stock:1";
    let written = call(&node, &FENCED_SET, &[row], &["9007199254740995", "a"]).await;
    assert!(
        matches!(&written, Value::Array(v) if v[0] == Value::Int(1)),
        "{written:?}"
    );
    let stale = call(&node, &FENCED_SET, &[row], &["9007199254740994", "b"]).await;
    assert!(
        matches!(&stale, Value::Array(v) if v[0] == Value::Int(0)),
        "{stale:?}"
    );
    assert_eq!(cmd::<String>(&node, &["HGET", row, "value"]).await, "a");
    let bad = Call::new(&FENCED_SET, 1, 3, 16)
        .arg(row)
        .arg("007")
        .arg("c")
        .invoke::<Value>(&mut node.clone())
        .await;
    assert!(bad.is_err(), "{bad:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn read_key_reports_type_value_pttl_and_the_clock_and_writes_nothing() {
    let server = RedisServer::start();
    let node = node(&server).await;
    let read = |key: &'static str| {
        let node = node.clone();
        async move {
            let reply: (String, Option<String>, i64, u64, u64) = redis::cmd("EVAL")
                .arg(READ_KEY)
                .arg(1)
                .arg(key)
                .query_async(&mut node.clone())
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            reply
        }
    };
    let _: () = cmd(&node, &["SET", "lock:s", VALUE, "PX", "5000"]).await;
    let _: i64 = cmd(&node, &["RPUSH", "lock:l", "x"]).await;
    let (kind, value, pttl, secs, _) = read("lock:s").await;
    assert_eq!((kind.as_str(), value.as_deref()), ("string", Some(VALUE)));
    assert!((4000..=5000).contains(&pttl), "{pttl}");
    assert!(secs > 1_700_000_000, "the server's clock: {secs}");
    let (kind, value, pttl, ..) = read("lock:l").await;
    assert_eq!((kind.as_str(), value, pttl), ("list", None, -1));
    let (kind, value, pttl, ..) = read("lock:gone").await;
    assert_eq!((kind.as_str(), value, pttl), ("none", None, -2));
    assert_eq!(cmd::<i64>(&node, &["DBSIZE"]).await, 2, "nothing written");
}
