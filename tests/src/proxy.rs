//! [`FaultProxy`]: a TCP proxy in front of one Redis server that injects network faults.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::RedisServer;

const MAX_CONNECTIONS: usize = 256;
const READ_CHUNK: usize = 16 * 1024;
const QUEUE_CHUNKS: usize = 256;
const MAX_UNFRAMED: usize = 8 * 1024 * 1024;
const MAX_LATENCY: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a connection whose client has gone waits for Redis to answer what it forwarded.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`FaultProxy::settled`] waits before it panics.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// Nesting limit for RESP aggregates.
const MAX_DEPTH: usize = 16;

/// Which way the bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Client to Redis: the command reaches Redis late, so it also *runs* late.
    Requests,
    /// Redis to client: the command runs at once, its reply arrives late.
    Replies,
}

/// The faults in force; connections read them as commands and replies pass.
#[derive(Debug, Clone, Default)]
struct Faults {
    request_latency: Duration,
    reply_latency: Duration,
    blackhole: bool,
    /// Upper-case command name whose next reply is dropped.
    drop_reply_to: Option<Vec<u8>>,
    /// Bumped by `reset_connections`.
    reset_epoch: u64,
}

struct Shared {
    faults: watch::Sender<Faults>,
    /// Requests read from clients (and not blackholed) whose reply has not come back yet.
    pending: watch::Sender<u64>,
    /// The reset epoch each open connection started in, one entry per connection.
    live: watch::Sender<Vec<u64>>,
}

/// A fault-injecting TCP proxy in front of one Redis server.
///
/// The Redlock tests need nodes that are slow, silent or flaky, and `tc netem` is not available.
/// A proxy listens on `127.0.0.1:0`, forwards every client connection to one upstream server,
/// and applies the faults that are switched on at the time each command or reply passes:
///
/// | fault | effect |
/// |---|---|
/// | [`set_latency`](FaultProxy::set_latency) | each request (or reply) is held back this long; order is kept |
/// | [`set_blackhole`](FaultProxy::set_blackhole) | requests are read and discarded: nothing reaches Redis, nothing comes back |
/// | [`drop_reply_to`](FaultProxy::drop_reply_to) | the next command with that name runs on Redis, but its reply is lost with the connection |
/// | [`reset_connections`](FaultProxy::reset_connections) | every open connection is closed with a TCP reset |
///
/// [`settled`](FaultProxy::settled) is the signal that goes with them: it completes when Redis has
/// answered every request the proxy has read, e.g. once a slow node has run a loser's cleanup.
///
/// # How it works
/// Both directions go through a delay line (a bounded queue of `(due, bytes)`), so latency never
/// reorders bytes. Requests and replies are framed with a minimal RESP parser (RESP2 and RESP3
/// types), which gives command names and one reply per request. The proxy therefore expects
/// what redis-rs sends: RESP arrays, one reply per command (no `SUBSCRIBE`, no
/// `CLIENT REPLY OFF`). Anything it cannot parse closes that connection.
///
/// A pipelining client matches replies to requests by their order, so the proxy never removes
/// a single reply from a live stream (every later reply would go to the wrong request).
/// Dropping a reply closes the connection instead, as a real network failure does; a blackholed
/// connection that discarded requests is reset when the blackhole is switched off.
///
/// # Bounds and shutdown
/// At most 256 connections, 256 queued chunks of at most 16 KiB per direction and connection,
/// 8 MiB of buffered unframed data, latency at most 10 s, 1 s to connect upstream. The proxy
/// runs on the tokio runtime it was started on; dropping the [`FaultProxy`] aborts the accept
/// task, which owns every connection task, so the listener and all connections close.
///
/// ```no_run
/// # async fn demo() {
/// use std::time::Duration;
/// use lockcore_tests::{Direction, FaultProxy, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start(&server).await;
/// proxy.set_latency(Direction::Replies, Duration::from_millis(300));
/// let client = redis::Client::open(proxy.url()); // instead of server.url()
/// # drop(client);
/// # }
/// ```
pub struct FaultProxy {
    port: u16,
    upstream_port: u16,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy in front of `server` on the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime, or if no loopback port can be bound.
    pub async fn start(server: &RedisServer) -> FaultProxy {
        Self::start_to_port(server.port()).await
    }

