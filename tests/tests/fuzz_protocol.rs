//! Malformed protocol replies (proptest, with shrinking): a `LockManager` connected to a
//! [`FakeRedis`] that answers lockcore's commands with wrong types, truncated frames, huge
//! lengths, deep nesting, RESP3 types on a RESP2 connection, push frames, errors, silence,
//! closed connections, or random bytes (and, in some cases, its connection handshake too).
//! Every call returns within a bound, with an error or an outcome the reply spells out (a
//! well-formed grant is a guard); nothing panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockcore::{LockManager, LockOptions};
use lockcore_tests::*;
use proptest::prelude::*;

/// The longest any one call may take: a few response timeouts (an acquire's attempts within
/// its wait budget, and the clean-up after a lost reply).
const BOUND: Duration = Duration::from_secs(3);
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(150);

/// Guards the fake granted, over all cases: the property reaches release, extend and the
/// watchdog, not only failed acquires.
static GUARDS: AtomicUsize = AtomicUsize::new(0);

fn reply() -> impl Strategy<Value = FakeReply> {
    let fixed: Vec<&'static [u8]> = vec![
        b":42\r\n",
        b"+OK\r\n",
        b"$3\r\nabc\r\n",
        b"$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"*2\r\n:1\r\n",
        b"*2\r\n:1\r\n:99999999999999999999999\r\n",
        b"*2\r\n$1\r\nx\r\n+y\r\n",
        b"*3\r\n:1\r\n:2\r\n:3\r\n",
        b"*2\r\n:1\r\n:-5\r\n",
        b"*2\r\n:0\r\n:-7\r\n",
        b"*2\r\n:7\r\n:7\r\n",
        b"$10\r\nabc",
        b"$9223372036854775807\r\n",
        b"$-5\r\n",
        b"*2147483647\r\n",
        b"*9223372036854775807\r\n:1\r\n",
        b"%2147483647\r\n",
        b"-ERR boom\r\n",
        b"-NOSCRIPT No matching script\r\n",
        b"-READONLY You can't write against a read only replica.\r\n",
        b"-MOVED 1 127.0.0.1:1\r\n",
        b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        b"!x\r\n",
        b"\r\n",
        b"%1\r\n+a\r\n+b\r\n",
        b">3\r\n+message\r\n+c\r\n+p\r\n",
        b"_\r\n",
        b",1.5\r\n",
        b"(123\r\n",
        b"#t\r\n",
        b"~1\r\n:1\r\n",
        b"=5\r\ntxt:x\r\n",
        b":1\r\n:2\r\n",
    ];
    prop_oneof![
        8 => proptest::sample::select(fixed).prop_map(FakeReply::raw),
        // A well-formed grant (acquired, fencing token 7) or "held": guards to release and
        // extend through the malformed replies that follow.
        3 => Just(FakeReply::raw("*2\r\n:1\r\n:7\r\n")),
        1 => Just(FakeReply::raw("*2\r\n:0\r\n:100\r\n")),
        1 => Just(FakeReply::raw("*1\r\n:1\r\n")),
        1 => Just(FakeReply::Silence),
        1 => Just(FakeReply::BytesThenClose(Vec::new())),
        1 => Just(FakeReply::BytesThenClose(b"*2\r\n:1".to_vec())),
        1 => (1..100_000usize).prop_map(|depth| FakeReply::raw("*1\r\n".repeat(depth) + ":1\r\n")),
        1 => (1..4usize).prop_map(|mib| FakeReply::raw(format!("+{}\r\n", "A".repeat(mib << 20)))),
        2 => proptest::collection::vec(any::<u8>(), 0..48).prop_map(FakeReply::Bytes),
    ]
}

/// Runs `call` within [`BOUND`], or panics naming it.
async fn bounded<T>(what: &str, call: impl Future<Output = T>) -> T {
    tokio::time::timeout(BOUND, call)
        .await
        .unwrap_or_else(|_| panic!("{what} hung past {BOUND:?}"))
}

/// A fake server answering with `replies` in turn (the handshake too with `raw_handshake`).
async fn fake(replies: Vec<FakeReply>, raw_handshake: bool) -> FakeRedis {
    let next = Arc::new(AtomicUsize::new(0));
    FakeRedis::start(move |cmd| {
        if !raw_handshake && let Some(reply) = handshake(cmd) {
            return reply;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        replies[i % replies.len()].clone()
    })
    .await
}

async fn exercise(m: &LockManager, handoff: bool) {
    let once = LockOptions::new(Duration::from_secs(1))
        .wait(Duration::ZERO)
        .handoff(handoff);
    let waiting = once.clone().wait(Duration::from_millis(100));
    let watched = LockOptions::new(Duration::from_millis(300))
        .wait(Duration::from_millis(100))
        .handoff(handoff)
        .watchdog(true);
    let mut guards = Vec::new();
    if let Ok(Some(guard)) = bounded("try_acquire", m.try_acquire("fp", &once)).await {
        GUARDS.fetch_add(1, Ordering::Relaxed);
        guards.push(guard);
    }
    if let Ok(guard) = bounded("acquire", m.acquire("fp", &waiting)).await {
        guards.push(guard);
    }
    if let Ok(guard) = bounded("acquire (watchdog)", m.acquire("fp:w", &watched)).await {
        // The watchdog renews through the fake; its loss signal or the bound, whichever first.
        let _ = tokio::time::timeout(Duration::from_millis(600), guard.lost()).await;
        guards.push(guard);
    }
    for mut guard in guards {
        let _ = bounded("extend", guard.extend(Duration::from_secs(1))).await;
        let _ = bounded("release", guard.release()).await;
    }
    let keys = ["fp:a", "fp:b"];
    if let Ok(guards) = bounded("acquire_many", m.acquire_many(keys, &once)).await {
        let _ = bounded("release of many", guards.release()).await;
    }
}

#[test]
fn malformed_replies_are_errors_never_panics_or_hangs() {
    let config = ProptestConfig {
        cases: 40,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(
        replies in proptest::collection::vec(reply(), 1..6),
        raw_handshake in proptest::bool::weighted(0.2),
        handoff in any::<bool>(),
    )| {
        let panics = panic_count();
        current_thread_runtime().block_on(async {
            let server = fake(replies.clone(), raw_handshake).await;
            let built = bounded(
                "build",
                LockManager::builder()
                    .url(server.url())
                    .connection_timeout(RESPONSE_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .build(),
            )
            .await;
            if let Ok(m) = built {
                exercise(&m, handoff).await;
                let _ = bounded("close", async { drop(m) }).await;
            }
            drop(server);
        });
        prop_assert_eq!(panic_count(), panics, "something panicked with replies {:?}", replies);
    });
    assert!(
        GUARDS.load(Ordering::Relaxed) > 0,
        "no case got as far as a guard"
    );
}
