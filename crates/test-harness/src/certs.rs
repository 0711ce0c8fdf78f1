//! Test certificates, made in-process with rcgen: certificate authorities
//! and the certificates they sign (a server's for 127.0.0.1 and
//! `localhost`, a client's, a replication node's for both uses), ECDSA
//! P-256 or RSA-2048, written as `NAME.pem` and `NAME.key` (PKCS#8) to a
//! temporary directory of their own that is removed when the [`Certs`] is
//! dropped.
//!
//! [`Certs::new`] makes the usual set: a CA `ca`, a server certificate
//! `server` and a client certificate `client` it signed. [`Certs::empty`]
//! starts from nothing, for tests that need more CAs ([`Certs::ca`]) and
//! certificates ([`Certs::issue`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256,
};

/// The key type of every key a [`Certs`] makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// ECDSA on P-256 (the default: fast to make).
    EcdsaP256,
    /// RSA, 2048 bits.
    Rsa2048,
}

/// What a certificate is for: its extended key usage, and for a server
/// the names it is valid for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A server: `serverAuth`, SAN `IP:127.0.0.1` and `DNS:localhost`.
    Server,
    /// A client: `clientAuth`, no SAN.
    Client,
    /// A replication node, server and client of its links: both usages,
    /// the server's SAN.
    Node,
}

/// Certificates in a temporary directory removed on drop (module comment).
pub struct Certs {
    dir: PathBuf,
    key_type: KeyType,
    cas: HashMap<String, Issuer<'static, KeyPair>>,
}

impl Certs {
    /// A CA `ca`, a server certificate `server` and a client certificate
    /// `client` signed by it, all ECDSA P-256.
    pub fn new() -> Certs {
        Certs::with_key_type(KeyType::EcdsaP256)
    }

    /// [`Certs::new`] with keys of `key_type`.
    pub fn with_key_type(key_type: KeyType) -> Certs {
        let mut certs = Certs::empty(key_type);
        certs
            .ca("ca")
            .issue("ca", "server", Role::Server)
            .issue("ca", "client", Role::Client);
        certs
    }

    /// No certificate yet, in a new temporary directory.
    pub fn empty(key_type: KeyType) -> Certs {
        Certs::empty_under(&std::env::temp_dir(), key_type)
    }

    /// [`Certs::empty`] in a new directory under `parent`: for a set kept
    /// in a `static`, which is never dropped, a directory that is cleaned
    /// anyway (Cargo's `CARGO_TARGET_TMPDIR`).
    pub fn empty_under(parent: &Path, key_type: KeyType) -> Certs {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = parent.join(format!(
            "osmium-test-certs-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Certs {
            dir,
            key_type,
            cas: HashMap::new(),
        }
    }

    /// The key type of its keys.
    pub fn key_type(&self) -> KeyType {
        self.key_type
    }

    /// The directory the files are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn key(&self) -> KeyPair {
        let alg = match self.key_type {
            KeyType::EcdsaP256 => &PKCS_ECDSA_P256_SHA256,
            KeyType::Rsa2048 => &PKCS_RSA_SHA256,
        };
        KeyPair::generate_for(alg).expect("generate a key")
    }

    fn write(&self, name: &str, cert_pem: &str, key: &KeyPair) {
        std::fs::write(self.file(&format!("{name}.pem")), cert_pem).expect("write a certificate");
        std::fs::write(self.file(&format!("{name}.key")), key.serialize_pem())
            .expect("write a key");
    }

    /// A self-signed CA `name` (`name.pem`, `name.key`).
    pub fn ca(&mut self, name: &str) -> &mut Certs {
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("osmium-test-{name}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = self.key();
        let cert = params.self_signed(&key).expect("self-sign a CA");
        self.write(name, &cert.pem(), &key);
        self.cas.insert(name.to_string(), Issuer::new(params, key));
        self
    }

    /// A certificate `name` for `role`, signed by the CA `ca` (`name.pem`,
    /// `name.key`).
    pub fn issue(&mut self, ca: &str, name: &str, role: Role) -> &mut Certs {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if self.key_type == KeyType::Rsa2048 {
            params.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        }
        if role != Role::Client {
            params.subject_alt_names = vec![
                SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                SanType::DnsName("localhost".try_into().expect("a DNS name")),
            ];
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ServerAuth);
        }
        if role != Role::Server {
            params
                .extended_key_usages
                .push(ExtendedKeyUsagePurpose::ClientAuth);
        }
        let key = self.key();
        let issuer = self
            .cas
            .get(ca)
            .unwrap_or_else(|| panic!("no CA named {ca}"));
        let cert = params.signed_by(&key, issuer).expect("sign a certificate");
        self.write(name, &cert.pem(), &key);
        self
    }

