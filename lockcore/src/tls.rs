//! `rediss://` support (cargo feature `tls`): rustls with the ring crypto provider, and the
//! builder's private CA and client certificate.

use redis::{Client, ConnectionInfo};

use crate::LockError;
#[cfg(not(feature = "tls"))]
use crate::redact::redact_url;

/// The PEM material given to the builder; empty without the `tls` feature.
#[derive(Clone, Default)]
pub(crate) struct TlsFiles {
    pub(crate) root_ca_pem: Option<Vec<u8>>,
    pub(crate) client_cert_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material itself.
        f.debug_struct("TlsFiles")
            .field("root_ca_pem", &self.root_ca_pem.is_some())
            .field("client_cert_pem", &self.client_cert_pem.is_some())
            .finish()
    }
}

/// Accepts a `rediss://` URL when the `tls` feature is on, and installs the process-wide
/// rustls crypto provider (ring) unless one is installed already: redis 1.x pulls rustls 0.23
/// without a provider, and its first TLS connect would panic.
///
/// # Errors
/// [`LockError::InvalidOptions`] when the feature is off.
pub(crate) fn ensure_supported(url: &str) -> Result<(), LockError> {
    #[cfg(feature = "tls")]
    {
        let _ = url;
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // An `Err` means another thread installed one first: just as good.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        Ok(())
    }
    #[cfg(not(feature = "tls"))]
    {
        Err(LockError::InvalidOptions {
            reason: format!(
                "the URL `{}` uses TLS (`rediss://`); enable lockcore's cargo feature `tls`",
                redact_url(url)
            ),
        })
    }
}

impl TlsFiles {
    #[cfg(feature = "tls")]
    fn certificates(&self) -> Option<redis::TlsCertificates> {
        if self.root_ca_pem.is_none() && self.client_cert_pem.is_none() {
            return None;
        }
        Some(redis::TlsCertificates {
            client_tls: self
                .client_cert_pem
                .clone()
                .map(|(client_cert, client_key)| redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }),
            root_cert: self.root_ca_pem.clone(),
        })
    }

    /// The client for `info`, trusting the configured CA (and presenting the client
    /// certificate) on a `rediss://` address.
    pub(crate) fn client(&self, info: ConnectionInfo) -> redis::RedisResult<Client> {
        #[cfg(feature = "tls")]
        if matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. })
            && let Some(certificates) = self.certificates()
        {
            return Client::build_with_tls(info, certificates);
        }
        Client::open(info)
    }

    /// The Sentinel client builder with the configured CA and client certificate, for the
    /// sentinels and the primary.
    pub(crate) fn sentinel(
        &self,
        builder: redis::sentinel::SentinelClientBuilder,
    ) -> redis::sentinel::SentinelClientBuilder {
        #[cfg(feature = "tls")]
        if let Some(certificates) = self.certificates() {
            return builder
                .set_client_to_redis_certificates(certificates.clone())
                .set_client_to_sentinel_certificates(certificates);
        }
        builder
    }

    /// The cluster client builder with the configured CA and client certificate.
    pub(crate) fn cluster(
        &self,
        builder: redis::cluster::ClusterClientBuilder,
    ) -> redis::cluster::ClusterClientBuilder {
        #[cfg(feature = "tls")]
        if let Some(certificates) = self.certificates() {
            return builder.certs(certificates);
        }
        builder
    }
}
