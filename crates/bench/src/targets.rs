//! `--targets HOST:PORT,...`: each server as spelled and as resolved.

/// `HOST:PORT` strings as (host as spelled, port, resolved address).
pub(crate) fn resolve(
    targets: &[String],
) -> Result<Vec<(String, u16, std::net::SocketAddr)>, String> {
    use std::net::ToSocketAddrs;
    targets
        .iter()
        .map(|t| {
            let (host, port) = t
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
                .ok_or_else(|| format!("bad target {t:?}: HOST:PORT"))?;
            let addr = (host, port)
                .to_socket_addrs()
                .map_err(|e| format!("resolving {t}: {e}"))?
                .next()
                .ok_or_else(|| format!("{t} resolves to nothing"))?;
            Ok((host.to_string(), port, addr))
        })
        .collect()
}
