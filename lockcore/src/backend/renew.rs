//! The renewal call: one [`RENEW`](scripts::RENEW) script call (compare-and-`PEXPIRE`) over a
//! group of leases, on one node. Which leases may share a call is the backend's choice
//! (on a cluster: one slot per call).

use std::time::Duration;

use crate::protocol::call::Call;
use crate::protocol::scripts;
use crate::transport::node::Node;
use crate::util::time::duration_ms;

/// One lease to renew: its key, its lock value (the token) and the TTL to set.
pub(crate) type RenewItem<'a> = (&'a str, &'a str, Duration);

/// Renews every lease of `leases` in one script call. Entry `i` of the reply is `true` when
/// lease `i` held its key and its TTL was set, `false` when the key is gone, holds another
/// token or another type. On Redis Cluster every key must sit in one slot.
///
/// # Errors
/// The call's error (explained by [`explain`](crate::protocol::explain::explain)), or a client error when the reply does
/// not have one entry per lease.
pub(crate) async fn renew_on(
    node: &mut Node,
    leases: &[RenewItem<'_>],
) -> redis::RedisResult<Vec<bool>> {
    let bytes = leases
        .iter()
        .map(|(key, token, _)| key.len() + token.len() + 20)
        .sum();
    let mut call = Call::new(&scripts::RENEW, leases.len(), leases.len() * 3, bytes);
    for (key, _, _) in leases {
        call.arg(*key);
    }
    for (_, token, ttl) in leases {
        call.arg(*token).arg(duration_ms(*ttl));
    }
    let renewed: Vec<i64> = call.invoke(node).await?;
    if renewed.len() != leases.len() {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "unexpected reply of the renewal script",
            format!(
                "expected {} entries, got {}: {renewed:?}",
                leases.len(),
                renewed.len()
            ),
        )));
    }
    Ok(renewed.into_iter().map(|ok| ok == 1).collect())
}