    /// Starts a proxy in front of `127.0.0.1:upstream_port` (which may be down: connections
    /// are then closed at once).
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub async fn start_to_port(upstream_port: u16) -> FaultProxy {
        Self::start_on(Ipv4Addr::LOCALHOST, upstream_port).await
    }

    /// Starts a proxy listening on `bind` (port 0) in front of `127.0.0.1:upstream_port`: the
    /// nemesis binds `0.0.0.0` inside a network namespace of its own, so that workers in other
    /// namespaces reach it over their veth links.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub async fn start_on(bind: Ipv4Addr, upstream_port: u16) -> FaultProxy {
        let listener = TcpListener::bind((bind, 0))
            .await
            .unwrap_or_else(|e| panic!("fault proxy: cannot bind {bind}:0: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("fault proxy: no local address: {e}"))
            .port();
        let shared = Arc::new(Shared {
            faults: watch::Sender::new(Faults::default()),
            pending: watch::Sender::new(0),
            live: watch::Sender::new(Vec::new()),
        });
        let upstream = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        let accept = tokio::spawn(accept_loop(listener, upstream, Arc::clone(&shared)));
        FaultProxy {
            port,
            upstream_port,
            shared,
            accept,
        }
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The port of the server behind the proxy.
    pub fn upstream_port(&self) -> u16 {
        self.upstream_port
    }

    /// Holds back every request (or reply) read from now on by `latency` (at most 10 s).
    /// `Duration::ZERO` switches it off.
    pub fn set_latency(&self, direction: Direction, latency: Duration) {
        let latency = latency.min(MAX_LATENCY);
        self.shared.faults.send_modify(|f| match direction {
            Direction::Requests => f.request_latency = latency,
            Direction::Replies => f.reply_latency = latency,
        });
    }

    /// Blackhole on: connections are still accepted, but every request read from then on is
    /// discarded, so Redis never sees it and the client never gets an answer. Blackhole off:
    /// connections that discarded requests are reset (their reply stream is out of step with
    /// the client's requests); new requests pass again.
    pub fn set_blackhole(&self, on: bool) {
        self.shared.faults.send_modify(|f| f.blackhole = on);
    }

    /// The next command named `command` (case-insensitive, e.g. `"EVALSHA"`), on any
    /// connection, is forwarded and runs on Redis, but its reply is lost: the connection
    /// delivers the replies before it, then closes. Requests the client sent after it on that
    /// connection never reach Redis. Replaces a drop that has not happened yet.
    pub fn drop_reply_to(&self, command: &str) {
        let name = command.as_bytes().to_ascii_uppercase();
        self.shared
            .faults
            .send_modify(|f| f.drop_reply_to = Some(name));
    }

    /// Whether a [`drop_reply_to`](Self::drop_reply_to) is still waiting for its command.
    pub fn drop_armed(&self) -> bool {
        self.shared.faults.borrow().drop_reply_to.is_some()
    }

    /// Closes every open connection with a TCP reset, and returns once they are closed. Later
    /// connections work normally.
    ///
    /// # Panics
    /// If the connections are still open after 10 s.
    pub async fn reset_connections(&self) {
        let mut epoch = 0;
        self.shared.faults.send_modify(|f| {
            f.reset_epoch += 1;
            epoch = f.reset_epoch;
        });
        let mut live = self.shared.live.subscribe();
        let closed = tokio::time::timeout(
            SETTLE_TIMEOUT,
            live.wait_for(|epochs| epochs.iter().all(|&e| e >= epoch)),
        )
        .await;
        assert!(
            matches!(closed, Ok(Ok(_))),
            "fault proxy on port {}: connections still open {SETTLE_TIMEOUT:?} after a reset",
            self.port
        );
    }

    /// How many client connections are open.
    pub fn connections(&self) -> usize {
        self.shared.live.borrow().len()
    }

    /// Switches every fault off: no latency, no blackhole (resetting blackholed connections),
    /// no pending reply drop.
    pub fn heal(&self) {
        self.shared.faults.send_modify(|f| {
            f.request_latency = Duration::ZERO;
            f.reply_latency = Duration::ZERO;
            f.blackhole = false;
            f.drop_reply_to = None;
        });
    }

    /// Requests the proxy has read whose reply has not come back from Redis yet (requests
    /// still in the delay line included, blackholed ones excluded).
    pub fn pending(&self) -> u64 {
        *self.shared.pending.borrow()
    }

    /// Completes once Redis has answered every request the proxy has read so far (or the
    /// connection it came on has closed): whatever a client sent before this call has then run
    /// on Redis. Requests a client is still writing are not covered, so call it after the
    /// client's call returned or timed out.
    ///
    /// # Panics
    /// If that takes longer than 10 s.
    pub async fn settled(&self) {
        let mut pending = self.shared.pending.subscribe();
        let settled = tokio::time::timeout(SETTLE_TIMEOUT, pending.wait_for(|&n| n == 0)).await;
        assert!(
            matches!(settled, Ok(Ok(_))),
            "fault proxy on port {}: {} requests still unanswered after {SETTLE_TIMEOUT:?}",
            self.port,
            self.pending()
        );
    }
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("url", &self.url())
            .field("upstream_port", &self.upstream_port)
            .field("faults", &*self.shared.faults.borrow())
            .field("pending", &self.pending())
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        // The accept task owns the listener and the `JoinSet` of connection tasks: aborting it
        // closes them all.
        self.accept.abort();
    }
}

async fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) if connections.len() < MAX_CONNECTIONS => {
                    connections.spawn(serve(client, upstream, Arc::clone(&shared)));
                }
                Ok(_) => {} // over the bound: dropped, i.e. closed at once
                // E.g. out of file descriptors: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// The state one connection's two directions share.
