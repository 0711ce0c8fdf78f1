//! The TLS settings: `-Z` and memcached's `-o ssl_*` options, parsed with
//! memcached 1.6.45's syntax, defaults and error messages, and the
//! per-listener `notls:` / `btls:` / `mtls:` prefixes of `-l`, and what
//! `-Z` asks of replication (`replication_rule`). What they build (the
//! rustls configurations) lives in `tls_context`.

/// `-o ssl_verify_mode`: how client certificates are asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyMode {
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
    pub fn openssl_flags(self) -> u32 {
        match self {
            VerifyMode::None => 0,
            VerifyMode::Request => 1,
            VerifyMode::Require => 3,
            VerifyMode::Once => 7,
        }
    }

    /// Whether a connection without a client certificate is refused.
    pub fn requires_cert(self) -> bool {
        matches!(self, VerifyMode::Require | VerifyMode::Once)
    }
}

/// How one listener speaks TLS (memcached's `MC_SSL_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerTls {
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
pub struct TlsSettings {
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
        }
    }
}

/// What `stats settings` shows for `ssl_min_version`.
pub fn version_text(v: u8) -> &'static str {
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
pub struct OptionError {
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
    pub fn option(&mut self, name: &str, value: Option<&str>) -> Result<bool, OptionError> {
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
pub fn listener_prefix(spec: &str, tls_enabled: bool) -> Result<(ListenerTls, &str), String> {
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

/// What replication needs to start, by whether `-Z` is on: the links
/// must authenticate both ends. Without `-Z`, `--replicate-to` needs the
/// secret (the links' only proof). With `-Z` every link is TLS and each
/// end's certificate is verified against `ssl_ca_cert`, so a server that
/// replicates (`--replicate-to`) or serves peers (`--replication-secret`)
/// needs one; the secret is then optional (when given, a peer needs both).
/// Ok(Some(warning)): with `-Z` no listener asks for client certificates,
/// so this server can accept no link.
pub fn replication_rule(
    tls: &TlsSettings,
    listeners: &[ListenerTls],
    replicates: bool,
    secret: bool,
) -> Result<Option<String>, String> {
    if !tls.enabled {
        if replicates && !secret {
            return Err(
                "--replicate-to needs --replication-secret FILE: replication links are \
                        authenticated (both ends must hold the same secret), or -Z with \
                        ssl_ca_cert (TLS links, both certificates verified)"
                    .into(),
            );
        }
        return Ok(None);
    }
    if !(replicates || secret) {
        return Ok(None);
    }
    if tls.ca_cert.is_none() {
        return Err(
            "with -Z, replication links are TLS and verify the certificate of each end \
                    against ssl_ca_cert: --replicate-to and --replication-secret need \
                    -o ssl_ca_cert=FILE"
                .into(),
        );
    }
    let asks = listeners.iter().any(|l| match l {
        ListenerTls::Peer => true,
        ListenerTls::Default => tls.verify_mode != VerifyMode::None,
        ListenerTls::NoPeer | ListenerTls::Off => false,
    });
    Ok((!asks).then(|| {
        "WARNING: with -Z a replication peer shows a client certificate verified against \
         ssl_ca_cert, and no listener asks for one (ssl_verify_mode=0, no mtls: listener): \
         this server accepts no replication link"
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
    fn replication_needs_both_ends_verified() {
        let off = TlsSettings::default();
        let d = [ListenerTls::Default];
        assert!(replication_rule(&off, &d, true, false)
            .unwrap_err()
            .contains("--replication-secret"));
        assert_eq!(replication_rule(&off, &d, true, true), Ok(None));
        let mut z = TlsSettings {
            enabled: true,
            ..TlsSettings::default()
        };
        assert_eq!(replication_rule(&z, &d, false, false), Ok(None));
        for (replicates, secret) in [(true, false), (true, true), (false, true)] {
            let e = replication_rule(&z, &d, replicates, secret).unwrap_err();
            assert!(e.contains("need -o ssl_ca_cert=FILE"), "{e}");
        }
        z.ca_cert = Some("ca.pem".into());
        assert!(replication_rule(&z, &d, true, false).unwrap().is_some());
        let mtls = [ListenerTls::Default, ListenerTls::Peer];
        assert_eq!(replication_rule(&z, &mtls, true, false), Ok(None));
        z.verify_mode = VerifyMode::Request;
        assert_eq!(replication_rule(&z, &d, true, false), Ok(None));
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
