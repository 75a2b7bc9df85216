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
    assert_send(&__private::run_body(
        &guard,
        __private::OnLost::Abort,
        async { 1 },
    ));
    assert_send(&guard.release());
}

#[test]
fn lock_types_are_send_sync_static() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<LockManager>();
    assert_send_sync::<LockGuard>();
    assert_send_sync::<lockcore::LockError>();
}
