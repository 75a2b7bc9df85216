//! The axum shop driven over loopback by concurrent HTTP requests, against a real Redis from
//! the harness: the locked endpoint never oversells while its unlocked twin does, a wait budget
//! of 0 turns contention into 429s (still never an oversell), out of stock is 409, and a
//! graceful shutdown lets the request in flight finish and release its lock.
#![allow(clippy::expect_used, clippy::unwrap_used)]

#[path = "../axum_shop/shop.rs"]
#[allow(dead_code)]
mod shop;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use lockcore::{LockManager, LockOptions};
use lockcore_tests::RedisServer;
use shop::Shop;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Concurrent buyers per burst.
const BUYERS: usize = 20;
/// The payment call: long enough that the buyers of one burst overlap.
const WORK: Duration = Duration::from_millis(60);
/// Every request's bound.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// A shop served on a free loopback port until the returned sender fires.
struct Running {
    addr: SocketAddr,
    shop: Arc<Shop>,
    stop: oneshot::Sender<()>,
    served: JoinHandle<Result<(), shop::BoxError>>,
}

async fn start(server: &RedisServer, wait: Duration) -> Running {
    let locks = LockManager::builder()
        .url(server.url())
        .default_options(LockOptions::new(Duration::from_secs(10)).wait(wait))
        .build()
        .await
        .unwrap_or_else(|e| panic!("connect: {e}\n{}", server.log()));
    let shop = Arc::new(Shop::new(locks, &server.url(), WORK).await.expect("shop"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(shop::serve(listener, Arc::clone(&shop), async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        shop,
        stop,
        served,
    }
}

/// One HTTP/1.1 request on its own connection: the status and the body.
async fn request(addr: SocketAddr, method: Method, path: &str) -> (StatusCode, String) {
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, addr.to_string())
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(req).await?;
        let status = response.status();
        let retry_after = response.headers().get(hyper::header::RETRY_AFTER).cloned();
        let body = response.into_body().collect().await?.to_bytes();
        if status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(
                retry_after.as_ref().and_then(|v| v.to_str().ok()),
                Some("1")
            );
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>((
            status,
            String::from_utf8_lossy(&body).into_owned(),
        ))
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(Ok(reply)) => reply,
        Ok(Err(e)) => panic!("{path}: {e}"),
        Err(_) => panic!("{path}: no reply within {REQUEST_TIMEOUT:?}"),
    }
}

/// [`BUYERS`] concurrent `POST path`: how many got each status.
async fn burst(addr: SocketAddr, path: &'static str) -> Counts {
    let buyers: Vec<_> = (0..BUYERS)
        .map(|_| tokio::spawn(request(addr, Method::POST, path)))
        .collect();
    let mut counts = Counts::default();
    for buyer in buyers {
        let (status, body) = buyer.await.expect("buyer task");
        match status {
            StatusCode::OK => counts.ok += 1,
            StatusCode::CONFLICT => {
                assert!(body.contains("out of stock"), "{body}");
                counts.conflict += 1;
            }
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(body.contains("lock:shop:product:"), "names the key: {body}");
                counts.too_many += 1;
            }
            other => panic!("{path}: unexpected {other}: {body}"),
        }
    }
    counts
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    ok: usize,
    conflict: usize,
    too_many: usize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locked_endpoint_never_oversells_and_its_unlocked_twin_does() {
    let server = RedisServer::start();
    let running = start(&server, Duration::from_secs(10)).await;

    running.shop.restock(1, 5).await.unwrap();
    let locked = burst(running.addr, "/products/1/buy").await;
    assert_eq!(
        locked,
        Counts {
            ok: 5,
            conflict: BUYERS - 5,
            too_many: 0
        },
        "five sold, the rest out of stock"
    );
    let product = running.shop.product(1).await.unwrap();
    assert_eq!((product.stock, product.sold), (0, 5));
    let (status, body) = request(running.addr, Method::GET, "/products/1").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("\"stock\":0") && body.contains("\"sold\":5"),
        "{body}"
    );

    // The twin: the same burst without the lock sells more than there is.
    running.shop.restock(2, 5).await.unwrap();
    let unlocked = burst(running.addr, "/products/2/buy-unlocked").await;
    let product = running.shop.product(2).await.unwrap();
    assert!(
        unlocked.ok > 5 && product.sold > 5,
        "without the lock the shop oversells: {unlocked:?} {product:?}"
    );
    running.stop.send(()).unwrap();
    running.served.await.unwrap().expect("served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_budget_of_zero_answers_429_and_still_never_oversells() {
    let server = RedisServer::start();
    let running = start(&server, Duration::ZERO).await;
    running.shop.restock(1, BUYERS as i64).await.unwrap();
    let counts = burst(running.addr, "/products/1/buy").await;
    assert!(
        counts.too_many > 0,
        "contended sales answer 429: {counts:?}"
    );
    assert!(counts.ok >= 1 && counts.conflict == 0, "{counts:?}");
    let product = running.shop.product(1).await.unwrap();
    assert_eq!(
        (product.sold as usize, product.stock),
        (counts.ok, (BUYERS - counts.ok) as i64),
        "every 200 is exactly one sale"
    );
    running.stop.send(()).unwrap();
    running.served.await.unwrap().expect("served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_the_sale_in_flight_and_leaves_no_lock() {
    let server = RedisServer::start();
    let running = start(&server, Duration::from_secs(10)).await;
    running.shop.restock(1, 3).await.unwrap();
    let addr = running.addr;
    let in_flight = tokio::spawn(request(addr, Method::POST, "/products/1/buy"));
    // The sale holds its lock: shut down now, while it pays.
    let mut raw = server.connection().await;
    let key = "lock:shop:product:1";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        if held {
            break;
        }
        assert!(Instant::now() < deadline, "the sale never took its lock");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    running.stop.send(()).unwrap();
    let (status, body) = in_flight.await.unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "the sale in flight finished: {body}"
    );
    tokio::time::timeout(REQUEST_TIMEOUT, running.served)
        .await
        .expect("serve returns once the sale is done")
        .unwrap()
        .expect("served");
    let left: bool = redis::cmd("EXISTS")
        .arg(key)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(!left, "no lock outlives the shutdown");
    assert_eq!(running.shop.product(1).await.unwrap().sold, 1);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the listener is closed"
    );
}
