//! A pool's `tls:` mapping: TLS on the pool's listener (`tls.listen`:
//! its certificate and key, the CA client certificates are verified
//! against, whether clients must present one) and to its servers
//! (`tls.servers`: the CA the servers' certificates are verified against,
//! an optional client certificate, the name verified). Only the keys are
//! checked here; the files are read by osmium-proxy's `tls::context`.
//!
//! ```yaml
//! tls:
//!   listen:
//!     cert: server.pem
//!     key: server.key
//!     ca: ca.pem                  # optional: verify client certificates
//!     verify_clients: required    # none | optional | required
//!     min_version: "1.2"          # optional: "1.2" (default) or "1.3"
//!   servers:
//!     ca: ca.pem                  # required: servers are always verified
//!     cert: client.pem            # optional, with key: for mtls: listeners
//!     key: client.key
//!     server_name: cache.internal # optional: default each server's host
//!     min_version: "1.2"
//! ```

use serde_norway::{Mapping, Value};

pub use osmium_net::load::{MinVersion, VerifyClients};

/// `tls.listen`: TLS on the pool's listener.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenTls {
    /// The certificate chain (PEM), the server's own certificate first.
    pub cert: String,
    /// Its private key (PEM).
    pub key: String,
    /// The CA certificates (PEM) client certificates are verified against.
    pub ca: Option<String>,
    /// `verify_clients:`: whether client certificates are asked for and
    /// required.
    pub verify_clients: VerifyClients,
    /// `min_version:`.
    pub min_version: MinVersion,
}

/// `tls.servers`: TLS to every server of the pool, each verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServersTls {
    /// The CA certificates (PEM) the servers' certificates are verified
    /// against.
    pub ca: String,
    /// A client certificate chain and its key (PEM), for servers that
    /// require one (memcached's `mtls:` listeners).
    pub cert: Option<String>,
    /// The key of `cert`.
    pub key: Option<String>,
    /// The name every server's certificate must carry; `None`: each
    /// server's host (an IP address matches an IP subjectAltName).
    pub server_name: Option<String>,
    /// `min_version:`.
    pub min_version: MinVersion,
}

/// A pool's `tls:`: either side may be left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// `tls.listen`: TLS to the clients.
    pub listen: Option<ListenTls>,
    /// `tls.servers`: TLS to the servers.
    pub servers: Option<ServersTls>,
}

const LISTEN_KEYS: &str = "cert, key, ca, verify_clients, min_version";
const SERVERS_KEYS: &str = "ca, cert, key, server_name, min_version";

/// Reads the `tls:` mapping of pool `pool`.
pub fn parse(pool: &str, value: &Value) -> Result<TlsConfig, String> {
    let err = |what: &str, why: &str| format!("conf: pool '{pool}': directive \"{what}\" {why}");
    let Value::Mapping(map) = value else {
        return Err(err(
            "tls",
            "must be a mapping with \"listen:\" and/or \"servers:\"",
        ));
    };
    let mut tls = TlsConfig::default();
    for (side, body) in entries(map, "tls").map_err(|w| err("tls", &w))? {
        let what = format!("tls.{side}");
        let Value::Mapping(body) = body else {
            return Err(err(&what, "must be a mapping of TLS settings"));
        };
        match side.as_str() {
            "listen" => tls.listen = Some(parse_listen(body).map_err(|(k, w)| err(&k, &w))?),
            "servers" => tls.servers = Some(parse_servers(body).map_err(|(k, w)| err(&k, &w))?),
            _ => {
                return Err(err(
                    &what,
                    "is unknown (tls: has \"listen:\" and \"servers:\")",
                ))
            }
        }
    }
    if tls.listen.is_none() && tls.servers.is_none() {
        return Err(err("tls", "has neither \"listen:\" nor \"servers:\""));
    }
    Ok(tls)
}

