//! `--metrics-addr HOST:PORT` (or `-o metrics_addr=HOST:PORT`): where the
//! `/metrics` endpoint listens; off without it. Checked here for its form
//! (a host, a colon, a port); resolved and bound when the server starts.
//! And what the endpoint may show: `--metrics-hotkeys` (key names on
//! `/hotkeys`) is refused while something guards the cache port's clients
//! (`-Y`, `-S`, client certificates) unless `--metrics-token-file` guards
//! the endpoint too: names that only an authenticated client may ask for
//! never go to any HTTP client.

use super::tls::{ListenerTls, TlsSettings, VerifyMode};

/// The address as given, once it has the `HOST:PORT` form (`[v6]:PORT`
/// for an IPv6 literal).
pub(super) fn metrics_addr(value: Option<&str>) -> Result<String, String> {
    let bad = || {
        format!(
            "--metrics-addr / -o metrics_addr: expected HOST:PORT, got \"{}\"",
            value.unwrap_or("")
        )
    };
    let value = value.ok_or_else(bad)?.trim();
    let (host, port) = value.rsplit_once(':').ok_or_else(bad)?;
    let host_ok =
        !host.is_empty() && (!host.contains(':') || (host.starts_with('[') && host.ends_with(']')));
    if !host_ok || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(value.to_string())
}

/// What makes the cache port answer only some clients, as the flag that
/// asks for it: `-S`, `-Y`, or client certificates (`-Z` with
/// `ssl_verify_mode` 1 to 3, or an `mtls:` listener). None: any client
/// that reaches the port may ask for anything, `stats hotkeys` included.
pub(super) fn cache_port_guard(
    sasl: bool,
    auth_file: bool,
    tls: &TlsSettings,
    listeners: &[ListenerTls],
) -> Option<&'static str> {
    if sasl {
        Some("-S")
    } else if auth_file {
        Some("-Y")
    } else if tls.enabled
        && (tls.verify_mode != VerifyMode::None || listeners.contains(&ListenerTls::Peer))
    {
        Some("client certificates (-Z with ssl_verify_mode or mtls:)")
    } else {
        None
    }
}

/// The metrics endpoint's options together: `--metrics-hotkeys` and
/// `--metrics-token-file` need `--metrics-addr`, and key names need the
/// token when `guard` (what [`cache_port_guard`] found) keeps them from
/// unauthenticated clients of the cache port.
pub(super) fn check_endpoint(
    addr: bool,
    hotkeys: bool,
    token: bool,
    guard: Option<&str>,
) -> Result<(), String> {
    if !addr {
        if hotkeys {
            return Err("--metrics-hotkeys needs --metrics-addr HOST:PORT".into());
        }
        if token {
            return Err("--metrics-token-file needs --metrics-addr HOST:PORT".into());
        }
    }
    if let (true, false, Some(guard)) = (hotkeys, token, guard) {
        return Err(format!(
            "--metrics-hotkeys would show key names to any HTTP client while {guard} \
             guards the cache port: give --metrics-token-file FILE too, or leave \
             --metrics-hotkeys out"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_need_the_token_where_the_cache_port_is_guarded() {
        let plain = TlsSettings::default();
        assert_eq!(cache_port_guard(false, false, &plain, &[]), None);
        assert_eq!(cache_port_guard(true, false, &plain, &[]), Some("-S"));
        assert_eq!(cache_port_guard(false, true, &plain, &[]), Some("-Y"));
        let mut tls = TlsSettings {
            enabled: true,
            ..TlsSettings::default()
        };
        assert_eq!(
            cache_port_guard(false, false, &tls, &[ListenerTls::Default]),
            None
        );
        assert!(cache_port_guard(false, false, &tls, &[ListenerTls::Peer]).is_some());
        for mode in [VerifyMode::Request, VerifyMode::Require, VerifyMode::Once] {
            tls.verify_mode = mode;
            assert!(cache_port_guard(false, false, &tls, &[ListenerTls::Default]).is_some());
        }

        assert!(check_endpoint(true, true, false, None).is_ok());
        assert!(check_endpoint(true, true, true, Some("-Y")).is_ok());
        assert!(check_endpoint(true, false, false, Some("-Y")).is_ok());
        let e = check_endpoint(true, true, false, Some("-Y")).unwrap_err();
        assert!(e.contains("--metrics-token-file"), "{e}");
        assert!(check_endpoint(false, true, false, None).is_err());
        assert!(check_endpoint(false, false, true, None).is_err());
        assert!(check_endpoint(false, false, false, Some("-S")).is_ok());
    }

    #[test]
    fn takes_host_and_port() {
        assert_eq!(
            metrics_addr(Some("127.0.0.1:9150")).unwrap(),
            "127.0.0.1:9150"
        );
        assert_eq!(metrics_addr(Some("localhost:0")).unwrap(), "localhost:0");
        assert_eq!(metrics_addr(Some("[::1]:9150")).unwrap(), "[::1]:9150");
        for bad in [
            "",
            "9150",
            ":9150",
            "host:",
            "host:99999",
            "::1:9150",
            "h:p",
        ] {
            assert!(metrics_addr(Some(bad)).is_err(), "{bad}");
        }
        assert!(metrics_addr(None).is_err());
    }
}
