//! Every future this crate hands out is `Send`, so it can be `tokio::spawn`ed. Compiling is
//! the check.

use std::time::Duration;

use lockcore::{__private, LockGuard, LockManager, LockOptions};

fn assert_send<T: Send>(_: &T) {}

#[allow(dead_code)]
async fn futures_are_send(manager: LockManager, mut guard: LockGuard) {
    let opts = LockOptions::default();
    assert_send(&LockManager::connect("redis://127.0.0.1:1/"));
    assert_send(&manager.acquire("k", &opts));
    assert_send(&manager.try_acquire("k", &opts));
    assert_send(&guard.lost());
    assert_send(&guard.extend(Duration::from_secs(1)));
    assert_send(&guard.release());
    assert_send(&manager.acquire_many(["a", "b"], &opts));
}

#[allow(dead_code)]
async fn attribute_futures_are_send(
    manager: LockManager,
    lock: __private::Lock,
    outcome: __private::Outcome<u8>,
    multi: lockcore::MultiGuard,
) {
    let settings = __private::Settings {
        ttl_ms: None,
        wait_ms: None,
        watchdog: None,
        reentrant: true,
        on_lost: __private::OnLost::Abort,
        key_template: "k",
    };
    assert_send(&__private::lock(Ok(manager), [String::from("k")], settings));
    assert_send(&lock.run(async { 1 }));
    assert_send(&lock.finish(outcome));
    assert_send(&multi.lost());
    assert_send(&multi.release());
}

#[test]
fn lock_types_are_send_sync_static() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<LockManager>();
    assert_send_sync::<LockGuard>();
    assert_send_sync::<lockcore::MultiGuard>();
    assert_send_sync::<lockcore::LockError>();
}
