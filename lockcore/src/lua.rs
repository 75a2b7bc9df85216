//! Script sources by their SHA1, and the `SCRIPT LOAD` that sends them: lockcore loads its
//! scripts itself, because redis-rs' loader (`Script::load_async`, and `invoke_async` after
//! `NOSCRIPT`) asserts the hash the server returns, which panics a debug build on a server's
//! reply.

use once_cell::sync::Lazy;
use redis::Script;

/// The source of every script made with [`lua`], by its SHA1, for [`load`].
static SOURCES: Lazy<std::sync::Mutex<Vec<(String, String)>>> = Lazy::new(Default::default);

/// The script of `source`, whose source [`load`] can send.
pub(crate) fn lua(source: &str) -> Script {
    let script = Script::new(source);
    let mut sources = SOURCES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !sources.iter().any(|(hash, _)| hash == script.get_hash()) {
        sources.push((script.get_hash().to_owned(), source.to_owned()));
    }
    script
}

/// `SCRIPT LOAD` of `script` (made with [`lua`]). A reply other than the script's SHA1 is an
/// error: redis-rs' own loader (`Script::load_async`, and `invoke_async` after `NOSCRIPT`)
/// asserts it, which panics a debug build on a server's reply.
pub(crate) async fn load(
    script: &Script,
    conn: &mut impl redis::aio::ConnectionLike,
) -> redis::RedisResult<()> {
    let source = SOURCES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .find(|(hash, _)| hash == script.get_hash())
        .map(|(_, source)| source.clone());
    let Some(source) = source else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "a lockcore script without a source to load",
        )));
    };
    let reply: redis::Value = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(conn)
        .await?;
    let hash: &[u8] = match &reply {
        redis::Value::BulkString(hash) => hash,
        redis::Value::SimpleString(hash) => hash.as_bytes(),
        _ => &[],
    };
    if hash == script.get_hash().as_bytes() {
        return Ok(());
    }
    Err(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "the server answered `SCRIPT LOAD` with another value than the script's SHA1",
        format!("expected {}, got {reply:?}", script.get_hash()),
    )))
}