#[derive(Default)]
struct Conn {
    /// Requests queued for Redis.
    queued: AtomicU64,
    /// Replies read from Redis.
    answered: AtomicU64,
    /// Index of the reply to drop (then close); `u64::MAX`: none.
    drop_at: AtomicU64,
    /// Requests were blackholed: the reply stream no longer matches the requests.
    poisoned: AtomicBool,
    /// Signalled after every reply.
    replied: Notify,
}

#[derive(Debug, PartialEq, Eq)]
enum End {
    Closed,
    Reset,
}

async fn serve(client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let mut faults = shared.faults.subscribe();
    let epoch = faults.borrow_and_update().reset_epoch;
    shared.live.send_modify(|epochs| epochs.push(epoch));
    relay(client, upstream, &shared, &mut faults, epoch).await;
    // Both sockets are closed now.
    shared.live.send_modify(|epochs| {
        if let Some(i) = epochs.iter().position(|&e| e == epoch) {
            epochs.swap_remove(i);
        }
    });
}

/// Relays one connection until a side closes, its reply is dropped, or it is reset.
async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    shared: &Shared,
    faults: &mut watch::Receiver<Faults>,
    epoch: u64,
) {
    let Ok(Ok(mut server)) =
        tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(upstream)).await
    else {
        return; // upstream down: the client sees its connection close
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let conn = Conn {
        drop_at: AtomicU64::new(u64::MAX),
        ..Conn::default()
    };
    let end = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let requests = async {
            forward_requests(client_read, server_write, shared, &conn).await;
            // The client is gone: let Redis answer what was forwarded, as it would on a real
            // network, so that `settled` means "has run".
            let drained = async {
                loop {
                    let replied = conn.replied.notified();
                    if conn.answered.load(Ordering::SeqCst) >= conn.queued.load(Ordering::SeqCst) {
                        return;
                    }
                    replied.await;
                }
            };
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, drained).await;
        };
        tokio::select! {
            () = requests => End::Closed,
            () = forward_replies(server_read, client_write, shared, &conn) => End::Closed,
            end = watch_faults(faults, epoch, &conn) => end,
        }
    };
    if end == End::Reset {
        let _ = client.set_zero_linger();
    }
    let unanswered = conn
        .queued
        .load(Ordering::SeqCst)
        .saturating_sub(conn.answered.load(Ordering::SeqCst));
    shared
        .pending
        .send_modify(|n| *n = n.saturating_sub(unanswered));
}

/// Ends the connection on `reset_connections`, or when the blackhole is lifted from a
/// connection that discarded requests.
async fn watch_faults(faults: &mut watch::Receiver<Faults>, epoch: u64, conn: &Conn) -> End {
    loop {
        if faults.changed().await.is_err() {
            return End::Closed;
        }
        let now = faults.borrow_and_update();
        if now.reset_epoch != epoch || (!now.blackhole && conn.poisoned.load(Ordering::SeqCst)) {
            return End::Reset;
        }
    }
}

