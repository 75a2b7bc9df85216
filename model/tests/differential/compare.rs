//! The differential test's comparisons: replies and keys, the real server's and the model's,
//! with time-valued numbers compared within a tolerance.

use lockcore_model::scripts::Reply;
use lockcore_model::store::{Data, Store};
use redis::aio::MultiplexedConnection;

/// How far a time-valued number may differ (the model reads `TIME` just before the script).
const TOLERANCE: u64 = 1_000;

pub(crate) fn from_redis(value: Result<redis::Value, redis::RedisError>) -> Reply {
    match value {
        Err(err) => Reply::Error(err.to_string()),
        Ok(redis::Value::Int(n)) => Reply::Int(n),
        Ok(redis::Value::BulkString(b)) => Reply::Bulk(String::from_utf8_lossy(&b).into_owned()),
        Ok(redis::Value::SimpleString(s)) => Reply::Bulk(s),
        Ok(redis::Value::Nil) => Reply::Nil,
        Ok(redis::Value::Array(items)) => {
            Reply::Array(items.into_iter().map(|v| from_redis(Ok(v))).collect())
        }
        Ok(other) => Reply::Error(format!("unexpected {other:?}")),
    }
}

/// Whether two texts match, digit runs of time-like size (≥ 1000) within the tolerance.
pub(crate) fn close(a: &str, b: &str) -> bool {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        let dx = x.iter().take_while(|c| c.is_ascii_digit()).count();
        let dy = y.iter().take_while(|c| c.is_ascii_digit()).count();
        if dx > 0 || dy > 0 {
            let (p, q) = (&a[a.len() - x.len()..][..dx], &b[b.len() - y.len()..][..dy]);
            let (m, n) = (
                p.parse::<u64>().unwrap_or(u64::MAX),
                q.parse::<u64>().unwrap_or(u64::MAX),
            );
            if p != q && !(m >= 1_000 && n >= 1_000 && m.abs_diff(n) <= TOLERANCE) {
                return false;
            }
            (x, y) = (&x[dx..], &y[dy..]);
            continue;
        }
        match (x.split_first(), y.split_first()) {
            (None, None) => return true,
            (Some((c, rest)), Some((d, rest2))) if c == d => (x, y) = (rest, rest2),
            _ => return false,
        }
    }
}

pub(crate) fn replies_match(real: &Reply, model: &Reply) -> bool {
    match (real, model) {
        (Reply::Error(_), Reply::Error(_)) => true,
        (Reply::Int(a), Reply::Int(b)) => close(&a.to_string(), &b.to_string()),
        (Reply::Bulk(a), Reply::Bulk(b)) => close(a, b),
        (Reply::Array(a), Reply::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| replies_match(x, y))
        }
        (a, b) => a == b,
    }
}

/// Every key of the real server as text: `key type value pttl`, in key order.
pub(crate) async fn real_keys(conn: &mut MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(conn)
        .await
        .unwrap_or_default();
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap_or_default();
        let value = match kind.as_str() {
            "string" => redis::cmd("GET")
                .arg(&key)
                .query_async::<String>(conn)
                .await
                .unwrap_or_default(),
            "list" => redis::cmd("LRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .query_async::<Vec<String>>(conn)
                .await
                .unwrap_or_default()
                .join(","),
            _ => {
                let hash: std::collections::BTreeMap<String, String> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(conn)
                    .await
                    .unwrap_or_default();
                hash.iter()
                    .map(|(f, v)| format!("{f}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            }
        };
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap_or(-3);
        out.push(format!("{key} {kind} {value} {pttl}"));
    }
    out
}

pub(crate) fn model_keys(store: &Store) -> Vec<String> {
    store
        .keys()
        .map(|(key, stored)| {
            let value = match &stored.data {
                Data::Str(s) => s.clone(),
                Data::List(l) => l.join(","),
                Data::Hash(h) => h
                    .iter()
                    .map(|(f, v)| format!("{f}={v}"))
                    .collect::<Vec<_>>()
                    .join(","),
            };
            format!(
                "{key} {} {value} {}",
                stored.data.type_name(),
                store.pttl(key)
            )
        })
        .collect()
}
