//! How lockcore connects: the builder's connection settings, and the parsing of the URLs (or
//! clients) it is given, which refuses anything that would weaken TLS.

use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::io::tcp::TcpSettings;
use redis::{Client, ConnectionInfo, IntoConnectionInfo};

use crate::error::LockError;
use crate::transport::tls::TlsFiles;
use crate::util::redact::redact_url;

/// How the builder connects every node.
#[derive(Debug, Clone)]
pub(crate) struct ConnectOptions {
    pub(crate) connection_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// `TCP_NODELAY` on every connection (see `LockManagerBuilder::tcp_nodelay`).
    pub(crate) tcp_nodelay: bool,
    pub(crate) tls: TlsFiles,
}

impl ConnectOptions {
    /// The TCP settings of every connection lockcore opens (nodes, cluster nodes, sentinels
    /// and the primaries they resolve).
    pub(crate) fn tcp_settings(&self) -> TcpSettings {
        TcpSettings::default().set_nodelay(self.tcp_nodelay)
    }
}

/// Whether `url` names a TLS scheme (`rediss://` or `valkeys://`, in any case), the only ones
/// redis-rs connects to with TLS.
fn uses_tls(url: &str) -> bool {
    url.split_once("://").is_some_and(|(scheme, _)| {
        scheme.eq_ignore_ascii_case("rediss") || scheme.eq_ignore_ascii_case("valkeys")
    })
}

/// Whether `url` ends in the fragment `#insecure` (any case). redis-rs honours it on a TLS URL
/// (certificate checks off) and ignores it on a plain one, where it is refused all the same:
/// whoever wrote it expects something lockcore never does.
fn asks_insecure(url: &str) -> bool {
    url.rsplit_once('#')
        .is_some_and(|(_, fragment)| fragment.eq_ignore_ascii_case("insecure"))
}

/// The refusal of a URL that asks for `#insecure`, naming it without its password.
fn insecure_refused(url: &str) -> LockError {
    LockError::InvalidOptions {
        reason: format!(
            "the URL `{}` asks for `#insecure`, which turns the server's certificate check off; lockcore always verifies it: remove the fragment, and trust a private CA with `tls_root_ca_pem`",
            redact_url(url)
        ),
    }
}

/// The connection info for `url`, with the builder's TCP settings.
///
/// # Errors
/// [`LockError::InvalidOptions`] for a malformed URL (the message shows the URL without
/// its password), a `rediss://` URL without the `tls` feature, or any URL with `#insecure`
/// (`redis://` too).
pub(crate) fn connection_info(
    url: &str,
    options: &ConnectOptions,
) -> Result<ConnectionInfo, LockError> {
    // Before redis-rs parses it: without its TLS feature, redis-rs refuses a TLS URL as
    // if it were malformed.
    if uses_tls(url) {
        crate::transport::tls::ensure_supported(url)?;
    }
    if asks_insecure(url) {
        return Err(insecure_refused(url));
    }
    let info = url
        .into_connection_info()
        .map_err(|err| LockError::InvalidOptions {
            reason: format!(
                "the Redis URL `{}` is malformed ({}); expected `redis://[user:password@]host:port/` or `rediss://...`",
                redact_url(url),
                err.detail().unwrap_or("bad URL"),
            ),
        })?
        .set_tcp_settings(options.tcp_settings());
    if let redis::ConnectionAddr::TcpTls { insecure, .. } = info.addr() {
        // Whatever redis-rs features another crate turns on: certificates are always checked.
        if *insecure {
            return Err(insecure_refused(url));
        }
    }
    Ok(info)
}

/// Accepts an application's own client: certificates must be checked (no `#insecure`),
/// and a TLS address needs the `tls` feature (which also installs the crypto provider).
///
/// # Errors
/// [`LockError::InvalidOptions`], naming the address (never a password).
pub(crate) fn check_client(client: &Client) -> Result<(), LockError> {
    if let redis::ConnectionAddr::TcpTls { insecure, .. } = client.get_connection_info().addr() {
        let addr = client.get_connection_info().addr().to_string();
        if *insecure {
            return Err(LockError::InvalidOptions {
                reason: format!(
                    "the client for `{addr}` turns the server's certificate check off (`#insecure`); lockcore always verifies it: build the client without it, and trust a private CA in its TLS settings"
                ),
            });
        }
        crate::transport::tls::ensure_supported(&format!("rediss://{addr}"))?;
    }
    Ok(())
}