/// Client to Redis, one command at a time through the fault rules; returns on client EOF (after
/// the delay line has delivered what it holds) and never after a reply drop was armed.
async fn forward_requests(
    mut from: impl AsyncRead + Unpin,
    to: impl AsyncWrite + Unpin,
    shared: &Shared,
    conn: &Conn,
) {
    let (queue, queued) = mpsc::channel(QUEUE_CHUNKS);
    let read = async move {
        let mut unframed = Vec::new();
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let n = match from.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            unframed.extend_from_slice(&chunk[..n]);
            let mut forward = Vec::new();
            let mut parsed = 0;
            let mut drop_armed = false;
            while let Ok(Some(len)) = value_len(&unframed[parsed..], 0) {
                let command = &unframed[parsed..parsed + len];
                parsed += len;
                let (blackhole, delay) = {
                    let faults = shared.faults.borrow();
                    (faults.blackhole, faults.request_latency)
                };
                if blackhole {
                    conn.poisoned.store(true, Ordering::SeqCst);
                    continue;
                }
                let index = conn.queued.fetch_add(1, Ordering::SeqCst);
                shared.pending.send_modify(|n| *n += 1);
                forward.extend_from_slice(command);
                if take_drop(shared, command_name(command)) {
                    conn.drop_at.store(index, Ordering::SeqCst);
                    drop_armed = true;
                    break;
                }
                // Many commands in one read: pass them on in chunks of bounded size.
                if forward.len() >= READ_CHUNK
                    && queue
                        .send((Instant::now() + delay, std::mem::take(&mut forward)))
                        .await
                        .is_err()
                {
                    return;
                }
            }
            if value_len(&unframed[parsed..], 0).is_err() || unframed.len() > MAX_UNFRAMED {
                return; // not RESP, or a command too large to frame: close
            }
            unframed.drain(..parsed);
            let delay = shared.faults.borrow().request_latency;
            if !forward.is_empty() && queue.send((Instant::now() + delay, forward)).await.is_err() {
                return;
            }
            if drop_armed {
                // Nothing after the dropped command reaches Redis; the reply side closes.
                return std::future::pending().await;
            }
        }
    };
    tokio::join!(read, deliver(queued, to));
}

/// Takes the armed reply drop if it names this command (only one connection can win it).
fn take_drop(shared: &Shared, name: Option<&[u8]>) -> bool {
    shared.faults.send_if_modified(|f| {
        let hit = f
            .drop_reply_to
            .as_deref()
            .is_some_and(|wanted| name.is_some_and(|n| n.eq_ignore_ascii_case(wanted)));
        if hit {
            f.drop_reply_to = None;
        }
        hit
    })
}

/// Redis to client, counting replies; returns on Redis EOF, or after the dropped reply. Once
/// the client is gone, replies are still read and counted (then discarded), so that the
/// connection can wait for Redis to answer what was forwarded.
async fn forward_replies(
    mut from: impl AsyncRead + Unpin,
    to: impl AsyncWrite + Unpin,
    shared: &Shared,
    conn: &Conn,
) {
    let (queue, queued) = mpsc::channel(QUEUE_CHUNKS);
    let read = async move {
        let mut queue = Some(queue); // `None`: the client is gone
        let mut unframed = Vec::new();
        let mut chunk = vec![0u8; READ_CHUNK];
        loop {
            let n = match from.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            unframed.extend_from_slice(&chunk[..n]);
            let mut parsed = 0;
            let mut dropped = false;
            while let Ok(Some(len)) = value_len(&unframed[parsed..], 0) {
                // Push messages and attributes are not replies to a command.
                if !matches!(unframed[parsed], b'>' | b'|') {
                    let index = conn.answered.fetch_add(1, Ordering::SeqCst);
                    shared.pending.send_modify(|n| *n = n.saturating_sub(1));
                    conn.replied.notify_waiters();
                    if index == conn.drop_at.load(Ordering::SeqCst) {
                        dropped = true;
                        break;
                    }
                }
                parsed += len;
            }
            if value_len(&unframed[parsed..], 0).is_err() || unframed.len() > MAX_UNFRAMED {
                return;
            }
            let delay = shared.faults.borrow().reply_latency;
            let complete: Vec<u8> = unframed.drain(..parsed).collect();
            if let Some(to_client) = &queue
                && !complete.is_empty()
                && to_client
                    .send((Instant::now() + delay, complete))
                    .await
                    .is_err()
            {
                queue = None;
            }
            if dropped {
                return; // the delay line delivers the replies before it, then the connection ends
            }
        }
    };
    tokio::join!(read, deliver(queued, to));
}

