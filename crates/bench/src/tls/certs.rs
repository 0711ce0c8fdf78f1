//! Test certificates for the TLS benchmarks, made at bench time by
//! `osmium_test_harness::Certs` in a temporary directory (removed on
//! drop): a CA and a server certificate it signs for `localhost` and
//! 127.0.0.1, both ECDSA P-256 or both RSA-2048; and the rustls client
//! configurations that trust that CA.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::{Resumption, Tls12Resumption};
use rustls::crypto::aws_lc_rs;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

/// The key type of the server certificate (and of its CA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum KeyType {
    /// ECDSA on P-256.
    EcdsaP256,
    /// RSA, 2048 bits (what memcached users typically deploy).
    Rsa2048,
}

impl KeyType {
    pub(crate) fn name(self) -> &'static str {
        match self {
            KeyType::EcdsaP256 => "ECDSA P-256",
            KeyType::Rsa2048 => "RSA-2048",
        }
    }
}

/// The TLS versions a client offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Version {
    #[value(name = "1.2")]
    V12,
    #[value(name = "1.3")]
    V13,
    /// Both (the server picks 1.3).
    Any,
}

impl Version {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Version::V12 => "TLS 1.2",
            Version::V13 => "TLS 1.3",
            Version::Any => "TLS 1.2/1.3",
        }
    }
}

/// How a resuming client resumes TLS 1.2 sessions (TLS 1.3 always uses
/// tickets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Tls12Resume {
    /// A ticket when the server issued one, else the session ID (rustls
    /// `SessionIdOrTickets`).
    Tickets,
    /// The session ID only (rustls `SessionIdOnly`): resumes only from a
    /// server's session-ID cache (`-o ssl_session_cache`).
    Ids,
}

/// The files [`Certs::make`] writes.
const FILES: [&str; 4] = ["ca.key", "ca.pem", "server.key", "server.pem"];

/// The certificates of one run, in a directory of their own (removed on
/// drop).
pub(crate) struct Certs {
    made: osmium_test_harness::Certs,
    pub key_type: KeyType,
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Certs {
    /// A CA and a server certificate of `key_type` (for server and client
    /// use: a replication node presents it on its links) in a new
    /// temporary directory.
    pub(crate) fn make(key_type: KeyType) -> Result<Certs, String> {
        let mut made = osmium_test_harness::Certs::empty(match key_type {
            KeyType::EcdsaP256 => osmium_test_harness::KeyType::EcdsaP256,
            KeyType::Rsa2048 => osmium_test_harness::KeyType::Rsa2048,
        });
        // A signal stopping the run removes the files (the keys above all).
        for f in FILES {
            crate::servers::remove_on_signal(&made.file(f));
        }
        made.ca("ca")
            .issue("ca", "server", osmium_test_harness::Role::Node);
        Ok(Certs {
            ca: made.file("ca.pem"),
            cert: made.file("server.pem"),
            key: made.file("server.key"),
            made,
            key_type,
        })
    }

    /// What memcached and osmium are started with: `-Z` and these
    /// certificates, plus `ssl_session_cache` (the server's session-ID
    /// cache) when asked.
    pub(crate) fn server_args(&self, session_cache: bool) -> Vec<String> {
        let mut o = format!(
            "ssl_chain_cert={},ssl_key={}",
            self.cert.display(),
            self.key.display()
        );
        if session_cache {
            o.push_str(",ssl_session_cache");
        }
        vec!["-Z".into(), "-o".into(), o]
    }

    /// A rustls client (aws-lc-rs) trusting the CA, offering `version`;
    /// with `resume` it keeps sessions (TLS 1.3 tickets; TLS 1.2 as
    /// `resume` says) and offers them again; without, every handshake is
    /// a full one.
    pub(crate) fn client_config(
        &self,
        version: Version,
        resume: Option<Tls12Resume>,
    ) -> Result<Arc<ClientConfig>, String> {
        client_config(&self.ca, version, resume)
    }
}

/// A rustls client trusting the CA certificates of `ca` (PEM), offering
/// `version`, resuming sessions.
pub(crate) fn client_config_for_ca(
    ca: &Path,
    version: Version,
) -> Result<Arc<ClientConfig>, String> {
    client_config(ca, version, Some(Tls12Resume::Tickets))
}

fn client_config(
    ca: &Path,
    version: Version,
    resume: Option<Tls12Resume>,
) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    for cert in
        CertificateDer::pem_file_iter(ca).map_err(|e| format!("reading {}: {e}", ca.display()))?
    {
        let cert = cert.map_err(|e| format!("reading {}: {e}", ca.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("the CA certificate: {e}"))?;
    }
    let versions: &[&'static rustls::SupportedProtocolVersion] = match version {
        Version::V12 => &[&rustls::version::TLS12],
        Version::V13 => &[&rustls::version::TLS13],
        Version::Any => &[&rustls::version::TLS13, &rustls::version::TLS12],
    };
    let mut config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
        .with_protocol_versions(versions)
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.resumption = match resume {
        Some(how) => Resumption::in_memory_sessions(1024).tls12_resumption(match how {
            Tls12Resume::Tickets => Tls12Resumption::SessionIdOrTickets,
            Tls12Resume::Ids => Tls12Resumption::SessionIdOnly,
        }),
        None => Resumption::disabled(),
    };
    Ok(Arc::new(config))
}

impl Drop for Certs {
    fn drop(&mut self) {
        // The directory itself goes with `made`.
        for f in FILES {
            crate::servers::forget_on_signal(&self.made.file(f));
        }
    }
}

/// The name every benchmark client verifies the server certificate for.
pub(crate) fn server_name() -> rustls_pki_types::ServerName<'static> {
    rustls_pki_types::ServerName::try_from("localhost").expect("a valid DNS name")
}
