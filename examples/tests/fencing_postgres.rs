//! The PostgreSQL fencing example against a real PostgreSQL and a real Redis from the harness:
//! the stale write of a holder that stalled past its lease is rejected by
//! `UPDATE .. WHERE fence <= $1` (and its transaction rolled back), while its unfenced twin
//! clobbers the newer holder's write.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../fencing_postgres/scenario.rs"]
#[allow(dead_code)]
mod scenario;

use std::net::TcpStream;
use std::time::Duration;

use lockcore::LockManager;
use lockcore_tests::{PostgresServer, RedisServer};
use scenario::{INITIAL_QTY, Mode, Write};

async fn run(mode: Mode) -> (scenario::Outcome, PostgresServer) {
    let redis = RedisServer::start();
    let pg = PostgresServer::start();
    let locks = LockManager::connect(&redis.url())
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", redis.log()));
    let outcome = scenario::run(&locks, &pg.connection_string(), mode)
        .await
        .unwrap_or_else(|e| panic!("{} run: {e}\n{}", mode.name(), pg.log()));
    (outcome, pg)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stalled_holders_write_is_rejected_by_the_fence() {
    let (run, _pg) = run(Mode::Fenced).await;
    assert!(run.b_token > run.a_token, "{run:?}");
    assert!(
        run.b_waited >= scenario::A_TTL / 2,
        "B waited for A's lease: {run:?}"
    );
    assert!(
        matches!(run.a_write, Write::Rejected { current_fence } if current_fence == i64::try_from(run.b_token).unwrap()),
        "{run:?}"
    );
    assert_eq!(
        run.final_row,
        (
            INITIAL_QTY - 3,
            "B".to_owned(),
            i64::try_from(run.b_token).unwrap()
        ),
        "B's sale survived"
    );
    assert_eq!(
        run.log,
        [("B".to_owned(), INITIAL_QTY - 3)],
        "A's transaction was rolled back whole: no log row of it"
    );
    assert!(
        run.a_release.as_ref().is_err_and(|e| e.is_lost()),
        "{run:?}"
    );
    assert!(run.as_expected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_the_stalled_holder_clobbers_the_newer_write() {
    let (run, _pg) = run(Mode::Unfenced).await;
    assert!(run.b_token > run.a_token, "{run:?}");
    assert_eq!(run.a_write, Write::Applied, "{run:?}");
    assert_eq!(
        (run.final_row.0, run.final_row.1.as_str()),
        (INITIAL_QTY - 1, "A"),
        "A's stale plan overwrote B's sale: a lost update"
    );
    assert_eq!(
        run.log,
        [
            ("B".to_owned(), INITIAL_QTY - 3),
            ("A".to_owned(), INITIAL_QTY - 1)
        ]
    );
    assert!(run.as_expected());
}

#[test]
fn the_postgres_harness_listens_on_loopback_only_and_stops_on_drop() {
    let pg = PostgresServer::start();
    let port = pg.port();
    assert!(port != 5432 && port != 6379);
    TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("{e}\n{}", pg.log()));
    let log = pg.log();
    assert!(
        log.contains("listening on IPv4 address \"127.0.0.1\""),
        "{log}"
    );
    assert!(!log.contains("0.0.0.0") && !log.contains("\"::\""), "{log}");
    drop(pg);
    let refused = (0..100).find_map(|_| {
        let gone = TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(100),
        )
        .is_err();
        if !gone {
            std::thread::sleep(Duration::from_millis(20));
        }
        gone.then_some(())
    });
    assert!(refused.is_some(), "port {port} still open after drop");
}