/// The writing end of a delay line: writes each chunk at its due time, in order.
async fn deliver(mut queued: mpsc::Receiver<(Instant, Vec<u8>)>, mut to: impl AsyncWrite + Unpin) {
    while let Some((due, bytes)) = queued.recv().await {
        tokio::time::sleep_until(due).await;
        if to.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// Not RESP.
#[derive(Debug, PartialEq, Eq)]
struct Malformed;

/// The length of the first complete RESP value in `buf`; `Ok(None)` while it is incomplete.
fn value_len(buf: &[u8], depth: usize) -> Result<Option<usize>, Malformed> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if depth > MAX_DEPTH {
        return Err(Malformed);
    }
    let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let after = eol + 2;
    let count = || -> Result<Option<usize>, Malformed> {
        let n: i64 = std::str::from_utf8(&buf[1..eol])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(Malformed)?;
        Ok(usize::try_from(n).ok()) // negative: a null
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b'#' | b',' | b'(' => Ok(Some(after)),
        b'$' | b'!' | b'=' => match count()? {
            None => Ok(Some(after)),
            Some(n) => {
                let end = after
                    .checked_add(n)
                    .and_then(|e| e.checked_add(2))
                    .ok_or(Malformed)?;
                Ok((buf.len() >= end).then_some(end))
            }
        },
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let Some(n) = count()? else {
                return Ok(Some(after));
            };
            let items = if matches!(kind, b'%' | b'|') {
                n.checked_mul(2).ok_or(Malformed)?
            } else {
                n
            };
            let mut end = after;
            // Bounded by the buffer: every item takes at least 3 bytes, and a missing one ends
            // the loop with `Ok(None)`.
            for _ in 0..items {
                match value_len(&buf[end..], depth + 1)? {
                    Some(len) => end += len,
                    None => return Ok(None),
                }
            }
            Ok(Some(end))
        }
        _ => Err(Malformed),
    }
}

