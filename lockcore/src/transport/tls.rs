//! `rediss://` support (cargo feature `tls`): rustls with the ring crypto provider, and the
//! builder's private CA and client certificate.

use redis::{Client, ConnectionInfo};

use crate::error::LockError;
#[cfg(not(feature = "tls"))]
use crate::util::redact::redact_url;

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
    /// Checks the PEM material before anything connects: the CA (and the client certificate)
    /// holds at least one certificate and each one parses, the client key holds a private key.
    /// Otherwise every handshake would fail later with a less helpful error.
    ///
    /// # Errors
    /// [`LockError::InvalidOptions`] naming the builder call and what is missing.
    pub(crate) fn check(&self) -> Result<(), LockError> {
        #[cfg(feature = "tls")]
        {
            if let Some(pem) = &self.root_ca_pem {
                pem_check::certificates(pem, "tls_root_ca_pem")?;
            }
            if let Some((cert, key)) = &self.client_cert_pem {
                pem_check::certificates(cert, "tls_client_cert_pem")?;
                pem_check::private_key(key, "tls_client_cert_pem")?;
            }
        }
        Ok(())
    }

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

/// PEM parsing with rustls' own PEM support, for [`TlsFiles::check`].
#[cfg(feature = "tls")]
mod pem_check {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use crate::error::LockError;

    fn invalid(reason: String) -> LockError {
        LockError::InvalidOptions { reason }
    }

    /// Every certificate of `pem` parses, and there is at least one.
    pub(super) fn certificates(pem: &[u8], call: &str) -> Result<(), LockError> {
        let mut found = 0;
        for (i, cert) in CertificateDer::pem_slice_iter(pem).enumerate() {
            let cert = cert.map_err(|e| {
                invalid(format!(
                    "the PEM given to `{call}` does not decode at certificate #{} ({e}); expected PEM `-----BEGIN CERTIFICATE-----` blocks",
                    i + 1
                ))
            })?;
            // Parses the certificate as rustls does for a trust anchor.
            rustls::RootCertStore::empty().add(cert).map_err(|e| {
                invalid(format!(
                    "certificate #{} in the PEM given to `{call}` is not a valid certificate ({e}); expected X.509 certificates in PEM",
                    i + 1
                ))
            })?;
            found += 1;
        }
        if found == 0 {
            return Err(invalid(format!(
                "the PEM given to `{call}` holds no certificate; expected at least one `-----BEGIN CERTIFICATE-----` block"
            )));
        }
        Ok(())
    }

    /// `pem` holds a private key.
    pub(super) fn private_key(pem: &[u8], call: &str) -> Result<(), LockError> {
        PrivateKeyDer::from_pem_slice(pem).map(drop).map_err(|e| {
            invalid(format!(
                "the key PEM given to `{call}` holds no private key ({e}); expected a `-----BEGIN PRIVATE KEY-----` (or RSA / EC) block"
            ))
        })
    }
}
