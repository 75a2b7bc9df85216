//! [`SentinelPrimary`]: the primary that Redis Sentinel names, followed across fail-overs.
//!
//! redis-rs does not follow fail-overs itself: a `ConnectionManager` reconnects to the old
//! address and gets `READONLY` from a demoted primary. So the connection is swapped for one to
//! the newly resolved primary when a command fails in a way a fail-over explains (`READONLY`,
//! `MASTERDOWN`, a dropped or refused connection, a timeout), and when a sentinel announces
//! `+switch-master`. The failing call itself returns its error (`LockError::Redis`); calls
//! after the swap go to the new primary.
//!
//! The primary outlives the runtime that resolved it: once that runtime has shut down (the
//! connection's I/O and the `+switch-master` subscription died with it), the next command
//! re-makes the connection and the subscription on lockcore's background runtime before it
//! sends. From then on every command, re-resolution and subscription runs there, so that none
//! dies with a caller's runtime when several runtimes share the manager.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use futures_util::StreamExt as _;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Client, Cmd, Pipeline, RedisFuture, Value};
use tokio::runtime::Handle;

use crate::error::LockError;
use crate::transport::connect::{ConnectOptions, connection_infos, manager_config};
use crate::transport::runtime_watch::{RuntimeWatch, on_a_runtime};
use crate::util::background;

/// The longest one resolution (ask the sentinels, connect to the primary) may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts to re-open the `+switch-master` subscription.
const RESUBSCRIBE_DELAY: Duration = Duration::from_millis(500);

/// A Sentinel-resolved primary. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SentinelPrimary {
    inner: Arc<Inner>,
}

struct Inner {
    /// The manager is closed: the `+switch-master` subscription ends.
    closed: Arc<AtomicBool>,
    stop: Arc<tokio::sync::Notify>,
    sentinel: tokio::sync::Mutex<SentinelClient>,
    master_name: String,
    current: RwLock<Current>,
    resolving: AtomicBool,
    options: ConnectOptions,
    runtime: Handle,
    /// The runtime that resolved the primary shut down: everything runs on lockcore's
    /// background runtime from now on.
    on_background: AtomicBool,
}

#[derive(Clone)]
struct Current {
    client: Client,
    conn: ConnectionManager,
    /// The runtime `conn` was made on.
    runtime: RuntimeWatch,
}

impl SentinelPrimary {
    /// Asks the sentinels for `master_name`'s primary and connects to it, then follows
    /// `+switch-master` announcements in the background.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] for a malformed URL, or URLs that mix schemes or name
    /// different credentials (see [`check_alike`]); [`LockError::Redis`] when no sentinel
    /// answers, none knows `master_name`, or the primary cannot be reached.
    pub(crate) async fn resolve(
        sentinel_urls: &[String],
        master_name: &str,
        options: &ConnectOptions,
        runtime: &Handle,
    ) -> Result<SentinelPrimary, LockError> {
        let infos = connection_infos(sentinel_urls, options)?;
        check_alike(sentinel_urls, &infos)?;
        let tcp = options.tcp_settings();
        let mut builder = SentinelClientBuilder::new(
            infos.iter().map(|info| info.addr().clone()),
            master_name,
            SentinelServerType::Master,
        )?
        .set_client_to_redis_tcp_settings(tcp.clone())
        .set_client_to_sentinel_tcp_settings(tcp);
        // The first URL's credentials and TLS mode serve the sentinels and the primary.
        if let Some(first) = infos.first() {
            let settings = first.redis_settings();
            if let Some(user) = settings.username() {
                builder = builder
                    .set_client_to_redis_username(user)
                    .set_client_to_sentinel_username(user);
            }
            if let Some(password) = settings.password() {
                builder = builder
                    .set_client_to_redis_password(password)
                    .set_client_to_sentinel_password(password);
            }
            if matches!(first.addr(), redis::ConnectionAddr::TcpTls { .. }) {
                builder = options.tls.sentinel(
                    builder
                        .set_client_to_redis_tls_mode(redis::TlsMode::Secure)
                        .set_client_to_sentinel_tls_mode(redis::TlsMode::Secure),
                );
            }
        }
        let mut sentinel = builder.build()?;
        let current = connect_primary(&mut sentinel, options).await?;
        let primary = SentinelPrimary {
            inner: Arc::new(Inner {
                closed: Arc::default(),
                stop: Arc::default(),
                sentinel: tokio::sync::Mutex::new(sentinel),
                master_name: master_name.to_owned(),
                current: RwLock::new(current),
                resolving: AtomicBool::new(false),
                options: options.clone(),
                runtime: runtime.clone(),
                on_background: AtomicBool::new(false),
            }),
        };
        primary.follow();
        Ok(primary)
    }

