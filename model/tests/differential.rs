//! The model's server against a real one: seeded random sequences of script calls, made the way
//! lockcore makes them (`lockcore::__private::scripts::call`: the library's assembled scripts,
//! `EVALSHA` through its `Call`), run on a redis-server spawned by the harness and on the
//! model's [`Store`] with the model's re-statement of each script. After every call the replies
//! and every key (type, value, TTL) must match; time-valued numbers (`TIME`-based deadlines and
//! stamps, TTLs) within a tolerance, all else exactly. A failing sequence is shrunk by proptest.
//!
//! `a_script_the_model_does_not_follow_is_caught` shows the test can fail: the same sequences
//! against a model whose release skips the owner check.

use std::io::Write;
use std::time::Duration;

use lockcore::__private::scripts::{Script, call, ticket};
use lockcore_model::scripts::plain::{self, BulkKey};
use lockcore_model::scripts::queued::{self, QueueKeys};
use lockcore_model::scripts::{Constants, Reply, ScriptBug};
use lockcore_model::store::Store;
use lockcore_tests::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngAlgorithm, TestRng, TestRunner};
use redis::aio::MultiplexedConnection;

#[path = "differential/compare.rs"]
mod compare;

use compare::{from_redis, model_keys, real_keys, replies_match};

const LOCKS: [&str; 2] = ["lock:a", "lock:b"];
const COUNTER: &str = "lock:__fencing_counter__";
/// A lease long enough that nothing expires by itself during a case: expiry is an explicit step.
const LONG: u64 = 60_000;

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Op {
    /// `acquire_queued.lua`: who, which lock, the attempt (`None`: mode 0), claim and lease
    /// (0 or long), fenced.
    AcquireQueued(usize, usize, Option<u64>, bool, bool, bool),
    /// `release_handoff.lua`: who, which lock, fenced.
    ReleaseHandoff(usize, usize, bool),
    /// `acquire.lua`: who, which lock, fenced.
    Acquire(usize, usize, bool),
    /// `release.lua`: who, which lock.
    Release(usize, usize),
    /// `renew.lua` of both locks: who, its ttl.
    Renew(usize, u64),
    /// `acquire_all.lua` of both locks: who.
    AcquireAll(usize),
    /// `raise_counter.lua` to a token.
    RaiseCounter(u64),
    /// A key vanishes as if it expired (0..2 the locks, 2..4 queue / entries of lock a).
    Expire(usize),
    /// A foreign list at a lock key.
    Foreign(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let who = 0..4usize;
    let lock = 0..2usize;
    prop_oneof![
        6 => (who.clone(), lock.clone(), prop::option::weighted(0.8, 1..4u64), any::<bool>(), prop::bool::weighted(0.7), prop::bool::weighted(0.8))
            .prop_map(|(w, l, s, c, e, f)| Op::AcquireQueued(w, l, s, c, e, f)),
        4 => (who.clone(), lock.clone(), prop::bool::weighted(0.8)).prop_map(|(w, l, f)| Op::ReleaseHandoff(w, l, f)),
        1 => (who.clone(), lock.clone(), any::<bool>()).prop_map(|(w, l, f)| Op::Acquire(w, l, f)),
        1 => (who.clone(), lock.clone()).prop_map(|(w, l)| Op::Release(w, l)),
        1 => (who.clone(), prop_oneof![Just(LONG), Just(2 * LONG)]).prop_map(|(w, t)| Op::Renew(w, t)),
        1 => who.clone().prop_map(Op::AcquireAll),
        1 => (0..20u64).prop_map(Op::RaiseCounter),
        2 => (0..4usize).prop_map(Op::Expire),
        1 => lock.prop_map(Op::Foreign),
    ]
}

/// Waiter `who`'s lock value: a token and holder metadata with an `acquired_at` to stamp.
/// Waiter 3's is a semaphore's (`,"permits":2}` at its end): queued, it stands for a share
/// waiter in the queue of a plain lock's scripts, which wake it to take its turn itself.
fn value(who: usize) -> String {
    if who == 3 {
        return format!("t{who} {{\"pid\":{who},\"acquired_at\":0,\"permits\":2}}");
    }
    format!("t{who} {{\"pid\":{who},\"acquired_at\":0}}")
}

fn queue_keys(lock: usize, fenced: bool) -> (String, String, String) {
    let (queue, entries) = lockcore::keyspace::waiter_queue_keys("lock:", LOCKS[lock]);
    let counter = if fenced { COUNTER } else { LOCKS[lock] };
    (counter.to_owned(), queue, entries)
}

/// The call's script, keys and arguments, as the library sends them.
fn call_of(op: &Op) -> Option<(Script, Vec<String>, Vec<String>)> {
    let ms = |n: u64| n.to_string();
    Some(match *op {
        Op::AcquireQueued(who, lock, seq, claim, lease, fenced) => {
            let (counter, queue, entries) = queue_keys(lock, fenced);
            let window = |long: bool| Duration::from_millis(if long { LONG } else { 0 });
            let t = ticket(
                seq,
                window(claim),
                window(lease),
                &format!("lock:__wake__:{who}"),
            );
            (
                Script::AcquireQueued,
                vec![LOCKS[lock].into(), counter, queue, entries],
                vec![value(who), ms(LONG), t],
            )
        }
        Op::ReleaseHandoff(who, lock, fenced) => {
            let (counter, queue, entries) = queue_keys(lock, fenced);
            (
                Script::ReleaseHandoff,
                vec![LOCKS[lock].into(), counter, queue, entries],
                vec![value(who)],
            )
        }
        Op::Acquire(who, lock, fenced) => {
            let counter = if fenced { COUNTER } else { LOCKS[lock] };
            (
                Script::Acquire,
                vec![LOCKS[lock].into(), counter.into()],
                vec![value(who), ms(LONG)],
            )
        }
        Op::Release(who, lock) => (
            Script::Release,
            vec![LOCKS[lock].into()],
            vec![format!("t{who}")],
        ),
        Op::Renew(who, ttl) => (
            Script::Renew,
            LOCKS.iter().map(|&k| k.to_owned()).collect(),
            vec![format!("t{who}"), ms(ttl), value(who), ms(ttl)],
        ),
        Op::AcquireAll(who) => {
            let mut keys = Vec::new();
            for (lock, key) in LOCKS.iter().enumerate() {
                let (_, queue, _) = queue_keys(lock, true);
                keys.extend([(*key).to_owned(), COUNTER.to_owned(), queue]);
            }
            (
                Script::AcquireAll,
                keys,
                vec![ms(LONG), value(who), value(who)],
            )
        }
        Op::RaiseCounter(n) => (
            Script::RaiseCounter,
            vec![COUNTER.into()],
            vec![n.to_string()],
        ),
        Op::Expire(_) | Op::Foreign(_) => return None,
    })
}

/// The model's run of the call.
fn model_call(
    store: &mut Store,
    bug: ScriptBug,
    script: Script,
    keys: &[String],
    args: &[String],
) -> (Reply, usize) {
    let k: Vec<&str> = keys.iter().map(String::as_str).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let num = |s: &str| s.parse::<u64>().unwrap_or(0);
    let constants = Constants::LOCKCORE;
    let (reply, published) = match script {
        Script::AcquireQueued => {
            let keys = QueueKeys {
                lock: k[0],
                counter: k[1],
                queue: k[2],
                entries: k[3],
            };
            queued::acquire_queued(store, keys, constants, a[0], a[1], a[2])
        }
        Script::ReleaseHandoff => {
            let keys = QueueKeys {
                lock: k[0],
                counter: k[1],
                queue: k[2],
                entries: k[3],
            };
            queued::release_handoff(store, keys, constants, bug, a[0])
        }
        Script::Acquire => plain::acquire(store, k[0], k[1], a[0], num(a[1])),
        Script::Release => plain::release(store, k[0], a[0]),
        Script::Renew => {
            let leases: Vec<(&str, &str, u64)> = (0..k.len())
                .map(|i| (k[i], a[2 * i], num(a[2 * i + 1])))
                .collect();
            plain::renew(store, &leases)
        }
        Script::AcquireAll => {
            let bulk: Vec<BulkKey<'_>> = (0..k.len() / 3)
                .map(|i| BulkKey {
                    lock: k[3 * i],
                    counter: k[3 * i + 1],
                    queue: k[3 * i + 2],
                    value: a[i + 1],
                })
                .collect();
            plain::acquire_all(store, &bulk, num(a[0]))
        }
        Script::RaiseCounter => plain::raise_counter(store, k[0], a[0]),
    };
    (reply, published.len())
}

async fn server_ms(conn: &mut MultiplexedConnection) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap_or((0, 0));
    secs * 1_000 + micros / 1_000
}

