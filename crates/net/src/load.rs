//! TLS material read from files and what is built of it: certificate
//! chains, private keys (PEM or DER) and CA roots ([`certs`], [`key`],
//! [`roots`], each failing with a [`LoadError`] its caller words as it
//! words its settings), the TLS versions spoken ([`versions`]), and the
//! client-certificate verifier of a listener ([`client_verifier`]: none
//! asked for, optional or required, against the CA roots; with none,
//! OpenSSL's behaviour, [`NoTrustedRoots`]).

use std::fmt;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    DigitallySignedStruct, DistinguishedName, Error, RootCertStore, SignatureScheme,
    SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};

/// Why a file gave no certificate, key or CA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// It could not be read or parsed (the reason).
    Unreadable(String),
    /// It holds no certificate.
    NoCertificate,
    /// A certificate of a CA file is not one a CA store takes (the reason).
    NotCa(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Unreadable(why) | LoadError::NotCa(why) => f.write_str(why),
            LoadError::NoCertificate => f.write_str("no certificate found"),
        }
    }
}

/// The certificates of a PEM file, in order (the end entity first in a
/// chain); at least one.
pub fn certs(path: &str) -> Result<Vec<CertificateDer<'static>>, LoadError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| LoadError::Unreadable(e.to_string()))?;
    if certs.is_empty() {
        return Err(LoadError::NoCertificate);
    }
    Ok(certs)
}

/// How a private key file is encoded (memcached's `ssl_keyformat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyFormat {
    /// PEM (`ssl_keyformat` 1).
    Pem,
    /// DER (`ssl_keyformat` 2).
    Der,
}

/// The private key of a file.
pub fn key(path: &str, format: KeyFormat) -> Result<PrivateKeyDer<'static>, LoadError> {
    let unreadable = |e: &dyn fmt::Display| LoadError::Unreadable(e.to_string());
    match format {
        KeyFormat::Pem => PrivateKeyDer::from_pem_file(path).map_err(|e| unreadable(&e)),
        KeyFormat::Der => {
            let der = std::fs::read(path).map_err(|e| unreadable(&e))?;
            PrivateKeyDer::try_from(der).map_err(|e| unreadable(&e))
        }
    }
}

/// The CA roots of a PEM file; at least one.
pub fn roots(path: &str) -> Result<RootCertStore, LoadError> {
    let mut roots = RootCertStore::empty();
    for cert in certs(path)? {
        roots
            .add(cert)
            .map_err(|e| LoadError::NotCa(e.to_string()))?;
    }
    Ok(roots)
}

/// The lowest TLS version spoken (rustls speaks 1.2 and 1.3 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinVersion {
    /// TLS 1.2 and 1.3.
    Tls12,
    /// TLS 1.3 only.
    Tls13,
}

static TLS12_UP: [&SupportedProtocolVersion; 2] =
    [&rustls::version::TLS13, &rustls::version::TLS12];
static TLS13_ONLY: [&SupportedProtocolVersion; 1] = [&rustls::version::TLS13];

/// The versions spoken from `min` up.
pub fn versions(min: MinVersion) -> &'static [&'static SupportedProtocolVersion] {
    match min {
        MinVersion::Tls12 => &TLS12_UP,
        MinVersion::Tls13 => &TLS13_ONLY,
    }
}

/// Whether a TLS listener's clients present a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyClients {
    /// None is asked for.
    None,
    /// Asked for; verified when presented; a client without one is served.
    Optional,
    /// A client without a certificate that verifies is refused.
    Required,
}

/// The verifier of a listener's client certificates: against `roots`
/// when asked for; with no roots, every certificate fails (as OpenSSL with
/// no trusted CA) and a client without one is refused only when one is
/// required. Err: rustls's reason the verifier could not be built.
pub fn client_verifier(
    verify: VerifyClients,
    roots: Option<Arc<RootCertStore>>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, String> {
    if verify == VerifyClients::None {
        return Ok(WebPkiClientVerifier::no_client_auth());
    }
    let Some(roots) = roots else {
        return Ok(Arc::new(NoTrustedRoots {
            mandatory: verify == VerifyClients::Required,
            provider: provider.clone(),
        }));
    };
    let b = WebPkiClientVerifier::builder_with_provider(roots, provider.clone());
    let b = if verify == VerifyClients::Optional {
        b.allow_unauthenticated()
    } else {
        b
    };
    b.build().map_err(|e| e.to_string())
}

/// Client certificates asked for with no CA to verify them against: as
/// OpenSSL with no trusted CA, every certificate fails, and a connection
/// without one is refused only when one is required.
#[derive(Debug)]
pub struct NoTrustedRoots {
    mandatory: bool,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for NoTrustedRoots {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        Err(Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ))
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &[u8]) -> String {
        let dir = std::env::temp_dir().join(format!("osmium-net-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    }

    #[test]
    fn files_without_material_say_why() {
        assert_eq!(
            certs(&file("empty.pem", b"")).unwrap_err(),
            LoadError::NoCertificate
        );
        assert_eq!(
            roots(&file("empty-ca.pem", b"")).unwrap_err().to_string(),
            "no certificate found"
        );
        assert!(matches!(
            certs("/nonexistent/osmium-net.pem"),
            Err(LoadError::Unreadable(_))
        ));
        assert!(key(&file("nokey.pem", b"no key here\n"), KeyFormat::Pem).is_err());
        assert!(key(&file("nokey.der", b"\x01\x02"), KeyFormat::Der).is_err());
    }

    #[test]
    fn tls13_only_speaks_one_version() {
        assert_eq!(versions(MinVersion::Tls13).len(), 1);
        assert_eq!(versions(MinVersion::Tls12).len(), 2);
    }

    #[test]
    fn without_roots_a_required_certificate_is_still_required() {
        let p = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let v = client_verifier(VerifyClients::Required, None, &p).unwrap();
        assert!(v.offer_client_auth() && v.client_auth_mandatory());
        let v = client_verifier(VerifyClients::Optional, None, &p).unwrap();
        assert!(v.offer_client_auth() && !v.client_auth_mandatory());
        let v = client_verifier(VerifyClients::None, None, &p).unwrap();
        assert!(!v.offer_client_auth());
    }
}
