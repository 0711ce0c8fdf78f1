//! `--metrics-addr HOST:PORT` (or `-o metrics_addr=HOST:PORT`): where the
//! `/metrics` endpoint listens; off without it. Checked here for its form
//! (a host, a colon, a port); resolved and bound when the server starts.

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

#[cfg(test)]
mod tests {
    use super::metrics_addr;

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