/// [`connection_info`](connection_info) of every URL.
pub(crate) fn connection_infos(
    urls: &[String],
    options: &ConnectOptions,
) -> Result<Vec<ConnectionInfo>, LockError> {
    urls.iter()
        .map(|url| connection_info(url, options))
        .collect()
}

/// The redis-rs client for `url` (see [`connection_info`](connection_info)), trusting
/// the builder's CA for `rediss://`.
pub(crate) fn client(url: &str, options: &ConnectOptions) -> Result<Client, LockError> {
    let info = connection_info(url, options)?;
    Ok(options.tls.client(info)?)
}

/// The `ConnectionManager` settings every plain connection uses.
pub(crate) fn manager_config(options: &ConnectOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(options.connection_timeout))
        .set_response_timeout(Some(options.response_timeout))
        .set_number_of_retries(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> ConnectOptions {
        ConnectOptions {
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            tcp_nodelay: true,
            tls: TlsFiles::default(),
        }
    }

    /// Without the `tls` feature a TLS URL is refused with the fix (the feature to enable),
    /// whatever redis-rs would say of it, and without its password.
    #[cfg(not(feature = "tls"))]
    #[test]
    fn a_tls_url_without_the_feature_names_the_feature() {
        for url in [
            "rediss://127.0.0.1:7391/",
            "REDISS://127.0.0.1:7391/",
            "valkeys://app:s3cret@127.0.0.1:7391/",
            "rediss://127.0.0.1:7391/#insecure",
        ] {
            let Err(LockError::InvalidOptions { reason }) = connection_info(url, &options()) else {
                panic!("{url}: expected InvalidOptions");
            };
            assert!(
                reason.contains("enable lockcore's cargo feature `tls`"),
                "{url}: {reason}"
            );
            assert!(!reason.contains("malformed"), "{url}: {reason}");
            assert!(!reason.contains("s3cret"), "{url}: {reason}");
        }
    }

    /// The twin: with the feature the same URLs are accepted as TLS addresses.
    #[cfg(feature = "tls")]
    #[test]
    fn a_tls_url_with_the_feature_is_a_tls_address() {
        for url in [
            "rediss://127.0.0.1:7391/",
            "valkeys://app:s3cret@127.0.0.1:7391/",
        ] {
            let info = connection_info(url, &options()).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(
                matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }),
                "{url}"
            );
        }
    }

    /// `#insecure` is refused on a plain `redis://` URL too (redis-rs would ignore it), naming
    /// the URL without its password; the same URL without the fragment passes.
    #[test]
    fn insecure_is_refused_on_a_plain_url() {
        for url in [
            "redis://127.0.0.1:7391/#insecure",
            "redis://app:s3cret@127.0.0.1:7391/0#INSECURE",
            "valkey://127.0.0.1:7391/#insecure",
        ] {
            let Err(LockError::InvalidOptions { reason }) = connection_info(url, &options()) else {
                panic!("{url}: expected InvalidOptions");
            };
            assert!(reason.contains("`#insecure`"), "{url}: {reason}");
            assert!(reason.contains("127.0.0.1:7391"), "{url}: {reason}");
            assert!(!reason.contains("s3cret"), "{url}: {reason}");
        }
        assert!(connection_info("redis://app:s3cret@127.0.0.1:7391/0", &options()).is_ok());
    }

    /// A malformed URL is still called malformed, and a plain one passes.
    #[test]
    fn other_urls_are_unchanged() {
        let Err(LockError::InvalidOptions { reason }) =
            connection_info("http://127.0.0.1:7391/", &options())
        else {
            panic!("expected InvalidOptions");
        };
        assert!(reason.contains("malformed"), "{reason}");
        assert!(connection_info("redis://127.0.0.1:7391/", &options()).is_ok());
    }
}
