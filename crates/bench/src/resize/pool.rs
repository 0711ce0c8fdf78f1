//! The pool under test in `cluster --mode resize`: its YAML, which keys a
//! change of its servers moves (the proxy's own placement), and the
//! proxy's stats port (reloads and migration progress).

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

// The YAML as the proxy reads it; its placement from osmium-placement.
use osmium_placement::ring::Ring;
use osmium_pool_config::Config;

/// The pool's name in the YAML and on the stats port.
pub(crate) const POOL: &str = "resize";

/// The YAML of pool [`POOL`] listening on `listen` over `servers`
/// (port, name): the ring hashes the names, so every run places keys
/// alike whatever ports it got. `warm_moves` adds osmium-proxy's key of
/// that name.
pub(crate) fn yaml(listen: u16, servers: &[(u16, &str)], warm_moves: Option<bool>) -> String {
    let mut y = format!(
        "{POOL}:\n  listen: 127.0.0.1:{listen}\n  hash: fnv1a_64\n  distribution: ketama\n  \
         timeout: 2000\n  auto_eject_hosts: false\n  server_retry_timeout: 2000\n  \
         server_failure_limit: 2\n"
    );
    if let Some(w) = warm_moves {
        y.push_str(&format!("  warm_moves: {w}\n"));
    }
    y.push_str("  servers:\n");
    for (port, name) in servers {
        y.push_str(&format!("   - 127.0.0.1:{port}:1 {name}\n"));
    }
    y
}

/// The owner (server name) of every key id in `0..keys` under `yaml`
/// (without osmium's extension keys, which the placement ignores).
fn owners(yaml: &str, keys: u64, key: impl Fn(u64) -> Vec<u8>) -> Result<Vec<String>, String> {
    let plain: String = yaml
        .lines()
        .filter(|l| !l.trim_start().starts_with("warm_moves:"))
        .map(|l| format!("{l}\n"))
        .collect();
    let config = Config::parse(&plain)?;
    let pool = config.pools.first().ok_or("the YAML has no pool")?;
    let ring = Ring::new(pool);
    Ok((0..keys)
        .map(|id| pool.servers[ring.server_of(&key(id))].name.clone())
        .collect())
}

/// How many of the keys `0..keys` change owner from `old` to `new`.
pub(crate) fn moved_keys(
    old: &str,
    new: &str,
    keys: u64,
    key: impl Fn(u64) -> Vec<u8> + Copy,
) -> Result<u64, String> {
    let (a, b) = (owners(old, keys, key)?, owners(new, keys, key)?);
    Ok(a.iter().zip(&b).filter(|(x, y)| x != y).count() as u64)
}

/// The reload and migration counters of the pool on a stats port
/// (nutcracker's JSON, with osmium-proxy's additions; absent = 0).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Whether the pool's object has `reloads` at all (a proxy that
    /// reloads).
    pub reload_supported: bool,
    pub reloads: u64,
    pub reload_failures: u64,
    pub migrating: u64,
    pub moved_keys: u64,
    pub moved_bytes: u64,
    pub warm_reads: u64,
}

/// Reads the stats port at `addr` once.
pub(crate) fn progress(addr: SocketAddr) -> Result<Progress, String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
        .map_err(|e| format!("stats port {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    s.read_to_end(&mut text)
        .map_err(|e| format!("stats port {addr}: {e}"))?;
    parse_progress(&text)
}

fn parse_progress(text: &[u8]) -> Result<Progress, String> {
    let v: serde_json::Value =
        serde_json::from_slice(text).map_err(|e| format!("stats port JSON: {e}"))?;
    let pool = v
        .get(POOL)
        .ok_or_else(|| format!("stats port JSON has no pool {POOL:?}"))?;
    let n = |k: &str| pool.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
    Ok(Progress {
        reload_supported: pool.get("reloads").is_some(),
        reloads: n("reloads"),
        reload_failures: n("reload_failures"),
        migrating: n("migrating"),
        moved_keys: n("moved_keys"),
        moved_bytes: n("moved_bytes"),
        warm_reads: n("warm_reads"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_a_server_moves_about_its_share() {
        let key = |id: u64| crate::resize::clients::key(id).as_bytes().to_vec();
        let s = [(11, "s1"), (12, "s2"), (13, "s3"), (14, "s4"), (15, "s5")];
        let four = yaml(1, &s[..4], Some(true));
        let five = yaml(1, &s, Some(true));
        let moved = moved_keys(&four, &five, 10_000, key).unwrap();
        assert!((1_000..3_000).contains(&moved), "{moved}");
        assert_eq!(moved_keys(&four, &four, 10_000, key).unwrap(), 0);
        // Names, not ports, place keys.
        let other_ports = yaml(2, &[(21, "s1"), (22, "s2"), (23, "s3"), (24, "s4")], None);
        assert_eq!(moved_keys(&four, &other_ports, 10_000, key).unwrap(), 0);
        let less = yaml(1, &s[1..], None);
        let moved = moved_keys(&five, &less, 10_000, key).unwrap();
        assert!((1_000..3_000).contains(&moved), "{moved}");
    }

    #[test]
    fn progress_fields_absent_are_zero() {
        let p = parse_progress(br#"{"service":"nutcracker","resize":{"client_eof":0}}"#).unwrap();
        assert_eq!(p, Progress::default());
        let p = parse_progress(
            br#"{"resize":{"reloads":2,"migrating":1,"moved_keys":5,"moved_bytes":900,"warm_reads":3}}"#,
        )
        .unwrap();
        assert!(p.reload_supported && p.reloads == 2 && p.migrating == 1);
        assert_eq!((p.moved_keys, p.moved_bytes, p.warm_reads), (5, 900, 3));
    }
}