/// A mapping's entries with scalar keys, refusing duplicates.
fn entries<'a>(map: &'a Mapping, what: &str) -> Result<Vec<(String, &'a Value)>, String> {
    let mut out: Vec<(String, &Value)> = Vec::new();
    for (k, v) in map {
        let Some(k) = scalar(k) else {
            return Err(format!("has a non-scalar key under {what}"));
        };
        if out.iter().any(|(seen, _)| *seen == k) {
            return Err(format!("has \"{k}\" twice"));
        }
        out.push((k, v));
    }
    Ok(out)
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A key's error: the key's full name, and why.
type KeyError = (String, String);

/// The settings of one side: each key's text, checked against `known`.
fn settings(body: &Mapping, side: &str, known: &str) -> Result<Vec<(String, String)>, KeyError> {
    let what = format!("tls.{side}");
    let mut out = Vec::new();
    for (k, v) in entries(body, &what).map_err(|w| (what.clone(), w))? {
        let full = format!("tls.{side}.{k}");
        if !known.split(", ").any(|x| x == k) {
            return Err((full, format!("is unknown (known: {known})")));
        }
        let Some(text) = scalar(v).filter(|t| !t.is_empty()) else {
            return Err((full, "must be a non-empty scalar".into()));
        };
        out.push((k, text));
    }
    Ok(out)
}

fn min_version(side: &str, v: &str) -> Result<MinVersion, KeyError> {
    match v {
        "1.2" | "TLSv1.2" => Ok(MinVersion::Tls12),
        "1.3" | "TLSv1.3" => Ok(MinVersion::Tls13),
        _ => Err((
            format!("tls.{side}.min_version"),
            "is not \"1.2\" or \"1.3\"".into(),
        )),
    }
}

fn parse_listen(body: &Mapping) -> Result<ListenTls, KeyError> {
    let (mut cert, mut key, mut ca, mut verify, mut min) = (None, None, None, None, None);
    for (k, v) in settings(body, "listen", LISTEN_KEYS)? {
        match k.as_str() {
            "cert" => cert = Some(v),
            "key" => key = Some(v),
            "ca" => ca = Some(v),
            "verify_clients" => {
                verify = Some(match v.as_str() {
                    "none" => VerifyClients::None,
                    "optional" => VerifyClients::Optional,
                    "required" => VerifyClients::Required,
                    _ => {
                        return Err((
                            "tls.listen.verify_clients".into(),
                            "is not \"none\", \"optional\" or \"required\"".into(),
                        ))
                    }
                })
            }
            _ => min = Some(min_version("listen", &v)?),
        }
    }
    let missing = |k: &str| (format!("tls.listen.{k}"), "is missing".to_string());
    let cert = cert.ok_or_else(|| missing("cert"))?;
    let key = key.ok_or_else(|| missing("key"))?;
    // With a CA, clients are verified unless told otherwise.
    let verify_clients = verify.unwrap_or(if ca.is_some() {
        VerifyClients::Required
    } else {
        VerifyClients::None
    });
    if verify_clients != VerifyClients::None && ca.is_none() {
        return Err((
            "tls.listen.verify_clients".into(),
            "needs \"ca:\" (the CA client certificates are verified against)".into(),
        ));
    }
    Ok(ListenTls {
        cert,
        key,
        ca,
        verify_clients,
        min_version: min.unwrap_or(MinVersion::Tls12),
    })
}

fn parse_servers(body: &Mapping) -> Result<ServersTls, KeyError> {
    let (mut ca, mut cert, mut key, mut name, mut min) = (None, None, None, None, None);
    for (k, v) in settings(body, "servers", SERVERS_KEYS)? {
        match k.as_str() {
            "ca" => ca = Some(v),
            "cert" => cert = Some(v),
            "key" => key = Some(v),
            "server_name" => name = Some(v),
            _ => min = Some(min_version("servers", &v)?),
        }
    }
    let ca = ca.ok_or_else(|| {
        (
            "tls.servers.ca".to_string(),
            "is missing (the CA the servers' certificates are verified against)".to_string(),
        )
    })?;
    if cert.is_some() != key.is_some() {
        return Err((
            "tls.servers.cert".into(),
            "and \"tls.servers.key\" go together (a client certificate and its key)".into(),
        ));
    }
    Ok(ServersTls {
        ca,
        cert,
        key,
        server_name: name,
        min_version: min.unwrap_or(MinVersion::Tls12),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(yaml: &str) -> Result<TlsConfig, String> {
        parse("p", &serde_norway::from_str(yaml).unwrap())
    }

    #[test]
    fn reads_both_sides() {
        let t = tls("listen: {cert: s.pem, key: s.key, ca: ca.pem}\n\
                     servers: {ca: ca.pem, cert: c.pem, key: c.key, min_version: '1.3'}\n")
        .unwrap();
        let l = t.listen.unwrap();
        assert_eq!(l.verify_clients, VerifyClients::Required, "a CA verifies");
        let s = t.servers.unwrap();
        assert_eq!(
            (s.cert.as_deref(), s.min_version),
            (Some("c.pem"), MinVersion::Tls13)
        );
        let t = tls("listen: {cert: s.pem, key: s.key}").unwrap();
        assert_eq!(t.listen.unwrap().verify_clients, VerifyClients::None);
        assert!(t.servers.is_none());
    }

    #[test]
    fn refuses_unknown_and_incomplete_settings() {
        let e = tls("listen: {cert: s.pem, key: s.key, cafile: x}").unwrap_err();
        assert!(e.contains("\"tls.listen.cafile\" is unknown"), "{e}");
        let e = tls("client: {ca: x}").unwrap_err();
        assert!(e.contains("\"tls.client\" is unknown"), "{e}");
        let e = tls("listen: {cert: s.pem}").unwrap_err();
        assert!(e.contains("\"tls.listen.key\" is missing"), "{e}");
        let e = tls("listen: {cert: s.pem, key: k, verify_clients: required}").unwrap_err();
        assert!(e.contains("needs \"ca:\""), "{e}");
        let e = tls("listen: {cert: s.pem, key: k, ca: c, verify_clients: yes}").unwrap_err();
        assert!(e.contains("verify_clients"), "{e}");
        let e = tls("servers: {cert: c.pem, key: c.key}").unwrap_err();
        assert!(e.contains("\"tls.servers.ca\" is missing"), "{e}");
        let e = tls("servers: {ca: c, cert: c.pem}").unwrap_err();
        assert!(e.contains("go together"), "{e}");
        let e = tls("servers: {ca: c, min_version: '1.1'}").unwrap_err();
        assert!(e.contains("min_version"), "{e}");
        assert!(tls("{}").unwrap_err().contains("neither"));
        assert!(tls("true").unwrap_err().contains("must be a mapping"));
        assert!(tls("listen: x").unwrap_err().contains("must be a mapping"));
    }
}
