//! [`FakeRedis`]: a TCP server on loopback that answers like Redis only as far as a test wants.
//!
//! It parses each command a client sends (RESP arrays of bulk strings, or an inline command),
//! records it, and writes whatever reply the test's policy chooses: any bytes at all (wrong
//! types, truncated frames, huge lengths, errors, RESP3 types on a RESP2 connection), nothing,
//! or a closed connection. For proving that a client turns malformed replies into errors,
//! never a panic or a hang, and for seeing exactly what a client sent.
//!
//! [`handshake`] answers the commands a redis-rs client and a `LockManager` send while
//! connecting, so that a policy can let the connection come up and then misbehave.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The most a client may send without completing a command before its connection is closed.
const MAX_PENDING: usize = 8 * 1024 * 1024;
/// The most connections served at once.
const MAX_CONNECTIONS: usize = 64;

/// What the server does with one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FakeReply {
    /// Writes these bytes as they are (valid RESP or not).
    Bytes(Vec<u8>),
    /// Writes nothing: the client waits for its response timeout.
    Silence,
    /// Writes these bytes (possibly none), then closes the connection.
    BytesThenClose(Vec<u8>),
}

impl FakeReply {
    /// `bytes` as they are.
    pub fn raw(bytes: impl AsRef<[u8]>) -> FakeReply {
        FakeReply::Bytes(bytes.as_ref().to_vec())
    }
}

/// One command as the client sent it: its arguments, the name first.
pub type FakeCommand = Vec<Vec<u8>>;

type Policy = Arc<dyn Fn(&[Vec<u8>]) -> FakeReply + Send + Sync>;

#[derive(Default)]
struct Seen {
    bytes: Mutex<Vec<u8>>,
    commands: Mutex<Vec<FakeCommand>>,
    connections: AtomicUsize,
}

/// A fake Redis on `127.0.0.1`, serving on the tokio runtime it was started on. Dropping it
/// closes the listener and every connection.
///
/// ```no_run
/// # async fn demo() {
/// use lockcore_tests::{FakeRedis, FakeReply, handshake};
///
/// // Connects, then answers every other command with an integer.
/// let fake = FakeRedis::start(|cmd| handshake(cmd).unwrap_or(FakeReply::raw(":42\r\n"))).await;
/// let url = fake.url();
/// # drop(url);
/// # }
/// ```
pub struct FakeRedis {
    port: u16,
    seen: Arc<Seen>,
    accept: JoinHandle<()>,
}