    /// Follows `+switch-master` in the background (see [`spawn`](Self::spawn)).
    fn follow(&self) {
        self.spawn(follow_switch_master(
            Arc::downgrade(&self.inner),
            Arc::clone(&self.inner.closed),
            Arc::clone(&self.inner.stop),
        ));
    }

    /// Spawns the primary's background work: on the caller's runtime, or on lockcore's
    /// background runtime once the primary's first runtime has shut down.
    fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let on_background = self.inner.on_background.load(Ordering::Acquire);
        match on_background.then(background::handle).flatten() {
            Some(handle) => drop(handle.spawn(task)),
            None => crate::util::spawn::background(&self.inner.runtime, task),
        }
    }

    /// Ends the `+switch-master` subscription for good (the manager is closed).
    pub(crate) fn close(&self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.stop.notify_waiters();
    }

    /// The client of the primary resolved last (for the wake-up subscription).
    pub(crate) fn client(&self) -> Client {
        self.inner.current().client
    }

    /// The connection to send on; re-made on lockcore's background runtime (or, when that is
    /// unavailable, the caller's) when the one resolved last died with its runtime (one atomic
    /// load while that runtime runs).
    fn conn(&self) -> ConnectionManager {
        let current = self.inner.current();
        if !current.runtime.shut_down() {
            return current.conn;
        }
        let background = background::handle();
        if background.is_none() && !on_a_runtime() {
            return current.conn;
        }
        // redis-rs spawns the connection's tasks on the runtime current where it is made.
        let _there = background.map(|handle| {
            self.inner.on_background.store(true, Ordering::Release);
            handle.enter()
        });
        let conn = {
            let mut slot = self
                .inner
                .current
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if !slot.runtime.shut_down() {
                return slot.conn.clone();
            }
            let config = manager_config(&self.inner.options);
            let Ok(conn) = ConnectionManager::new_lazy_with_config(slot.client.clone(), config)
            else {
                return current.conn;
            };
            slot.conn = conn.clone();
            slot.runtime = RuntimeWatch::current();
            conn
        };
        // The subscription died with the same runtime.
        if !self.inner.closed.load(Ordering::Acquire) {
            self.follow();
        }
        tracing::debug!(
            master = self.inner.master_name,
            "the runtime of the Sentinel primary's connection shut down; reconnected on lockcore's background runtime"
        );
        conn
    }

    /// Re-resolves the primary in the background unless that is under way already.
    fn re_resolve(&self) {
        if self.inner.resolving.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = Arc::clone(&self.inner);
        self.spawn(async move {
            inner.resolve_again().await;
            inner.resolving.store(false, Ordering::Release);
        });
    }

    /// Whether `error` may mean that the primary moved.
    fn after_error(&self, error: &redis::RedisError) {
        let failover = is_failover_code(error.code())
            || error.is_connection_dropped()
            || error.is_io_error()
            || error.is_timeout();
        if failover {
            self.re_resolve();
        }
    }

    /// A pipeline's replies carry server errors as values: `READONLY` or `MASTERDOWN` among
    /// them may mean that the primary moved, as for a single command.
    fn after_replies(&self, replies: &[Value]) {
        let moved = replies.iter().any(
            |reply| matches!(reply, Value::ServerError(error) if is_failover_code(Some(error.code()))),
        );
        if moved {
            self.re_resolve();
        }
    }
}

/// The error codes a demoted or cut-off primary answers with.
fn is_failover_code(code: Option<&str>) -> bool {
    matches!(code, Some("READONLY" | "MASTERDOWN"))
}

