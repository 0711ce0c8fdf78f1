//! A pool's rustls configurations, built once at start (and by `-t`) from
//! its `tls:` settings: the server configuration of its listener and the
//! client configuration (with each server's name to verify) of its server
//! connections. Every file is read here; a file that cannot be read, holds
//! no certificate or key, or a key that does not match its certificate,
//! is an error naming the pool, the setting and the file (the files are
//! read by `osmium_net::load`).

use std::sync::Arc;

use osmium_net::load::{self, KeyFormat, LoadError};
use rustls::crypto::aws_lc_rs;
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use super::config::{ListenTls, ServersTls, VerifyClients};
use crate::config::{Addr, Config, PoolConfig};

/// TLS to a pool's servers.
#[derive(Debug)]
pub struct ServersContext {
    /// The client configuration (CA roots, client certificate, versions).
    pub config: Arc<ClientConfig>,
    /// The name each server's certificate is verified against, in
    /// `servers:` order.
    pub names: Vec<ServerName<'static>>,
}

/// A pool's TLS, as built from its `tls:`.
#[derive(Debug, Default)]
pub struct PoolTls {
    /// `tls.listen`'s server configuration.
    pub listen: Option<Arc<ServerConfig>>,
    /// `tls.servers`' client configuration and names.
    pub servers: Option<ServersContext>,
}

/// Builds every pool's TLS (what `-t` checks beyond the YAML).
pub fn check(config: &Config) -> Result<(), String> {
    for pool in &config.pools {
        build(pool)?;
    }
    Ok(())
}

/// Builds a pool's TLS: its files read, its configurations made.
pub fn build(pool: &PoolConfig) -> Result<PoolTls, String> {
    let name = &pool.name;
    let listen = match &pool.tls.listen {
        Some(l) => Some(listen_config(l).map_err(|e| format!("pool '{name}': {e}"))?),
        None => None,
    };
    let servers = match &pool.tls.servers {
        Some(s) => Some(servers_context(pool, s).map_err(|e| format!("pool '{name}': {e}"))?),
        None => None,
    };
    Ok(PoolTls { listen, servers })
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(aws_lc_rs::default_provider())
}

fn listen_config(l: &ListenTls) -> Result<Arc<ServerConfig>, String> {
    let certs = load_certs("tls.listen.cert", &l.cert)?;
    let key = load_key("tls.listen.key", &l.key)?;
    let provider = provider();
    let verifier = match (&l.ca, l.verify_clients) {
        (Some(ca), v) if v != VerifyClients::None => {
            let roots = Arc::new(load_roots("tls.listen.ca", ca)?);
            load::client_verifier(v, Some(roots), &provider)
                .map_err(|e| format!("tls.listen.ca: '{ca}': {e}"))?
        }
        _ => load::client_verifier(VerifyClients::None, None, &provider)?,
    };
    let config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(load::versions(l.min_version))
        .map_err(|e| format!("tls.listen.min_version: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "tls.listen.cert '{}' and tls.listen.key '{}': {e}",
                l.cert, l.key
            )
        })?;
    Ok(Arc::new(config))
}

fn servers_context(pool: &PoolConfig, s: &ServersTls) -> Result<ServersContext, String> {
    let roots = load_roots("tls.servers.ca", &s.ca)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(load::versions(s.min_version))
        .map_err(|e| format!("tls.servers.min_version: {e}"))?
        .with_root_certificates(roots);
    let config = match (&s.cert, &s.key) {
        (Some(cert), Some(key)) => {
            let certs = load_certs("tls.servers.cert", cert)?;
            let k = load_key("tls.servers.key", key)?;
            builder.with_client_auth_cert(certs, k).map_err(|e| {
                format!("tls.servers.cert '{cert}' and tls.servers.key '{key}': {e}")
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    let mut names = Vec::with_capacity(pool.servers.len());
    for server in &pool.servers {
        let name = match (&s.server_name, &server.addr) {
            (Some(n), _) => n.clone(),
            (None, Addr::Tcp { host, .. }) => host.clone(),
            (None, Addr::Unix(p)) => {
                return Err(format!(
                    "server '{}' is a unix socket: TLS to it needs tls.servers.server_name \
                     (the name its certificate carries)",
                    p.display()
                ))
            }
        };
        let name = ServerName::try_from(name.clone()).map_err(|_| {
            format!(
                "'{name}' (server '{}') is not a name a certificate can carry: \
                 set tls.servers.server_name",
                server.pname
            )
        })?;
        names.push(name);
    }
    Ok(ServersContext {
        config: Arc::new(config),
        names,
    })
}

fn load_certs(what: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    load::certs(path).map_err(|e| load_error(what, path, e))
}

/// A file's error, worded as the pool's settings are.
fn load_error(what: &str, path: &str, e: LoadError) -> String {
    match e {
        LoadError::NoCertificate => format!("{what}: no certificate found in '{path}'"),
        LoadError::NotCa(e) => format!("{what}: '{path}' holds a certificate that is no CA: {e}"),
        LoadError::Unreadable(e) => format!("{what}: cannot load certificates from '{path}': {e}"),
    }
}

fn load_key(what: &str, path: &str) -> Result<PrivateKeyDer<'static>, String> {
    load::key(path, KeyFormat::Pem)
        .map_err(|e| format!("{what}: cannot load a private key from '{path}': {e}"))
}

fn load_roots(what: &str, path: &str) -> Result<RootCertStore, String> {
    load::roots(path).map_err(|e| load_error(what, path, e))
}