/// The command name of one complete request (`*N\r\n$L\r\nNAME\r\n...`).
fn command_name(command: &[u8]) -> Option<&[u8]> {
    let first = command.windows(2).position(|w| w == b"\r\n")? + 2;
    let rest = command.get(first..)?;
    let eol = rest.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(rest.get(1..eol)?).ok()?.parse().ok()?;
    (rest.first() == Some(&b'$')).then_some(())?;
    rest.get(eol + 2..eol + 2 + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_resp2_and_resp3_values() {
        assert_eq!(value_len(b"+OK\r\n", 0), Ok(Some(5)));
        assert_eq!(value_len(b"+OK\r", 0), Ok(None));
        assert_eq!(value_len(b"$-1\r\n", 0), Ok(Some(5)));
        assert_eq!(value_len(b"$5\r\na\r\nbc\r\n", 0), Ok(Some(11)));
        assert_eq!(value_len(b"$5\r\na\r\nb", 0), Ok(None));
        assert_eq!(value_len(b"*2\r\n:1\r\n:7\r\n+x\r\n", 0), Ok(Some(12)));
        assert_eq!(value_len(b"*2\r\n:1\r\n", 0), Ok(None));
        assert_eq!(value_len(b"%1\r\n+k\r\n_\r\n", 0), Ok(Some(11)));
        assert_eq!(value_len(b"*-1\r\n", 0), Ok(Some(5)));
        assert_eq!(value_len(b"PING\r\n", 0), Err(Malformed));
        assert_eq!(value_len(b"$x\r\n", 0), Err(Malformed));
        assert_eq!(value_len(b"", 0), Ok(None));
    }

    #[test]
    fn finds_the_command_name() {
        let set = b"*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n";
        assert_eq!(command_name(set), Some(&b"SET"[..]));
        assert_eq!(
            command_name(b"*1\r\n$7\r\nevalsha\r\n"),
            Some(&b"evalsha"[..])
        );
        assert_eq!(command_name(b"*0\r\n"), None);
    }

    async fn get(con: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query_async(con)
            .await
            .unwrap_or_else(|e| panic!("GET {key}: {e}"))
    }

    async fn set(
        con: &mut redis::aio::MultiplexedConnection,
        value: &str,
    ) -> redis::RedisResult<()> {
        redis::cmd("SET").arg("k").arg(value).query_async(con).await
    }

    /// A connection through the proxy with short timeouts, so a blackholed command fails fast.
    async fn through(proxy: &FaultProxy) -> redis::aio::MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(Duration::from_millis(300)));
        redis::Client::open(proxy.url())
            .unwrap_or_else(|e| panic!("{e}"))
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap_or_else(|e| panic!("connect through the proxy: {e}"))
    }

    /// Every fault, and its absence, against a real server.
    #[tokio::test]
    async fn faults_latency_blackhole_drop_reset_and_settle() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start(&server).await;
        let mut direct = server.connection().await;
        let mut con = through(&proxy).await;

        // No fault: a plain round trip.
        let started = Instant::now();
        set(&mut con, "1").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(started.elapsed() < Duration::from_millis(100));

        // Reply latency: the command runs at once, the answer comes 150 ms later.
        proxy.set_latency(Direction::Replies, Duration::from_millis(150));
        let started = Instant::now();
        set(&mut con, "2").await.unwrap_or_else(|e| panic!("{e}"));
        assert!(started.elapsed() >= Duration::from_millis(150));
        proxy.set_latency(Direction::Replies, Duration::ZERO);

        // Request latency: the command runs late; `settled` is the signal that it has run.
        proxy.set_latency(Direction::Requests, Duration::from_millis(150));
        let late = {
            let mut con = con.clone();
            tokio::spawn(async move {
                let _ = set(&mut con, "3").await;
            })
        };
        tokio::task::yield_now().await;
        assert_eq!(
            get(&mut direct, "k").await.as_deref(),
            Some("2"),
            "not run before its latency"
        );
        late.await.unwrap_or_else(|e| panic!("{e}"));
        proxy.settled().await;
        assert_eq!(get(&mut direct, "k").await.as_deref(), Some("3"));
        proxy.set_latency(Direction::Requests, Duration::ZERO);

        // Blackhole: the command never reaches Redis and never gets an answer.
        proxy.set_blackhole(true);
        let lost = set(&mut con, "4").await;
        assert!(lost.is_err(), "a blackholed command must time out");
        assert_eq!(proxy.pending(), 0, "blackholed requests are not pending");
        assert_eq!(get(&mut direct, "k").await.as_deref(), Some("3"));
        proxy.set_blackhole(false);
        let mut con = through(&proxy).await;

        // Drop the reply to the next SET: it runs, but the client sees a connection error.
        proxy.drop_reply_to("set");
        assert!(proxy.drop_armed());
        let _: String = redis::cmd("PING")
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let dropped = set(&mut con, "5").await;
        assert!(dropped.is_err(), "the reply must be lost: {dropped:?}");
        assert!(!proxy.drop_armed());
        assert_eq!(
            get(&mut direct, "k").await.as_deref(),
            Some("5"),
            "the command ran"
        );

        // Reset: open connections fail, new ones work.
        let mut con = through(&proxy).await;
        assert!(proxy.connections() >= 1);
        proxy.reset_connections().await;
        let reset: redis::RedisResult<String> =
            redis::cmd("GET").arg("k").query_async(&mut con).await;
        assert!(reset.is_err(), "a reset connection must fail: {reset:?}");
        let mut con = through(&proxy).await;
        assert_eq!(get(&mut con, "k").await.as_deref(), Some("5"));
        proxy.settled().await;

        // Drop: the listener closes.
        let port = proxy.port();
        drop(proxy);
        tokio::task::yield_now().await;
        let mut refused = false;
        for _ in 0..100 {
            if TcpStream::connect((Ipv4Addr::LOCALHOST, port))
                .await
                .is_err()
            {
                refused = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(refused, "the proxy must stop listening once dropped");
    }
}