/// Runs `ops` on a flushed server and on a fresh model; the first difference, if any.
async fn run(
    conn: &mut MultiplexedConnection,
    bug: ScriptBug,
    ops: &[Op],
    grants: &mut usize,
) -> Result<(), String> {
    let _: () = redis::cmd("FLUSHALL")
        .query_async(conn)
        .await
        .map_err(|e| e.to_string())?;
    let mut store = Store::new(server_ms(conn).await);
    for (n, op) in ops.iter().enumerate() {
        store.advance(server_ms(conn).await);
        let (real, model) = match (op, call_of(op)) {
            (_, Some((script, keys, args))) => {
                let k: Vec<&str> = keys.iter().map(String::as_str).collect();
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                let real = from_redis(call(script, &k, &a, conn).await);
                let (model, published) = model_call(&mut store, bug, script, &keys, &args);
                *grants += published;
                (real, model)
            }
            (Op::Expire(i), None) => {
                let (queue, entries) = lockcore::keyspace::waiter_queue_keys("lock:", LOCKS[0]);
                let key = [LOCKS[0].to_owned(), LOCKS[1].to_owned(), queue, entries][*i].clone();
                let real: i64 = redis::cmd("DEL")
                    .arg(&key)
                    .query_async(conn)
                    .await
                    .map_err(|e| e.to_string())?;
                (Reply::Int(real), Reply::Int(i64::from(store.del(&key))))
            }
            (Op::Foreign(lock), _) => {
                let key = LOCKS[*lock];
                let real = from_redis(
                    redis::cmd("RPUSH")
                        .arg(key)
                        .arg("x")
                        .query_async(conn)
                        .await,
                );
                let model = match store.rpush(key, "x") {
                    Ok(()) => real.clone(),
                    Err(_) => Reply::Error("WRONGTYPE".into()),
                };
                (real, model)
            }
            (_, None) => continue,
        };
        if !replies_match(&real, &model) {
            return Err(format!(
                "step {n} {op:?}: redis replied {real:?}, the model {model:?}"
            ));
        }
        let (real_state, model_state) = (real_keys(conn).await, model_keys(&store));
        let same = real_state.len() == model_state.len()
            && real_state
                .iter()
                .zip(&model_state)
                .all(|(a, b)| compare::close(a, b));
        if !same {
            return Err(format!(
                "step {n} {op:?}: keys differ\n redis: {real_state:#?}\n model: {model_state:#?}"
            ));
        }
    }
    Ok(())
}

