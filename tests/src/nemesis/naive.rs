//! The control's naive lock, as many lock libraries implement it: `SET key token NX PX ttl` with a
//! fixed retry delay, a plain `DEL` release (no owner check) and no fencing. A number from
//! `INCR` orders its acquisitions in the history (it is never checked by a resource), so that
//! the checker can see writes land out of order.

use std::sync::Mutex;
use std::time::Duration;

use rusqlite::Connection;

use super::workload::{Op, TTL_MS, WAIT_MS};
use crate::history::{Fun, Phase, duration_ns, now_ns};

/// The key of the control's acquisition counter.
const SEQ_KEY: &str = "nemesis-naive:seq";

/// `SET NX PX` until it succeeds or the wait budget is spent; the token and the sequence
/// number on success.
async fn acquire(op: &Op) -> Result<(String, u64, u64), String> {
    let mut redis = op.redis();
    let token = format!("{:032x}", fastrand::u128(..));
    let started = now_ns();
    let budget = duration_ns(Duration::from_millis(WAIT_MS));
    // Bounded by the wait budget, and by a count.
    for _ in 0..1_000 {
        let attempt = now_ns();
        let set: Result<Option<String>, redis::RedisError> = redis::cmd("SET")
            .arg(op.full_key())
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TTL_MS)
            .query_async(&mut redis)
            .await;
        match set {
            Ok(Some(_)) => {
                let seq: Result<u64, redis::RedisError> = redis::cmd("INCR")
                    .arg(SEQ_KEY)
                    .query_async(&mut redis)
                    .await;
                let seq = seq.map_err(|e| e.to_string())?;
                let deadline = attempt + duration_ns(Duration::from_millis(TTL_MS));
                return Ok((token, seq, deadline));
            }
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if now_ns().saturating_sub(started) > budget {
            return Err("contended".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err("contended".to_owned())
}

/// One control operation: naive acquire, the same body unfenced, `DEL`.
pub(super) async fn naive_op(op: &Op, db: &Mutex<Connection>) {
    op.record(Fun::Acquire, Phase::Invoke, |e| {
        e.note = Some("naive".into())
    });
    let (token, seq, deadline) = match acquire(op).await {
        Ok(acquired) => acquired,
        Err(why) => {
            op.record(Fun::Acquire, Phase::Fail, |e| e.note = Some(why));
            return;
        }
    };
    op.acquired(&token, seq, deadline);
    op.body(db, seq, false).await;
    op.release_invoke();
    let mut redis = op.redis();
    let del: Result<i64, redis::RedisError> = redis::cmd("DEL")
        .arg(op.full_key())
        .query_async(&mut redis)
        .await;
    match del {
        Ok(_) => op.record(Fun::Release, Phase::Ok, |_| {}),
        Err(e) => op.record(Fun::Release, Phase::Unknown, |ev| {
            ev.note = Some(e.to_string())
        }),
    }
}
