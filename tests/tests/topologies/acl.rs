//! `RedisServer::start_with_acl`: a user limited to `~lock:*` / `&lock:*`.

use lockcore_tests::RedisServer;

use crate::announce;

async fn connect(url: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await
}

async fn run(
    con: &mut redis::aio::MultiplexedConnection,
    cmd: &redis::Cmd,
) -> redis::RedisResult<redis::Value> {
    cmd.query_async(con).await
}

#[tokio::test]
async fn acl_user_gets_noperm_outside_its_prefix() {
    announce("acl");
    let server = RedisServer::start_with_acl(&[("app", "s3cret", "on ~lock:* &lock:* +@all")]);
    let url = server.url_for_user("app", "s3cret");
    assert_eq!(
        url,
        format!("redis://app:s3cret@127.0.0.1:{}/", server.port())
    );
    let mut con = connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));

    let who: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query_async(&mut con)
        .await
        .expect("WHOAMI");
    assert_eq!(who, "app");
    let allowed = [
        redis::cmd("SET")
            .arg("lock:a")
            .arg("t")
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .to_owned(),
        redis::cmd("PUBLISH").arg("lock:wake").arg("x").to_owned(),
    ];
    for cmd in &allowed {
        let reply = run(&mut con, cmd).await;
        assert!(reply.is_ok(), "{reply:?}");
    }
    let denied = [
        redis::cmd("SET").arg("other:a").arg("t").to_owned(),
        redis::cmd("GET").arg("lockcore:x").to_owned(),
        redis::cmd("PUBLISH")
            .arg("lockcore:wake:1")
            .arg("x")
            .to_owned(),
    ];
    for cmd in &denied {
        let err = run(&mut con, cmd)
            .await
            .expect_err("outside the user's patterns");
        assert_eq!(err.code(), Some("NOPERM"), "{err}");
    }
    // The default user is untouched; a wrong password is refused.
    assert!(connect(&server.url()).await.is_ok());
    let wrong = connect(&server.url_for_user("app", "nope")).await;
    assert!(wrong.is_err(), "a wrong password must be refused");
}

#[tokio::test]
async fn acl_server_restarts_with_its_users() {
    let mut server = RedisServer::start_with_acl(&[("app", "p@ss:w/rd%", "on ~lock:* +@all")]);
    server.restart();
    let url = server.url_for_user("app", "p@ss:w/rd%");
    let mut con = connect(&url)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", server.log()));
    let reply = run(&mut con, redis::cmd("SET").arg("lock:x").arg(1)).await;
    assert!(reply.is_ok(), "{reply:?}");
}