/// Runs `cases` seeded sequences against the model with `bug`: the script calls made and the
/// wake-ups published (grants and re-check requests), or the shrunk failure.
fn differential(bug: ScriptBug, cases: u32) -> Result<(usize, usize), String> {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let conn = runtime.block_on(server.connection());
    let config = RunnerConfig {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..RunnerConfig::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[26; 32]));
    let calls = std::cell::Cell::new(0usize);
    let grants = std::cell::Cell::new(0usize);
    let outcome = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
        calls.set(calls.get() + ops.len());
        let mut published = 0;
        let outcome = runtime.block_on(run(&mut conn.clone(), bug, &ops, &mut published));
        grants.set(grants.get() + published);
        outcome.map_err(TestCaseError::fail)
    });
    match outcome {
        Ok(()) => Ok((calls.get(), grants.get())),
        Err(err) => Err(err.to_string()),
    }
}

#[test]
fn the_model_s_scripts_answer_as_redis_does() {
    let started = std::time::Instant::now();
    let (calls, grants) = differential(ScriptBug::None, 400).unwrap_or_else(|err| panic!("{err}"));
    // Straight to stderr: `cargo test` shows it without `--nocapture`.
    let _ = writeln!(
        std::io::stderr(),
        "differential: {calls} script calls matched ({grants} wake-ups published) in {:.1?}",
        started.elapsed()
    );
    assert!(calls > 5_000, "{calls}");
    assert!(grants > 40, "the sequences hand the lock over: {grants}");
}

#[test]
fn a_script_the_model_does_not_follow_is_caught() {
    let err = differential(ScriptBug::ReleaseWithoutOwnerCheck, 150)
        .err()
        .unwrap_or_else(|| panic!("a release without its owner check went unnoticed"));
    println!("caught (shrunk):\n{err}");
    assert!(
        err.contains("ReleaseHandoff") || err.contains("Release"),
        "{err}"
    );
}