impl Drop for FakeRedis {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl FakeRedis {
    /// Starts serving; `policy` chooses the reply to each command.
    ///
    /// # Panics
    /// Outside a tokio runtime, or if no loopback port can be bound.
    pub async fn start(
        policy: impl Fn(&[Vec<u8>]) -> FakeReply + Send + Sync + 'static,
    ) -> FakeRedis {
        let listener = TcpListener::bind((crate::ports::HOST, 0))
            .await
            .unwrap_or_else(|e| panic!("fake redis: cannot bind: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("fake redis: {e}"))
            .port();
        let seen = Arc::new(Seen::default());
        let policy: Policy = Arc::new(policy);
        let accept = tokio::spawn(accept_loop(listener, policy, Arc::clone(&seen)));
        FakeRedis { port, seen, accept }
    }

    /// A server that answers the connection [`handshake`] and refuses every other command
    /// with `-ERR`, recording what clients send.
    pub async fn refusing() -> FakeRedis {
        FakeRedis::start(|cmd| {
            handshake(cmd).unwrap_or_else(|| FakeReply::raw("-ERR not a real server\r\n"))
        })
        .await
    }

    /// A server that never answers.
    pub async fn silent() -> FakeRedis {
        FakeRedis::start(|_| FakeReply::Silence).await
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://{}:{}/", crate::ports::HOST, self.port)
    }

    /// Every byte any client has sent so far.
    pub fn received(&self) -> Vec<u8> {
        lock(&self.seen.bytes).clone()
    }

    /// Every command any client has sent so far, in arrival order.
    pub fn commands(&self) -> Vec<FakeCommand> {
        lock(&self.seen.commands).clone()
    }

    /// The upper-case names of [`commands`](Self::commands).
    pub fn command_names(&self) -> Vec<String> {
        self.commands()
            .iter()
            .map(|cmd| name_of(cmd))
            .collect::<Vec<_>>()
    }

    /// How many connections clients have opened.
    pub fn connections(&self) -> usize {
        self.seen.connections.load(Ordering::Relaxed)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The command's name, upper-case (empty for an empty command).
pub fn name_of(cmd: &[Vec<u8>]) -> String {
    cmd.first()
        .map(|name| String::from_utf8_lossy(name).to_ascii_uppercase())
        .unwrap_or_default()
}

async fn accept_loop(listener: TcpListener, policy: Policy, seen: Arc<Seen>) {
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        while connections.try_join_next().is_some() {}
        if connections.len() >= MAX_CONNECTIONS {
            continue;
        }
        seen.connections.fetch_add(1, Ordering::Relaxed);
        connections.spawn(serve(stream, Arc::clone(&policy), Arc::clone(&seen)));
    }
}

async fn serve(mut stream: TcpStream, policy: Policy, seen: Arc<Seen>) {
    let _ = stream.set_nodelay(true);
    let mut pending = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        lock(&seen.bytes).extend_from_slice(&chunk[..n]);
        pending.extend_from_slice(&chunk[..n]);
        loop {
            let (cmd, used) = match parse_command(&pending) {
                Parsed::Command(cmd, used) => (cmd, used),
                Parsed::Incomplete if pending.len() <= MAX_PENDING => break,
                Parsed::Incomplete | Parsed::Malformed => return,
            };
            pending.drain(..used);
            let reply = policy(&cmd);
            lock(&seen.commands).push(cmd);
            match reply {
                FakeReply::Bytes(bytes) => {
                    if stream.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                FakeReply::Silence => {}
                FakeReply::BytesThenClose(bytes) => {
                    let _ = stream.write_all(&bytes).await;
                    let _ = stream.shutdown().await;
                    return;
                }
            }
        }
    }
}

enum Parsed {
    Command(FakeCommand, usize),
    Incomplete,
    Malformed,
}

/// One command at the start of `buf`: `*N\r\n` followed by N bulk strings, or an inline line.
fn parse_command(buf: &[u8]) -> Parsed {
    let Some(line_end) = find_crlf(buf, 0) else {
        return Parsed::Incomplete;
    };
    if buf.first() != Some(&b'*') {
        let line = &buf[..line_end];
        let args = line
            .split(|&b| b == b' ')
            .filter(|arg| !arg.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        return Parsed::Command(args, line_end + 2);
    }
    let Some(count) = number(&buf[1..line_end]) else {
        return Parsed::Malformed;
    };
    let mut at = line_end + 2;
    let mut args = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let Some(end) = find_crlf(buf, at) else {
            return Parsed::Incomplete;
        };
        if buf[at] != b'$' {
            return Parsed::Malformed;
        }
        let Some(len) = number(&buf[at + 1..end]) else {
            return Parsed::Malformed;
        };
        let start = end + 2;
        let Some(stop) = start.checked_add(len) else {
            return Parsed::Malformed;
        };
        if buf.len() < stop + 2 {
            return Parsed::Incomplete;
        }
        args.push(buf[start..stop].to_vec());
        at = stop + 2;
    }
    Parsed::Command(args, at)
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn number(digits: &[u8]) -> Option<usize> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The reply a real server gives to a command that redis-rs or a `LockManager` sends while
/// connecting (`CLIENT SETINFO`, `AUTH`, `SELECT`, `PING`, `SCRIPT LOAD` with the script's true
/// SHA1, `CONFIG GET`, `SUBSCRIBE`, `INFO`), `None` for any other command.
pub fn handshake(cmd: &[Vec<u8>]) -> Option<FakeReply> {
    let reply = match name_of(cmd).as_str() {
        "CLIENT" | "AUTH" | "SELECT" | "READONLY" => "+OK\r\n".to_owned(),
        "PING" => "+PONG\r\n".to_owned(),
        // The true SHA1: redis-rs debug-asserts the hash `SCRIPT LOAD` returns.
        "SCRIPT" => {
            let source = cmd
                .get(2)
                .map(|s| String::from_utf8_lossy(s))
                .unwrap_or_default();
            format!("$40\r\n{}\r\n", redis::Script::new(&source).get_hash())
        }
        "CONFIG" => "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n".to_owned(),
        "INFO" => "$20\r\nredis_version:7.0.0\r\n".to_owned(),
        "SUBSCRIBE" => {
            let mut acks = String::new();
            for (i, channel) in cmd.iter().skip(1).enumerate() {
                let channel = String::from_utf8_lossy(channel);
                acks.push_str(&format!(
                    "*3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:{}\r\n",
                    channel.len(),
                    i + 1
                ));
            }
            acks
        }
        _ => return None,
    };
    Some(FakeReply::Bytes(reply.into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_framed() {
        let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n";
        let Parsed::Command(cmd, used) = parse_command(buf) else {
            panic!("a command")
        };
        assert_eq!(cmd, vec![b"GET".to_vec(), b"k".to_vec()]);
        let Parsed::Command(inline, _) = parse_command(&buf[used..]) else {
            panic!("an inline command")
        };
        assert_eq!(name_of(&inline), "PING");
        assert!(matches!(
            parse_command(b"*2\r\n$3\r\nGET\r\n"),
            Parsed::Incomplete
        ));
        assert!(matches!(parse_command(b"*x\r\n"), Parsed::Malformed));
    }
}
