//! The server's TLS configuration (`-Z`): rustls server configurations
//! built from the `-o ssl_*` settings (one per listener kind: `-Z`'s
//! verify mode, `btls:` no client certificate, `mtls:` one required) and
//! the client configuration of replication's links (with `ssl_ca_cert`),
//! swapped whole when `refresh_certs` or SIGHUP loads the certificates
//! again, and the counters `stats` shows; and which certificates name a
//! replication peer (`-o replication_peers`: a SAN, `-o replication_ca`:
//! the issuer; `names_client`, `names_target`).
//!
//! The files are read, and the cipher list and verifiers built, by
//! `osmium_net` (`load`, `ciphers`, `reload`). A reload is atomic: a new certificate, key or CA that fails to load
//! leaves the configurations serving unchanged (memcached's OpenSSL context
//! may be left half-updated). Connections keep the configuration they
//! started with. The session cache and the ticket keys outlive reloads,
//! so sessions resume across them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use osmium_net::load::{self, KeyFormat, MinVersion, VerifyClients};
use osmium_net::reload::Reloadable;
use rustls::client::Resumption;
use rustls::crypto::aws_lc_rs as provider;
use rustls::crypto::CryptoProvider;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{
    NoServerSessionStorage, ProducesTickets, ServerSessionMemoryCache, StoresServerSessions,
    WebPkiClientVerifier,
};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

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
    configs: Reloadable<Configs>,
    sessions: Arc<dyn StoresServerSessions>,
    tickets: Arc<dyn ProducesTickets>,
    provider: Arc<CryptoProvider>,
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
        let provider = Arc::new(osmium_net::ciphers::provider(settings.ciphers.as_deref())?);
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
            configs: Reloadable::new(configs),
            sessions,
            tickets,
            provider,
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
        self.configs.reload(|| {
            load(
                &self.settings,
                &self.provider,
                &self.sessions,
                &self.tickets,
            )
        })
    }

    /// Seconds since the certificates were last loaded.
    pub(crate) fn since_refresh(&self) -> u64 {
        self.configs.since_loaded()
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
        let c = self.configs.get();
        match mode {
            ListenerTls::NoPeer => c.no_peer.clone(),
            ListenerTls::Peer => c.peer.clone(),
            ListenerTls::Default | ListenerTls::Off => c.default.clone(),
        }
    }

    /// The configuration of a replication link to another server: None
    /// without `ssl_ca_cert` (links must verify the server they reach).
    pub(crate) fn client_config(&self) -> Option<Arc<ClientConfig>> {
        self.configs.get().client.clone()
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
        let ca = self.configs.get();
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
    let certs: Vec<CertificateDer<'static>> = load::certs(chain_path)
        .map_err(|e| format!("Error loading the certificate chain: {chain_path} : {e}"))?;
    let key_path = s.key.as_deref().unwrap_or(chain_path);
    let format = match s.keyformat {
        1 => Ok(KeyFormat::Pem),
        2 => Ok(KeyFormat::Der),
        _ => Err("unsupported key format (1: PEM, 2: DER)".to_string()),
    };
    let key = format
        .and_then(|f| load::key(key_path, f).map_err(|e| e.to_string()))
        .map_err(|e| format!("Error loading the key: {key_path} : {e}"))?;
    let roots = match &s.ca_cert {
        Some(path) => Some(
            load::roots(path)
                .map_err(|e| format!("Error loading the CA certificate: {path} : {e}"))?,
        ),
        None => None,
    };
    // `replication_ca`: its certificates verify on the listeners too (a
    // peer connects as a client first), and its own verifier says which
    // client certificates it issued.
    let (roots, replication_ca) = match &s.replication_ca {
        Some(path) => {
            let peers = load::roots(path)
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
            Some(Arc::new(load::roots(path).map_err(|e| {
                format!("Error loading the CA certificate: {path} : {e}")
            })?))
        }
        None => None,
    };
    let roots = roots.map(Arc::new);
    let versions = load::versions(if s.min_version >= 3 {
        MinVersion::Tls13
    } else {
        MinVersion::Tls12
    });
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
        let verify = match mode {
            VerifyMode::None => VerifyClients::None,
            m if m.requires_cert() => VerifyClients::Required,
            _ => VerifyClients::Optional,
        };
        load::client_verifier(verify, roots.clone(), provider)
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