impl Inner {
    fn current(&self) -> Current {
        // Swapped whole, never left half-written: a poisoned lock still holds a valid value.
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    async fn resolve_again(&self) {
        let resolved = tokio::time::timeout(RESOLVE_TIMEOUT, async {
            let mut sentinel = self.sentinel.lock().await;
            connect_primary(&mut sentinel, &self.options).await
        })
        .await;
        match resolved {
            Ok(Ok(current)) => {
                let address = current.client.get_connection_info().addr().to_string();
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = current;
                tracing::info!(master = self.master_name, %address, "lock primary re-resolved through Sentinel");
            }
            Ok(Err(err)) => {
                tracing::warn!(master = self.master_name, error = %err, "cannot re-resolve the lock primary through Sentinel; retrying at the next failure");
            }
            Err(_) => {
                tracing::warn!(
                    master = self.master_name,
                    "re-resolving the lock primary through Sentinel timed out; retrying at the next failure"
                );
            }
        }
    }
}

/// The first URL's TLS mode and credentials serve every sentinel and the primary, so the URLs
/// must agree: all `redis://` or all `rediss://` (a plain first URL would send the password in
/// plain text to sentinels meant for TLS), and any user or password a later URL names must be
/// the first URL's. Checked before anything is dialled.
///
/// # Errors
/// [`LockError::InvalidOptions`] naming the URLs (without their passwords).
fn check_alike(urls: &[String], infos: &[redis::ConnectionInfo]) -> Result<(), LockError> {
    let (Some(first), Some(first_url)) = (infos.first(), urls.first()) else {
        return Ok(());
    };
    let tls =
        |info: &redis::ConnectionInfo| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
    let credentials = |info: &redis::ConnectionInfo| {
        let settings = info.redis_settings();
        (
            settings.username().map(str::to_owned),
            settings.password().map(str::to_owned),
        )
    };
    for (info, url) in infos.iter().zip(urls).skip(1) {
        if tls(info) != tls(first) {
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "the sentinel URLs mix `redis://` and `rediss://` (`{}` and `{}`); the first URL's scheme and credentials serve every sentinel and the primary, so expected one scheme for all (`rediss://` for TLS)",
                    crate::util::redact::redact_url(first_url),
                    crate::util::redact::redact_url(url),
                ),
            });
        }
        let (user, password) = credentials(info);
        if (user.is_some() || password.is_some()) && (user, password) != credentials(first) {
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "the sentinel URLs name different credentials (`{}` and `{}`); the first URL's user and password serve every sentinel and the primary, so expected the same credentials in every URL, or only in the first",
                    crate::util::redact::redact_url(first_url),
                    crate::util::redact::redact_url(url),
                ),
            });
        }
    }
    Ok(())
}

/// The primary's client and a connection to it.
async fn connect_primary(
    sentinel: &mut SentinelClient,
    options: &ConnectOptions,
) -> redis::RedisResult<Current> {
    let client = sentinel.async_get_client().await?;
    let conn = ConnectionManager::new_with_config(client.clone(), manager_config(options)).await?;
    Ok(Current {
        client,
        conn,
        runtime: RuntimeWatch::current(),
    })
}

/// Re-resolves on every `+switch-master` a sentinel publishes, for as long as the primary is
/// in use. Each subscription attempt is bounded; a lost subscription is re-opened.
async fn follow_switch_master(
    inner: Weak<Inner>,
    closed: Arc<AtomicBool>,
    stop: Arc<tokio::sync::Notify>,
) {
    loop {
        // Registered before the flag is read: a close in between still wakes this task.
        let stopped = stop.notified();
        tokio::pin!(stopped);
        stopped.as_mut().enable();
        if closed.load(Ordering::Acquire) {
            return;
        }
        let messages = {
            let Some(inner) = inner.upgrade() else { return };
            let subscribed = tokio::time::timeout(RESOLVE_TIMEOUT, async {
                let client = inner
                    .sentinel
                    .lock()
                    .await
                    .async_get_sentinel_client()
                    .await?;
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe("+switch-master").await?;
                redis::RedisResult::Ok(pubsub)
            })
            .await;
            match subscribed {
                Ok(Ok(pubsub)) => Some(pubsub.into_on_message()),
                _ => None,
            }
        };
        if let Some(mut messages) = messages {
            loop {
                let message = tokio::select! {
                    message = messages.next() => message,
                    () = &mut stopped => return,
                };
                let Some(message) = message else { break };
                let Some(inner) = inner.upgrade() else { return };
                let payload: String = message.get_payload().unwrap_or_default();
                // "<master name> <old ip> <old port> <new ip> <new port>"
                if payload.split(' ').next() == Some(inner.master_name.as_str()) {
                    SentinelPrimary { inner }.re_resolve();
                }
            }
        }
        if inner.strong_count() == 0 {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(RESUBSCRIBE_DELAY) => {}
            () = &mut stopped => return,
        }
    }
}

impl ConnectionLike for SentinelPrimary {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.conn();
            let reply = if self.inner.on_background.load(Ordering::Acquire) {
                let cmd = cmd.clone();
                background::run_command(async move { conn.req_packed_command(&cmd).await }).await
            } else {
                conn.req_packed_command(cmd).await
            };
            if let Err(err) = &reply {
                self.after_error(err);
            }
            reply
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.conn();
            let reply = if self.inner.on_background.load(Ordering::Acquire) {
                let pipeline = pipeline.clone();
                background::run_command(async move {
                    conn.req_packed_commands(&pipeline, offset, count).await
                })
                .await
            } else {
                conn.req_packed_commands(pipeline, offset, count).await
            };
            match &reply {
                Ok(replies) => self.after_replies(replies),
                Err(err) => self.after_error(err),
            }
            reply
        })
    }

    fn get_db(&self) -> i64 {
        self.conn().get_db()
    }
}
