//! The TLS settings: `-Z` and memcached's `-o ssl_*` options, parsed with
//! memcached 1.6.45's syntax, defaults and error messages, and the
//! per-listener `notls:` / `btls:` / `mtls:` prefixes of `-l`, and what
//! `-Z` asks of replication (`replication_rule`). What they build (the
//! rustls configurations) lives in `tls_context`.

/// `-o ssl_verify_mode`: how client certificates are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VerifyMode {
    /// 0: not asked for.
    None,
    /// 1: asked for; verified when sent, not required.
    Request,
    /// 2: required.
    Require,
    /// 3: required (memcached's "once": no renegotiation either way).
    Once,
}

impl VerifyMode {
    /// The value `stats settings` shows: OpenSSL's flag bits, as memcached
    /// prints them (`SSL_VERIFY_PEER` 1, `FAIL_IF_NO_PEER_CERT` 2,
    /// `CLIENT_ONCE` 4).
    pub(crate) fn openssl_flags(self) -> u32 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 3,
            VerifyMode::Once => 7,
        }
    }

    /// Whether a connection without a client certificate is refused.
    pub(crate) fn requires_cert(self) -> bool {
        matches!(self, VerifyMode::Require | VerifyMode::Once)
    }
}

/// How one listener speaks TLS (memcached's `MC_SSL_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenerTls {
    /// No TLS: without `-Z`, or a `notls:` listener.
    Off,
    /// `-Z`: TLS with `ssl_verify_mode`'s client certificate rule.
    Default,
    /// `btls:`: TLS, client certificates never asked for.
    NoPeer,
    /// `mtls:`: TLS, a client certificate verified against
    /// `ssl_ca_cert` required.
    Peer,
}

/// The `-o ssl_*` settings (memcached's names and units).
#[derive(Debug, Clone)]
pub(crate) struct TlsSettings {
    /// `-Z`.
    pub enabled: bool,
    pub chain_cert: Option<String>,
    pub key: Option<String>,
    /// 1: PEM, 2: DER (OpenSSL's `SSL_FILETYPE_*`).
    pub keyformat: i64,
    pub verify_mode: VerifyMode,
    /// An OpenSSL cipher list for TLS 1.2 (TLS 1.3's suites are not
    /// affected, as with OpenSSL's `SSL_CTX_set_cipher_list`).
    pub ciphers: Option<String>,
    pub ca_cert: Option<String>,
    /// Bytes (the option is in KB): most plaintext handed to TLS per write.
    pub wbuf_size: u32,
    /// Server-side session cache (TLS 1.2 session IDs); tickets are
    /// issued either way, as OpenSSL does by default.
    pub session_cache: bool,
    pub kernel_tls: bool,
    /// 0: TLS 1.0, 1: TLS 1.1, 2: TLS 1.2, 3: TLS 1.3.
    pub min_version: u8,
    /// `-o replication_peers=<name>[:<name>...]` (osmium's own): the
    /// certificate names (DNS names, IP addresses, matched against the
    /// SAN) of the replication peers.
    pub replication_peers: Vec<String>,
    /// `-o replication_ca=FILE` (osmium's own): a certificate it issued
    /// makes a replication peer.
    pub replication_ca: Option<String>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            enabled: false,
            chain_cert: None,
            key: None,
            keyformat: 1,
            verify_mode: VerifyMode::None,
            ciphers: None,
            ca_cert: None,
            wbuf_size: 16 * 1024,
            session_cache: false,
            kernel_tls: false,
            min_version: 2,
            replication_peers: Vec::new(),
            replication_ca: None,
        }
    }
}

/// What `stats settings` shows for `ssl_min_version`.
pub(crate) fn version_text(v: u8) -> &'static str {
    match v {
        0 => "tlsv1.0",
        1 => "tlsv1.1",
        2 => "tlsv1.2",
        3 => "tlsv1.3",
        _ => "unknown",
    }
}

/// A memcached `-o` suboption failed. `exit_code` is what memcached exits
/// with for it (`EX_USAGE` 64 for most; 1 for the verify mode and minimum
/// version, which memcached rejects with `return 1`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct OptionError {
    pub message: String,
    pub exit_code: i32,
}

