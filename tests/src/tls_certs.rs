//! A throw-away PKI for the TLS test server, made with `rcgen`: a CA, a
//! server certificate and a client certificate.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// PEM files for one TLS test server.
#[derive(Clone)]
pub(crate) struct TestPki {
    pub(crate) ca_pem: String,
    pub(crate) server_cert_pem: String,
    pub(crate) server_key_pem: String,
    pub(crate) client_cert_pem: String,
    pub(crate) client_key_pem: String,
}

impl TestPki {
    /// A fresh CA; a server certificate for `DNS:localhost, IP:127.0.0.1`
    /// with EKU `serverAuth` + `clientAuth` (Redis also presents it as a client,
    /// e.g. to replicate); a client certificate (EKU `clientAuth`, CN
    /// `lockcore-test-client`). All signed by the CA.
    ///
    /// # Panics
    ///
    /// If `rcgen` fails, which it does not for these fixed parameters.
    pub(crate) fn generate() -> TestPki {
        let ca_key = key_pair();
        let mut ca = params(&[]);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.distinguished_name
            .push(DnType::CommonName, "lockcore test CA");
        let ca_cert = ca
            .self_signed(&ca_key)
            .unwrap_or_else(|e| panic!("rcgen: cannot self-sign the test CA: {e}"));
        let issuer = Issuer::new(ca, ca_key);

        let server_key = key_pair();
        let mut server = params(&["localhost", "127.0.0.1"]);
        server
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        server.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .unwrap_or_else(|e| panic!("rcgen: cannot sign the server certificate: {e}"));

        let client_key = key_pair();
        let mut client = params(&[]);
        client
            .distinguished_name
            .push(DnType::CommonName, "lockcore-test-client");
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        client.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let client_cert = client
            .signed_by(&client_key, &issuer)
            .unwrap_or_else(|e| panic!("rcgen: cannot sign the client certificate: {e}"));

        TestPki {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        }
    }
}

fn key_pair() -> KeyPair {
    KeyPair::generate().unwrap_or_else(|e| panic!("rcgen: cannot generate a key pair: {e}"))
}

/// Parameters with these SANs (an IP literal becomes an `IP:` SAN).
fn params(subject_alt_names: &[&str]) -> CertificateParams {
    let names: Vec<String> = subject_alt_names.iter().map(|s| (*s).to_owned()).collect();
    CertificateParams::new(names).unwrap_or_else(|e| panic!("rcgen: bad SANs: {e}"))
}
