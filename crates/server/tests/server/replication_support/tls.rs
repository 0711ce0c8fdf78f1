//! TLS for the replication tests: certificates made at test time
//! (`osmium_test_harness::Certs`), the flags of a node started with `-Z`,
//! and rustls clients.
//!
//! - `ca`: the CA every node trusts (`ssl_ca_cert`);
//! - `node`: a node's certificate, signed by `ca`, for `IP:127.0.0.1` and
//!   `DNS:localhost`, for both server and client use (a node presents it
//!   as the client certificate of its links);
//! - `client`: a client certificate signed by `ca`, no SAN (an ordinary
//!   mTLS client's: `replication_peers` does not name it);
//! - `other-ca`, `other-node`, `other-client`: a second CA no node
//!   trusts, and a node and a client certificate it signed (as a
//!   `replication_ca` it names `other-client` a peer).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use osmium_test_harness::{KeyType, Role};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// A client's TLS connection.
pub(crate) type TlsConn = StreamOwned<ClientConnection, TcpStream>;

/// The certificates of this test process, made once (module comment),
/// under Cargo's target tmp directory (a static is never dropped).
pub(crate) struct Certs(osmium_test_harness::Certs);

impl Deref for Certs {
    type Target = osmium_test_harness::Certs;

    fn deref(&self) -> &osmium_test_harness::Certs {
        &self.0
    }
}

impl Certs {
    pub(crate) fn get() -> &'static Certs {
        static CERTS: OnceLock<Certs> = OnceLock::new();
        CERTS.get_or_init(|| {
            let under = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("replication");
            let mut c = osmium_test_harness::Certs::empty_under(&under, KeyType::EcdsaP256);
            c.ca("ca")
                .issue("ca", "node", Role::Node)
                .issue("ca", "client", Role::Client)
                .ca("other-ca")
                .issue("other-ca", "other-node", Role::Node)
                .issue("other-ca", "other-client", Role::Client);
            Certs(c)
        })
    }

    /// The usual node: `node`'s certificate, trusting `ca`, asking clients
    /// for a certificate (`ssl_verify_mode=1`: a peer shows one), its
    /// peers named by `node`'s SAN (`replication_peers=127.0.0.1`).
    pub(crate) fn node_args(&self) -> Vec<String> {
        self.server_args(
            "node",
            Some("ca"),
            &["ssl_verify_mode=1", "replication_peers=127.0.0.1"],
        )
    }

    /// A client trusting CA `ca`, presenting certificate `cert` if given.
    pub(crate) fn client_config(&self, ca: &str, cert: Option<&str>) -> Arc<ClientConfig> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.path(&format!("{ca}.pem"))).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let b = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        let config = match cert {
            Some(cert) => {
                let chain = CertificateDer::pem_file_iter(self.path(&format!("{cert}.pem")))
                    .unwrap()
                    .collect::<Result<Vec<_>, _>>()
                    .unwrap();
                let key = PrivateKeyDer::from_pem_file(self.path(&format!("{cert}.key"))).unwrap();
                b.with_client_auth_cert(chain, key).unwrap()
            }
            None => b.with_no_client_auth(),
        };
        Arc::new(config)
    }

    /// A client of the nodes: trusts `ca`, no certificate of its own.
    pub(crate) fn client(&self) -> Arc<ClientConfig> {
        self.client_config("ca", None)
    }
}

/// A TLS connection to `port` on 127.0.0.1 whose handshake finished on
/// this side (Err: the handshake's error).
pub(crate) fn handshake(port: u16, config: Arc<ClientConfig>) -> std::io::Result<TlsConn> {
    let sock = TcpStream::connect(("127.0.0.1", port))?;
    sock.set_nodelay(true)?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))?;
    let name = ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into());
    let conn = ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(tls)
}

/// Whether the server at `port` refuses a TLS client with `config`. Over
/// TLS 1.3 a server refuses a client's certificate after the client's
/// side of the handshake: the alert comes instead of `version`'s answer.
pub(crate) fn refused(port: u16, config: Arc<ClientConfig>) -> bool {
    let Ok(mut tls) = handshake(port, config) else {
        return true;
    };
    if tls.write_all(b"version\r\n").is_err() {
        return true;
    }
    let mut line = [0u8; 8];
    match tls.read_exact(&mut line) {
        Ok(()) => {
            assert_eq!(&line, b"VERSION ");
            false
        }
        Err(_) => true,
    }
}
