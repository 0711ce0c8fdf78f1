//! The server's TLS configuration (`-Z`): rustls server configurations
//! built from the `-o ssl_*` settings (one per listener kind: `-Z`'s
//! verify mode, `btls:` no client certificate, `mtls:` one required) and
//! the client configuration of replication's links (with `ssl_ca_cert`),
//! swapped whole when `refresh_certs` or SIGHUP loads the certificates
//! again, and the counters `stats` shows; and which certificates name a
//! replication peer (`-o replication_peers`: a SAN, `-o replication_ca`:
//! the issuer; `names_client`, `names_target`).
//!
//! A reload is atomic: a new certificate, key or CA that fails to load
//! leaves the configurations serving unchanged (memcached's OpenSSL context
//! may be left half-updated). Connections keep the configuration they
//! started with. The session cache and the ticket keys outlive reloads,
//! so sessions resume across them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use rustls::client::Resumption;
use rustls::crypto::aws_lc_rs as provider;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{
    NoServerSessionStorage, ProducesTickets, ServerSessionMemoryCache, StoresServerSessions,
    WebPkiClientVerifier,
};
use rustls::{
    CipherSuite, ClientConfig, DigitallySignedStruct, DistinguishedName, Error, RootCertStore,
    ServerConfig, SignatureScheme, SupportedCipherSuite,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::settings::tls::{ListenerTls, TlsSettings, VerifyMode};

/// OpenSSL's default server session cache size
/// (`SSL_SESSION_CACHE_MAX_SIZE_DEFAULT`).
const SESSION_CACHE_SIZE: usize = 20 * 1024;

/// The configurations a new connection may start with.
struct Configs {
    default: Arc<ServerConfig>,
    no_peer: Arc<ServerConfig>,
    peer: Arc<ServerConfig>,
    /// Replication's outgoing links (`replication::stream`): this server's
    /// certificate as the client's, the target's verified against
    /// `ssl_ca_cert`; none without one.
    client: Option<Arc<ClientConfig>>,
    /// `replication_ca`'s verifier: a client certificate it verifies
    /// names a replication peer.
    replication_ca: Option<Arc<dyn ClientCertVerifier>>,
}

/// TLS for the server's listeners, shared by the acceptor and the workers.
pub(crate) struct TlsContext {
    settings: TlsSettings,
    configs: RwLock<Arc<Configs>>,
    sessions: Arc<dyn StoresServerSessions>,
    tickets: Arc<dyn ProducesTickets>,
    provider: Arc<CryptoProvider>,
    last_refresh: RwLock<Instant>,
    /// `stats`: `ssl_handshake_errors`, `ssl_proto_errors`,
    /// `ssl_new_sessions`.
    pub handshake_errors: AtomicU64,
    pub proto_errors: AtomicU64,
    pub new_sessions: AtomicU64,
    /// Handshakes that completed (`/metrics`).
    pub handshakes: AtomicU64,
    /// `-v`: failed handshakes and records are printed.
    pub verbose: bool,
    /// `replication_peers`, as names a certificate is checked for.
    peer_names: Vec<ServerName<'static>>,
}

impl TlsContext {
    /// Builds the configurations (memcached's `ssl_init`): Err carries
    /// memcached's message for what failed.
    pub(crate) fn new(settings: &TlsSettings, verbose: bool) -> Result<TlsContext, String> {
        if settings.kernel_tls {
            return Err(kernel_tls_refusal());
        }
        let provider = Arc::new(cipher_provider(settings)?);
        let sessions: Arc<dyn StoresServerSessions> = if settings.session_cache {
            ServerSessionMemoryCache::new(SESSION_CACHE_SIZE)
        } else {
            Arc::new(NoServerSessionStorage {})
        };
        let tickets = provider::Ticketer::new().map_err(|e| format!("TLS tickets: {e}"))?;
        let configs = load(settings, &provider, &sessions, &tickets)?;
        let peer_names = settings
            .replication_peers
            .iter()
            .map(|n| {
                ServerName::try_from(n.clone())
                    .map_err(|_| format!("replication_peers: {n:?} is not a name or an address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TlsContext {
            peer_names,
            settings: settings.clone(),
            configs: RwLock::new(Arc::new(configs)),
            sessions,
            tickets,
            provider,
            last_refresh: RwLock::new(Instant::now()),
            handshake_errors: AtomicU64::new(0),
            proto_errors: AtomicU64::new(0),
            new_sessions: AtomicU64::new(0),
            handshakes: AtomicU64::new(0),
            verbose,
        })
    }

    /// Loads the certificates again (`refresh_certs`, SIGHUP). Err: the
    /// line memcached answers (`Error loading ...`, without `\r\n`); the
    /// configurations in use are then unchanged.
    pub(crate) fn refresh(&self) -> Result<(), String> {
        let configs = load(
            &self.settings,
            &self.provider,
            &self.sessions,
            &self.tickets,
        )?;
        *self.configs.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(configs);
        *self.last_refresh.write().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Ok(())
    }

    /// Seconds since the certificates were last loaded.
    pub(crate) fn since_refresh(&self) -> u64 {
        self.last_refresh
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
            .as_secs()
    }

    /// Whether `stats` shows `ssl_new_sessions` (memcached: only with the
    /// session cache).
    pub(crate) fn session_cache(&self) -> bool {
        self.settings.session_cache
    }

    /// Most plaintext handed to TLS in one write (`ssl_wbuf_size`).
    pub(crate) fn wbuf_size(&self) -> usize {
        (self.settings.wbuf_size as usize).max(1024)
    }

    /// The configuration a new connection on a `mode` listener starts
    /// with.
    pub(crate) fn config(&self, mode: ListenerTls) -> Arc<ServerConfig> {
        let c = self.configs.read().unwrap_or_else(|e| e.into_inner());
        match mode {
            ListenerTls::NoPeer => c.no_peer.clone(),
            ListenerTls::Peer => c.peer.clone(),
            ListenerTls::Default | ListenerTls::Off => c.default.clone(),
        }
    }

    /// The configuration of a replication link to another server: None
    /// without `ssl_ca_cert` (links must verify the server they reach).
    pub(crate) fn client_config(&self) -> Option<Arc<ClientConfig>> {
        let c = self.configs.read().unwrap_or_else(|e| e.into_inner());
        c.client.clone()
    }

    /// Whether `replication_peers` or `replication_ca` name the
    /// replication peers.
    pub(crate) fn names_peers(&self) -> bool {
        !self.peer_names.is_empty() || self.settings.replication_ca.is_some()
    }

    /// Whether the client certificate of `conn` (verified by its
    /// handshake) names a replication peer: a SAN among
    /// `replication_peers`, or issued by `replication_ca`.
    pub(crate) fn names_client(&self, conn: &rustls::Connection) -> bool {
        let Some((end, intermediates)) = conn.peer_certificates().and_then(|c| c.split_first())
        else {
            return false;
        };
        if self.has_peer_name(end) {
            return true;
        }
        let ca = self.configs.read().unwrap_or_else(|e| e.into_inner());
        ca.replication_ca.as_ref().is_some_and(|v| {
            v.verify_client_cert(end, intermediates, UnixTime::now())
                .is_ok()
        })
    }

    /// Whether a target's server certificate (verified by the handshake
    /// against `ssl_ca_cert` and the host name) is one `replication_peers`
    /// names; any is, without it.
    pub(crate) fn names_target(&self, conn: &rustls::Connection) -> bool {
        if self.peer_names.is_empty() {
            return true;
        }
        conn.peer_certificates()
            .and_then(|c| c.first())
            .is_some_and(|end| self.has_peer_name(end))
    }

    fn has_peer_name(&self, end: &CertificateDer<'_>) -> bool {
        let Ok(cert) = webpki::EndEntityCert::try_from(end) else {
            return false;
        };
        self.peer_names
            .iter()
            .any(|n| cert.verify_is_valid_for_subject_name(n).is_ok())
    }

    /// Whether connections of `mode` verify client certificates against
    /// `ssl_ca_cert` (a connection that presented one is then a proven
    /// client).
    pub(crate) fn verifies_clients(&self, mode: ListenerTls) -> bool {
        (self.settings.ca_cert.is_some() || self.settings.replication_ca.is_some())
            && match mode {
                ListenerTls::Peer => true,
                ListenerTls::Default => self.settings.verify_mode != VerifyMode::None,
                ListenerTls::NoPeer | ListenerTls::Off => false,
            }
    }
}

/// Loads the certificate chain, key and CA and builds the configurations.
fn load(
    s: &TlsSettings,
    provider: &Arc<CryptoProvider>,
    sessions: &Arc<dyn StoresServerSessions>,
    tickets: &Arc<dyn ProducesTickets>,
) -> Result<Configs, String> {
    let chain_path = s.chain_cert.as_deref().unwrap_or("(null)");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(chain_path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("Error loading the certificate chain: {chain_path} : {e}"))
        .and_then(|c| {
            if c.is_empty() {
                Err(format!(
                    "Error loading the certificate chain: {chain_path} : no certificate found"
                ))
            } else {
                Ok(c)
            }
        })?;
    let key_path = s.key.as_deref().unwrap_or(chain_path);
    let key = load_key(key_path, s.keyformat)
        .map_err(|e| format!("Error loading the key: {key_path} : {e}"))?;
    let roots = match &s.ca_cert {
        Some(path) => Some(
            load_roots(path)
                .map_err(|e| format!("Error loading the CA certificate: {path} : {e}"))?,
        ),
        None => None,
    };
    // `replication_ca`: its certificates verify on the listeners too (a
    // peer connects as a client first), and its own verifier says which
    // client certificates it issued.
    let (roots, replication_ca) = match &s.replication_ca {
        Some(path) => {
            let peers = load_roots(path)
                .map_err(|e| format!("Error loading replication_ca: {path} : {e}"))?;
            let mut all = roots.clone().unwrap_or_else(RootCertStore::empty);
            all.roots.extend(peers.roots.iter().cloned());
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(peers), provider.clone())
                    .build()
                    .map_err(|e| format!("Error loading replication_ca: {path} : {e}"))?;
            (Some(all), Some(verifier))
        }
        None => (roots, None),
    };
    let client_roots = match &s.ca_cert {
        Some(path) => {
            Some(Arc::new(load_roots(path).map_err(|e| {
                format!("Error loading the CA certificate: {path} : {e}")
            })?))
        }
        None => None,
    };
    let roots = roots.map(Arc::new);
    let versions: &[&'static rustls::SupportedProtocolVersion] = if s.min_version >= 3 {
        &[&rustls::version::TLS13]
    } else {
        &[&rustls::version::TLS12, &rustls::version::TLS13]
    };
    let build = |verifier: Arc<dyn ClientCertVerifier>| -> Result<Arc<ServerConfig>, String> {
        let mut config = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| format!("Error setting the TLS versions: {e}"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs.clone(), key.clone_key())
            .map_err(|e| format!("Error validating the certificate: {e}"))?;
        config.session_storage = sessions.clone();
        config.ticketer = tickets.clone();
        Ok(Arc::new(config))
    };
    let verifier = |mode: VerifyMode| -> Result<Arc<dyn ClientCertVerifier>, String> {
        if mode == VerifyMode::None {
            return Ok(WebPkiClientVerifier::no_client_auth());
        }
        let Some(roots) = &roots else {
            // OpenSSL with no trusted CA: every certificate fails.
            return Ok(Arc::new(NoTrustedRoots {
                mandatory: mode.requires_cert(),
                provider: provider.clone(),
            }));
        };
        let b = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
        let b = if mode.requires_cert() {
            b
        } else {
            b.allow_unauthenticated()
        };
        b.build()
            .map_err(|e| format!("Error loading the CA certificate: {e}"))
    };
    // Replication links: every handshake a full one (a resumed session
    // would skip verifying the target against a reloaded CA).
    let client = match &client_roots {
        Some(roots) => {
            let mut config = ClientConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(versions)
                .map_err(|e| format!("Error setting the TLS versions: {e}"))?
                .with_root_certificates(roots.clone())
                .with_client_auth_cert(certs.clone(), key.clone_key())
                .map_err(|e| format!("Error validating the certificate: {e}"))?;
            config.resumption = Resumption::disabled();
            Some(Arc::new(config))
        }
        None => None,
    };
    Ok(Configs {
        default: build(verifier(s.verify_mode)?)?,
        no_peer: build(verifier(VerifyMode::None)?)?,
        peer: build(verifier(VerifyMode::Require)?)?,
        client,
        replication_ca,
    })
}

/// What `ssl_kernel_tls` gets: memcached's refusal where the kernel has no
/// TLS offload; where it has, osmium does not offload yet and says so.
fn kernel_tls_refusal() -> String {
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
    if ulps.split_whitespace().any(|u| u == "tls") {
        "Kernel TLS offload is not supported by osmium yet (the kernel has it)".into()
    } else {
        "Kernel TLS offload is not available".into()
    }
}

fn load_key(path: &str, format: i64) -> Result<PrivateKeyDer<'static>, String> {
    match format {
        1 => PrivateKeyDer::from_pem_file(path).map_err(|e| e.to_string()),
        2 => {
            let der = std::fs::read(path).map_err(|e| e.to_string())?;
            PrivateKeyDer::try_from(der).map_err(|e| e.to_string())
        }
        _ => Err("unsupported key format (1: PEM, 2: DER)".into()),
    }
}

fn load_roots(path: &str) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(path).map_err(|e| e.to_string())? {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    if roots.is_empty() {
        return Err("no certificate found".into());
    }
    Ok(roots)
}

/// The provider with `ssl_ciphers` applied: an OpenSSL cipher list picks
/// TLS 1.2 suites by their OpenSSL names (`!`/`-` removes; `ALL`,
/// `DEFAULT`, `HIGH` and the like take every suite); TLS 1.3 suites stay,
/// as OpenSSL's cipher list does not touch them.
fn cipher_provider(settings: &TlsSettings) -> Result<CryptoProvider, String> {
    let mut p = provider::default_provider();
    let Some(list) = &settings.ciphers else {
        return Ok(p);
    };
    let mut chosen: Vec<SupportedCipherSuite> = Vec::new();
    let tls12: Vec<SupportedCipherSuite> = p
        .cipher_suites
        .iter()
        .copied()
        .filter(|s| s.version() == &rustls::version::TLS12)
        .collect();
    for token in list.split([':', ',', ' ']).filter(|t| !t.is_empty()) {
        let (remove, name) = match token.strip_prefix(['!', '-']) {
            Some(n) => (true, n),
            None => (false, token.trim_start_matches('+')),
        };
        let matching: Vec<SupportedCipherSuite> = tls12
            .iter()
            .copied()
            .filter(|s| openssl_matches(name, s.suite()))
            .collect();
        if remove {
            chosen.retain(|s| !matching.contains(s));
        } else {
            for s in matching {
                if !chosen.contains(&s) {
                    chosen.push(s);
                }
            }
        }
    }
    if chosen.is_empty() {
        return Err(format!("Error setting the provided cipher(s): {list}"));
    }
    p.cipher_suites
        .retain(|s| s.version() != &rustls::version::TLS12 || chosen.contains(s));
    Ok(p)
}

/// Whether an OpenSSL cipher-list word names this TLS 1.2 suite.
fn openssl_matches(word: &str, suite: CipherSuite) -> bool {
    let name = match suite {
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => {
            "ECDHE-ECDSA-CHACHA20-POLY1305"
        }
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => return false,
    };
    match word {
        "ALL" | "DEFAULT" | "HIGH" | "ECDHE" | "EECDH" | "kECDHE" | "AEAD" | "TLSv1.2" => true,
        "aRSA" | "RSA" | "ECDHE-RSA" => name.contains("-RSA-"),
        "aECDSA" | "ECDSA" => name.contains("ECDSA"),
        "AESGCM" => name.contains("GCM"),
        "AES128" => name.contains("AES128"),
        "AES256" | "AES" => name.contains("AES"),
        "CHACHA20" => name.contains("CHACHA20"),
        w => w == name,
    }
}

/// Client certificates asked for with no `ssl_ca_cert` to verify them
/// against: as OpenSSL with no trusted CA, every certificate fails, and a
/// connection without one is refused only when one is required.
#[derive(Debug)]
struct NoTrustedRoots {
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

/// Counts a failed handshake or a failed record (memcached's two error
/// counters).
pub(crate) fn count_error(ctx: &TlsContext, handshaking: bool) {
    let c = if handshaking {
        &ctx.handshake_errors
    } else {
        &ctx.proto_errors
    };
    c.fetch_add(1, Ordering::Relaxed);
}