fn usage(message: &str) -> OptionError {
    OptionError {
        message: message.into(),
        exit_code: 64,
    }
}

impl TlsSettings {
    /// Takes `-o name[=value]` if it is an `ssl_*` option: Ok(true) taken,
    /// Ok(false) not a TLS option.
    pub(crate) fn option(&mut self, name: &str, value: Option<&str>) -> Result<bool, OptionError> {
        let missing = || usage(&format!("Missing {name} argument"));
        let unparsed = || usage(&format!("could not parse argument to {name}"));
        match name {
            "ssl_chain_cert" => self.chain_cert = Some(value.ok_or_else(missing)?.into()),
            "ssl_key" => self.key = Some(value.ok_or_else(missing)?.into()),
            "ssl_verify_mode" => {
                let v: i64 = strtol(value.ok_or_else(missing)?).ok_or_else(unparsed)?;
                self.verify_mode = match v {
                    0 => VerifyMode::None,
                    1 => VerifyMode::Request,
                    2 => VerifyMode::Require,
                    3 => VerifyMode::Once,
                    _ => {
                        return Err(OptionError {
                            message: "Invalid ssl_verify_mode. Use help to see valid options."
                                .into(),
                            exit_code: 1,
                        })
                    }
                };
            }
            "ssl_keyformat" => {
                self.keyformat = strtol(value.ok_or_else(missing)?).ok_or_else(unparsed)?;
            }
            "ssl_ciphers" => self.ciphers = Some(value.ok_or_else(missing)?.into()),
            "ssl_ca_cert" => self.ca_cert = Some(value.ok_or_else(missing)?.into()),
            "ssl_wbuf_size" => {
                let kb: u32 = strtol(value.ok_or_else(missing)?)
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or_else(unparsed)?;
                self.wbuf_size = kb.wrapping_mul(1024);
            }
            "replication_peers" => {
                self.replication_peers =
                    peer_names(value.ok_or_else(missing)?).map_err(|e| usage(&e))?
            }
            "replication_ca" => self.replication_ca = Some(value.ok_or_else(missing)?.into()),
            "ssl_session_cache" => self.session_cache = true,
            "ssl_kernel_tls" => self.kernel_tls = true,
            "ssl_min_version" => {
                let v: i64 = strtol(value.ok_or_else(missing)?).ok_or_else(unparsed)?;
                if !(0..=3).contains(&v) {
                    return Err(OptionError {
                        message: "Invalid ssl_min_version. Use help to see valid options.".into(),
                        exit_code: 1,
                    });
                }
                self.min_version = v as u8;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// `replication_peers`' list: names separated by `:` (an IPv6 address
/// in brackets), each a DNS name or an IP address a certificate's SAN can
/// hold.
pub(crate) fn peer_names(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = list;
    while !rest.is_empty() {
        let (name, after) = match rest.strip_prefix('[') {
            Some(r) => {
                let (v6, after) = r
                    .split_once(']')
                    .ok_or_else(|| format!("replication_peers: no ] after [{r}"))?;
                (v6, after.strip_prefix(':').unwrap_or(after))
            }
            None => rest.split_once(':').unwrap_or((rest, "")),
        };
        let valid = name.parse::<std::net::IpAddr>().is_ok()
            || rustls_pki_types::DnsName::try_from(name).is_ok();
        if !valid {
            return Err(format!(
                "replication_peers: {name:?} is not a DNS name or an IP address"
            ));
        }
        names.push(name.to_string());
        rest = after;
    }
    if names.is_empty() {
        return Err("replication_peers: no name".into());
    }
    Ok(names)
}

/// memcached's `safe_strtol`: a whole decimal number, surrounding spaces
/// allowed.
fn strtol(s: &str) -> Option<i64> {
    let t = s.trim();
    if t.is_empty() {
        return None;
    }
    t.parse().ok()
}

/// Splits a `-l` entry's TLS prefix off (`notls:`, `btls:`, `mtls:`),
/// with memcached's refusal when `-Z` is absent (its exit code is 71, as
/// for any listener it could not open).
pub(crate) fn listener_prefix(
    spec: &str,
    tls_enabled: bool,
) -> Result<(ListenerTls, &str), String> {
    let default = if tls_enabled {
        ListenerTls::Default
    } else {
        ListenerTls::Off
    };
    // memcached compares the prefix and skips one more character,
    // whatever it is.
    for (prefix, mode, shown) in [
        ("notls", ListenerTls::Off, "notls"),
        ("btls", ListenerTls::NoPeer, "btls"),
        ("mtls", ListenerTls::Peer, "otls"),
    ] {
        if let Some(rest) = spec.strip_prefix(prefix) {
            if !tls_enabled {
                return Err(format!(
                    "'{shown}' option is valid only when SSL is enabled\nfailed to listen on one of interface(s) {spec}: Success"
                ));
            }
            let rest = rest.get(1..).unwrap_or("");
            return Ok((mode, rest));
        }
    }
    Ok((default, spec))
}

/// What replication needs to start, by whether `-Z` is on: every link
/// must prove both ends. Without `-Z`, `--replicate-to` needs the secret
/// (the Noise handshake is the links' only proof), and the certificate
/// names (`replication_peers`, `replication_ca`) mean nothing. With `-Z`,
/// `--replicate-to` needs the secret or the peers named by certificate
/// (an ordinary client certificate is no peer's), and `ssl_ca_cert` to
/// verify the target. Ok(Some(warning)): peers named by certificate
/// only, and no listener asks for client certificates, so this server can
/// accept no link.
pub(crate) fn replication_rule(
    tls: &TlsSettings,
    listeners: &[ListenerTls],
    replicates: bool,
    secret: bool,
) -> Result<Option<String>, String> {
    let named = !tls.replication_peers.is_empty() || tls.replication_ca.is_some();
    if !tls.enabled {
        if named {
            return Err(
                "-o replication_peers and -o replication_ca name replication peers by their \
                 TLS certificates: they need -Z"
                    .into(),
            );
        }
        if replicates && !secret {
            return Err(format!(
                "--replicate-to needs --replication-secret FILE: replication links prove both \
                 ends by a handshake with the shared secret ({}), or -Z with \
                 -o replication_peers=NAME[:NAME...] or -o replication_ca=FILE",
                osmium_protocol::replication_link::HOW_TO_MAKE
            ));
        }
        return Ok(None);
    }
    if replicates && !secret && !named {
        return Err(
            "with -Z, --replicate-to needs its peers named: -o replication_peers=NAME[:NAME...] \
             (the names in their certificates), -o replication_ca=FILE (the CA that issued \
             them), or --replication-secret FILE; a client certificate from ssl_ca_cert alone \
             makes no replication peer"
                .into(),
        );
    }
    if replicates && tls.ca_cert.is_none() {
        return Err(
            "with -Z, replication links are TLS and verify the target's certificate against \
             ssl_ca_cert: --replicate-to needs -o ssl_ca_cert=FILE"
                .into(),
        );
    }
    if !named || secret {
        return Ok(None);
    }
    let asks = listeners.iter().any(|l| match l {
        ListenerTls::Peer => true,
        ListenerTls::Default => tls.verify_mode != VerifyMode::None,
        ListenerTls::NoPeer | ListenerTls::Off => false,
    });
    Ok((!asks).then(|| {
        "WARNING: replication peers are named by their client certificates \
         (replication_peers, replication_ca), and no listener asks for one \
         (ssl_verify_mode=0, no mtls: listener): this server accepts no replication link"
            .into()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_memcached_syntax_and_units() {
        let mut s = TlsSettings::default();
        assert_eq!(s.option("ssl_wbuf_size", Some("32")), Ok(true));
        assert_eq!(s.wbuf_size, 32 * 1024);
        assert_eq!(s.option("ssl_verify_mode", Some("3")), Ok(true));
        assert_eq!(s.verify_mode.openssl_flags(), 7);
        assert_eq!(s.option("ssl_min_version", Some("3")), Ok(true));
        assert_eq!(version_text(s.min_version), "tlsv1.3");
        assert_eq!(s.option("ssl_session_cache", None), Ok(true));
        assert!(s.session_cache);
        assert_eq!(s.option("hashpower", Some("20")), Ok(false));
        let e = s.option("ssl_verify_mode", Some("5")).unwrap_err();
        assert_eq!(e.exit_code, 1);
        let e = s.option("ssl_chain_cert", None).unwrap_err();
        assert_eq!(e.message, "Missing ssl_chain_cert argument");
        let e = s.option("ssl_keyformat", Some("pem")).unwrap_err();
        assert_eq!(e.message, "could not parse argument to ssl_keyformat");
    }

    #[test]
    fn replication_needs_both_ends_proven() {
        let off = TlsSettings::default();
        let d = [ListenerTls::Default];
        assert!(replication_rule(&off, &d, true, false)
            .unwrap_err()
            .contains("--replication-secret"));
        assert_eq!(replication_rule(&off, &d, true, true), Ok(None));
        let named_off = TlsSettings {
            replication_peers: vec!["a".into()],
            ..TlsSettings::default()
        };
        assert!(replication_rule(&named_off, &d, false, true)
            .unwrap_err()
            .contains("need -Z"));
        let mut z = TlsSettings {
            enabled: true,
            ..TlsSettings::default()
        };
        assert_eq!(replication_rule(&z, &d, false, false), Ok(None));
        assert_eq!(replication_rule(&z, &d, false, true), Ok(None));
        // A certificate alone names no peer.
        let e = replication_rule(&z, &d, true, false).unwrap_err();
        assert!(e.contains("replication_peers"), "{e}");
        let e = replication_rule(&z, &d, true, true).unwrap_err();
        assert!(e.contains("ssl_ca_cert"), "{e}");
        z.ca_cert = Some("ca.pem".into());
        assert_eq!(replication_rule(&z, &d, true, true), Ok(None));
        z.replication_peers = vec!["cache-1".into()];
        assert!(replication_rule(&z, &d, true, false).unwrap().is_some());
        let mtls = [ListenerTls::Default, ListenerTls::Peer];
        assert_eq!(replication_rule(&z, &mtls, true, false), Ok(None));
        z.verify_mode = VerifyMode::Request;
        assert_eq!(replication_rule(&z, &d, true, false), Ok(None));
        z.replication_peers.clear();
        z.replication_ca = Some("peers-ca.pem".into());
        assert_eq!(replication_rule(&z, &d, true, false), Ok(None));
    }

    #[test]
    fn peer_names_are_names_or_addresses() {
        assert_eq!(
            peer_names("cache-1.example:10.0.0.2:[::1]").unwrap(),
            ["cache-1.example", "10.0.0.2", "::1"]
        );
        assert!(peer_names("").is_err());
        assert!(peer_names("bad_name!").is_err());
        assert!(peer_names("[::1").is_err());
        let mut s = TlsSettings::default();
        assert_eq!(s.option("replication_peers", Some("a:b")), Ok(true));
        assert_eq!(s.replication_peers, ["a", "b"]);
        assert!(s.option("replication_peers", None).is_err());
        assert_eq!(s.option("replication_ca", Some("ca.pem")), Ok(true));
    }

    #[test]
    fn listener_prefixes() {
        assert_eq!(
            listener_prefix("mtls:127.0.0.1:5", true),
            Ok((ListenerTls::Peer, "127.0.0.1:5"))
        );
        assert_eq!(
            listener_prefix("notls:127.0.0.1", true),
            Ok((ListenerTls::Off, "127.0.0.1"))
        );
        assert_eq!(
            listener_prefix("127.0.0.1", true),
            Ok((ListenerTls::Default, "127.0.0.1"))
        );
        assert_eq!(
            listener_prefix("127.0.0.1", false),
            Ok((ListenerTls::Off, "127.0.0.1"))
        );
        let e = listener_prefix("mtls:127.0.0.1", false).unwrap_err();
        assert!(e.starts_with("'otls' option is valid only when SSL is enabled"));
    }
}