    /// The path of one of its files, e.g. `ca.pem`.
    pub fn file(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// [`Certs::file`] as a string, for command lines.
    pub fn path(&self, file: &str) -> String {
        self.file(file)
            .to_str()
            .expect("a UTF-8 temporary path")
            .to_string()
    }

    /// The `-o` options of a server (osmium, memcached) presenting
    /// certificate `cert` and, with `ca`, verifying client certificates
    /// against CA `ca`: `ssl_chain_cert`, `ssl_key`, `ssl_ca_cert`.
    pub fn server_opts(&self, cert: &str, ca: Option<&str>) -> Vec<String> {
        let mut opts = vec![
            format!("ssl_chain_cert={}", self.path(&format!("{cert}.pem"))),
            format!("ssl_key={}", self.path(&format!("{cert}.key"))),
        ];
        if let Some(ca) = ca {
            opts.push(format!("ssl_ca_cert={}", self.path(&format!("{ca}.pem"))));
        }
        opts
    }

    /// `-Z -o OPTS` for a server: [`Certs::server_opts`] of `cert`
    /// trusting `ca`, then `extra` options (`ssl_verify_mode=1`, ...).
    pub fn server_args(&self, cert: &str, ca: Option<&str>, extra: &[&str]) -> Vec<String> {
        let mut opts = self.server_opts(cert, ca);
        opts.extend(extra.iter().map(|o| o.to_string()));
        vec!["-Z".into(), "-o".into(), opts.join(",")]
    }
}

impl Default for Certs {
    fn default() -> Certs {
        Certs::new()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    //! The certificates against rustls's own verifiers: a handshake in
    //! memory, server certificate checked for 127.0.0.1 and `localhost`,
    //! client certificate required.

    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use rustls::server::WebPkiClientVerifier;
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
    use std::sync::Arc;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::aws_lc_rs::default_provider())
    }

    fn chain(certs: &Certs, name: &str) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_file_iter(certs.file(&format!("{name}.pem")))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    fn key(certs: &Certs, name: &str) -> PrivateKeyDer<'static> {
        PrivateKeyDer::from_pem_file(certs.file(&format!("{name}.key"))).unwrap()
    }

    fn roots(certs: &Certs, ca: &str) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        for c in chain(certs, ca) {
            roots.add(c).unwrap();
        }
        Arc::new(roots)
    }

    /// A handshake in memory: `server` presenting `cert` and requiring a
    /// client certificate from `ca`; the client trusting `ca`, presenting
    /// `client`, asking for `name`.
    fn handshake(certs: &Certs, cert: &str, client: &str, name: &str) -> Result<(), rustls::Error> {
        let verifier = WebPkiClientVerifier::builder_with_provider(roots(certs, "ca"), provider())
            .build()
            .unwrap();
        let server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain(certs, cert), key(certs, cert))
            .unwrap();
        let client = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots(certs, "ca"))
            .with_client_auth_cert(chain(certs, client), key(certs, client))
            .unwrap();
        let name = ServerName::try_from(name.to_string()).unwrap();
        let mut c = ClientConnection::new(Arc::new(client), name).unwrap();
        let mut s = ServerConnection::new(Arc::new(server)).unwrap();
        while c.is_handshaking() || s.is_handshaking() {
            let mut buf = Vec::new();
            c.write_tls(&mut buf).unwrap();
            s.read_tls(&mut buf.as_slice()).unwrap();
            s.process_new_packets()?;
            let mut buf = Vec::new();
            s.write_tls(&mut buf).unwrap();
            c.read_tls(&mut buf.as_slice()).unwrap();
            c.process_new_packets()?;
        }
        Ok(())
    }

    #[test]
    fn the_usual_set_verifies_for_loopback_with_either_key_type() {
        for key_type in [KeyType::EcdsaP256, KeyType::Rsa2048] {
            let certs = Certs::with_key_type(key_type);
            for name in ["127.0.0.1", "localhost"] {
                handshake(&certs, "server", "client", name).unwrap();
            }
            let dir = certs.dir().to_path_buf();
            assert!(dir.join("ca.pem").is_file());
            drop(certs);
            assert!(!dir.exists(), "removed on drop");
        }
    }

    #[test]
    fn a_node_certificate_serves_and_a_foreign_ca_is_refused() {
        let mut certs = Certs::new();
        certs
            .issue("ca", "node", Role::Node)
            .ca("other-ca")
            .issue("other-ca", "other-server", Role::Server)
            .issue("other-ca", "other-client", Role::Client);
        // A node's certificate is a server's and a client's.
        handshake(&certs, "node", "node", "127.0.0.1").unwrap();
        // Certificates of a CA the other side does not trust fail.
        assert!(handshake(&certs, "other-server", "client", "127.0.0.1").is_err());
        assert!(handshake(&certs, "server", "other-client", "127.0.0.1").is_err());
        // A server certificate is for loopback only.
        assert!(handshake(&certs, "server", "client", "example.com").is_err());
    }
}
