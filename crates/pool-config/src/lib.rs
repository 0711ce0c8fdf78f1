//! nutcracker's YAML configuration: named pools, each with its listener,
//! hash, distribution, timeouts, ejection settings and servers, checked as
//! nutcracker 0.5.0 checks them (`src/nc_conf.c`): unknown or duplicate
//! directives, bad numbers, booleans other than `true`/`false`, server
//! lines that are not `host:port:weight [name]` or `/path:weight [name]`,
//! duplicate server names, duplicate listen addresses, are errors. Redis
//! pools are refused. osmium's own keys: `failover: replica|rehash`, the
//! `libmemcached` / `libmemcached_weighted` distributions, `tls:` (a
//! mapping, read by `tls`), `warm_moves: true|false`, and
//! `replication_secret: FILE` (read by osmium-proxy's `peer`).
//!
//! Its own crate, so that osmium-bench and osmium-tool read pools as the
//! proxy does without depending on the proxy.

use std::path::PathBuf;
use std::time::Duration;

use serde_norway::Value;

use osmium_placement::hash::HashKind;
use osmium_placement::ring::{PoolSpec, ServerSpec};

pub use osmium_placement::ring::Distribution;
pub use tls::TlsConfig;

pub mod tls;

/// Where an ejected server's keys go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failover {
    /// To its replica: the next live server in `servers:` order.
    Replica,
    /// Over the continuum of the live servers, as nutcracker does.
    Rehash,
}

/// An address to listen on or to connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    /// `host:port`, resolved when used.
    Tcp {
        /// A host name or IP address.
        host: String,
        /// The port.
        port: u16,
    },
    /// A unix socket path.
    Unix(PathBuf),
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Tcp { host, port } => write!(f, "{host}:{port}"),
            Addr::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A pool's `listen:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listen {
    /// The address.
    pub addr: Addr,
    /// The unix socket's permissions (`/path 0666`).
    pub perm: Option<u32>,
    /// As written, for duplicate checks.
    pub pname: String,
}

/// One line of `servers:`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerConfig {
    /// The server's address.
    pub addr: Addr,
    /// Its weight (`host:port:weight`).
    pub weight: u32,
    /// The name ketama hashes: the line's name, else `host:port` (`host`
    /// alone at port 11211), else the unix path.
    pub name: String,
    /// Whether the line named the server.
    pub named: bool,
    /// `host:port:weight` as written (without the name).
    pub pname: String,
}

/// One pool.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    /// The pool's name (its key in the file).
    pub name: String,
    /// Where its clients connect (`listen:`).
    pub listen: Listen,
    /// `hash:` (default `fnv1a_64`).
    pub hash: HashKind,
    /// `hash_tag:`, its opening and closing characters.
    pub hash_tag: Option<[u8; 2]>,
    /// `distribution:` (default `ketama`).
    pub distribution: Distribution,
    /// `timeout:` (none: wait for ever, nutcracker's default).
    pub timeout: Option<Duration>,
    /// `backlog:` of the listening socket.
    pub backlog: u32,
    /// `preconnect:`: connect to every server at start.
    pub preconnect: bool,
    /// `auto_eject_hosts:`: take a failing server out of the ring.
    pub auto_eject_hosts: bool,
    /// `server_retry_timeout:`: how long an ejected server stays out.
    pub server_retry_timeout: Duration,
    /// `server_failure_limit:`: failures in a row that eject a server.
    pub server_failure_limit: u32,
    /// `server_connections:`: connections per server (for each protocol).
    pub server_connections: u32,
    /// osmium's `failover:`: where an ejected server's keys go.
    pub failover: Failover,
    /// In the order of the file.
    pub servers: Vec<ServerConfig>,
    /// `tls:` (both sides off when absent).
    pub tls: TlsConfig,
    /// osmium's `warm_moves:` (default true): whether a reload that
    /// changes the ring moves the keys whose owner changed ahead of the
    /// clients (`false`: they miss on their new owner, as after a
    /// nutcracker restart).
    pub warm_moves: bool,
    /// osmium's `replication_secret:` (the file's path): the secret of
    /// the servers' replication ring, with which the proxy proves itself
    /// their peer (`peer`).
    pub replication_secret: Option<String>,
}

impl From<&PoolConfig> for PoolSpec {
    /// What the pool's placement depends on: its ring's input.
    fn from(pool: &PoolConfig) -> PoolSpec {
        let servers = pool
            .servers
            .iter()
            .map(|s| {
                let (host, port) = match &s.addr {
                    Addr::Tcp { host, port } => (host.clone(), *port),
                    Addr::Unix(p) => (p.display().to_string(), 0),
                };
                ServerSpec {
                    name: s.name.clone(),
                    weight: s.weight,
                    host,
                    port,
                }
            })
            .collect();
        PoolSpec {
            distribution: pool.distribution,
            hash: pool.hash,
            hash_tag: pool.hash_tag,
            servers,
        }
    }
}

/// The whole file.
#[derive(Clone, Debug)]
pub struct Config {
    /// In the order of the file.
    pub pools: Vec<PoolConfig>,
}

/// nutcracker's default `backlog`.
pub const DEFAULT_BACKLOG: u32 = 512;
/// nutcracker's `server_retry_timeout`, in milliseconds.
pub const DEFAULT_SERVER_RETRY_TIMEOUT_MS: u64 = 30_000;
/// nutcracker's `server_failure_limit`.
pub const DEFAULT_SERVER_FAILURE_LIMIT: u32 = 2;
/// The port a server's name leaves out (`host` alone means `host:11211`).
pub const DEFAULT_KETAMA_PORT: u16 = 11211;

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &std::path::Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "conf: failed to open configuration '{}': {e}",
                path.display()
            )
        })?;
        Config::parse(&text)
    }

    /// Parses and checks a configuration's text.
    pub fn parse(text: &str) -> Result<Config, String> {
        let root: Value =
            serde_norway::from_str(text).map_err(|e| format!("conf: invalid yaml: {e}"))?;
        let Value::Mapping(root) = root else {
            return Err("conf: the configuration must be a mapping of pool names".into());
        };
        let mut pools = Vec::new();
        for (name, body) in root {
            let name = scalar(&name).ok_or("conf: a pool name must be a scalar")?;
            let Value::Mapping(body) = body else {
                return Err(format!(
                    "conf: pool '{name}' must be a mapping of directives"
                ));
            };
            pools.push(parse_pool(name, body)?);
        }
        if pools.is_empty() {
            return Err("conf: configuration has no pools".into());
        }
        for (i, a) in pools.iter().enumerate() {
            for b in &pools[i + 1..] {
                if a.listen.pname == b.listen.pname {
                    return Err(format!(
                        "conf: pools '{}' and '{}' have the same listen address '{}'",
                        a.name, b.name, a.listen.pname
                    ));
                }
                if a.name == b.name {
                    return Err(format!("conf: has pools with same name '{}'", a.name));
                }
            }
        }
        Ok(Config { pools })
    }
}

/// A scalar as nutcracker sees it: its text.
fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// nutcracker's `nc_atoi`: digits only.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_bool(s: &str) -> Result<bool, &'static str> {
    match s {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("is not \"true\" or \"false\""),
    }
}

fn parse_pool(name: String, body: serde_norway::Mapping) -> Result<PoolConfig, String> {
    let mut seen: Vec<String> = Vec::new();
    let mut listen = None;
    let mut hash = None;
    let mut hash_tag = None;
    let mut distribution = None;
    let mut timeout = None;
    let mut backlog = None;
    let mut preconnect = None;
    let mut auto_eject = None;
    let mut retry = None;
    let mut failure_limit = None;
    let mut connections = None;
    let mut failover = None;
    let mut warm_moves = None;
    let mut replication_secret = None;
    let mut servers = Vec::new();
    let mut tls = TlsConfig::default();
    for (key, value) in body {
        let key =
            scalar(&key).ok_or_else(|| format!("conf: pool '{name}' has a non-scalar key"))?;
        let err = |why: &str| format!("conf: directive \"{key}\" {why}");
        if seen.contains(&key) {
            return Err(err("is a duplicate"));
        }
        seen.push(key.clone());
        if key == "servers" {
            let Value::Sequence(list) = value else {
                return Err(err("must be a sequence of servers"));
            };
            for item in list {
                let line = scalar(&item).ok_or_else(|| err("has a non-scalar server"))?;
                servers.push(parse_server(&line).map_err(err)?);
            }
            continue;
        }
        if key == "tls" {
            tls = tls::parse(&name, &value)?;
            continue;
        }
        let v = scalar(&value).ok_or_else(|| err("must be a scalar"))?;
        let num = || number(&v).ok_or_else(|| err("is not a number"));
        let boolean = || parse_bool(&v).map_err(err);
        match key.as_str() {
            "listen" => listen = Some(parse_listen(&v).map_err(err)?),
            "hash" => {
                hash = Some(HashKind::from_name(&v).ok_or_else(|| err("is not a valid hash"))?)
            }
            "hash_tag" => {
                let b = v.as_bytes();
                if b.len() != 2 {
                    return Err(err("is not a valid hash tag string with two characters"));
                }
                hash_tag = Some([b[0], b[1]]);
            }
            "distribution" => {
                distribution = Some(
                    Distribution::from_name(&v)
                        .ok_or_else(|| err("is not a valid distribution"))?,
                )
            }
            "timeout" => timeout = Some(Duration::from_millis(num()?)),
            "backlog" => backlog = Some(num()? as u32),
            "client_connections" => {
                num()?;
            }
            "redis" => {
                if boolean()? {
                    return Err(format!(
                        "conf: pool '{name}': redis pools are not supported by osmium-proxy \
                         (memcached pools only: set \"redis: false\" or leave it out)"
                    ));
                }
            }
            "redis_auth" | "redis_db" => {
                return Err(err("is for redis pools, which osmium-proxy does not serve"));
            }
            "preconnect" => preconnect = Some(boolean()?),
            "auto_eject_hosts" => auto_eject = Some(boolean()?),
            "warm_moves" => warm_moves = Some(boolean()?),
            "replication_secret" => {
                if v.is_empty() {
                    return Err(err("is empty (the path of a secret file)"));
                }
                replication_secret = Some(v.clone());
            }
            "server_retry_timeout" => retry = Some(Duration::from_millis(num()?)),
            "server_failure_limit" => failure_limit = Some(num()? as u32),
            "server_connections" => {
                let n = num()?;
                if n == 0 {
                    return Err(err("cannot be 0"));
                }
                connections = Some(n as u32);
            }
            "failover" => {
                failover = Some(match v.as_str() {
                    "replica" => Failover::Replica,
                    "rehash" => Failover::Rehash,
                    _ => return Err(err("is not \"replica\" or \"rehash\"")),
                })
            }
            _ => return Err(err("is unknown")),
        }
    }
    let listen = listen.ok_or("conf: directive \"listen:\" is missing")?;
    if servers.is_empty() {
        return Err(format!("conf: pool '{name}' has no servers"));
    }
    for (i, a) in servers.iter().enumerate() {
        if servers[i + 1..].iter().any(|b| b.name == a.name) {
            return Err(format!(
                "conf: pool '{name}' has servers with same name '{}'",
                a.name
            ));
        }
    }
    Ok(PoolConfig {
        name,
        listen,
        hash: hash.unwrap_or(HashKind::Fnv1a64),
        hash_tag,
        distribution: distribution.unwrap_or(Distribution::Ketama),
        timeout,
        backlog: backlog.unwrap_or(DEFAULT_BACKLOG),
        preconnect: preconnect.unwrap_or(false),
        auto_eject_hosts: auto_eject.unwrap_or(false),
        server_retry_timeout: retry
            .unwrap_or(Duration::from_millis(DEFAULT_SERVER_RETRY_TIMEOUT_MS)),
        server_failure_limit: failure_limit.unwrap_or(DEFAULT_SERVER_FAILURE_LIMIT),
        server_connections: connections.unwrap_or(1),
        failover: failover.unwrap_or(Failover::Replica),
        servers,
        tls,
        warm_moves: warm_moves.unwrap_or(true),
        replication_secret,
    })
}

fn parse_port(s: &str) -> Option<u16> {
    number(s).filter(|&p| p > 0 && p < 65536).map(|p| p as u16)
}

/// `host:port`, or `/path [perm]`.
fn parse_listen(v: &str) -> Result<Listen, &'static str> {
    if v.starts_with('/') {
        let (path, perm) = match v.rsplit_once(' ') {
            None => (v, None),
            Some((path, perm)) => {
                let perm = u32::from_str_radix(perm, 8)
                    .ok()
                    .filter(|&p| p <= 0o777)
                    .ok_or(
                    "has an invalid file permission in \"socket_path permission\" format string",
                )?;
                (path, Some(perm))
            }
        };
        return Ok(Listen {
            addr: Addr::Unix(PathBuf::from(path)),
            perm,
            pname: v.to_string(),
        });
    }
    let (host, port) = v
        .rsplit_once(':')
        .ok_or("has an invalid \"hostname:port\" format string")?;
    let port = parse_port(port).ok_or("has an invalid port in \"hostname:port\" format string")?;
    Ok(Listen {
        addr: Addr::Tcp {
            host: host.to_string(),
            port,
        },
        perm: None,
        pname: v.to_string(),
    })
}

/// `host:port:weight [name]` or `/path:weight [name]`.
fn parse_server(v: &str) -> Result<ServerConfig, &'static str> {
    const FORMAT: &str = "has an invalid \"hostname:port:weight [name]\"or \"/path/unix_socket:weight [name]\" format string";
    let (pname, name) = match v.rsplit_once(' ') {
        Some((p, n)) => (p, Some(n)),
        None => (v, None),
    };
    let (rest, weight) = pname.rsplit_once(':').ok_or(FORMAT)?;
    let weight = number(weight)
        .ok_or("has an invalid weight in \"hostname:port:weight [name]\" format string")?;
    if weight == 0 {
        return Err("has a zero weight in \"hostname:port:weight [name]\" format string");
    }
    let weight = weight.min(u32::MAX as u64) as u32;
    let (addr, default_name) = if rest.starts_with('/') {
        (Addr::Unix(PathBuf::from(rest)), rest.to_string())
    } else {
        let (host, port) = rest.rsplit_once(':').ok_or(FORMAT)?;
        let port = parse_port(port)
            .ok_or("has an invalid port in \"hostname:port:weight [name]\" format string")?;
        let default_name = if port == DEFAULT_KETAMA_PORT {
            host.to_string()
        } else {
            rest.to_string()
        };
        (
            Addr::Tcp {
                host: host.to_string(),
                port,
            },
            default_name,
        )
    };
    Ok(ServerConfig {
        addr,
        weight,
        name: name.map(str::to_string).unwrap_or(default_name),
        named: name.is_some(),
        pname: pname.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "alpha:\n  listen: 127.0.0.1:22121\n  hash: fnv1a_64\n  distribution: ketama\n  auto_eject_hosts: true\n  timeout: 400\n  redis: false\n  server_retry_timeout: 2000\n  server_failure_limit: 1\n  servers:\n   - 127.0.0.1:11211:1\n   - 127.0.0.1:11212:1 two\n";

    #[test]
    fn reads_a_pool() {
        let c = Config::parse(SAMPLE).unwrap();
        let p = &c.pools[0];
        assert_eq!(p.name, "alpha");
        assert_eq!(p.timeout, Some(Duration::from_millis(400)));
        assert_eq!(p.servers[0].name, "127.0.0.1", "port 11211 left out");
        assert_eq!(p.servers[1].name, "two");
        assert_eq!(p.server_failure_limit, 1);
        assert_eq!(p.failover, Failover::Replica);
    }

    #[test]
    fn refuses_what_nutcracker_refuses() {
        let bad = |from: &str, to: &str| Config::parse(&SAMPLE.replace(from, to)).unwrap_err();
        assert!(bad("timeout: 400", "timeuot: 400").contains("is unknown"));
        assert!(bad("redis: false", "redis: true").contains("redis"));
        assert!(bad("hash: fnv1a_64", "hash: sha1").contains("not a valid hash"));
        assert!(bad("127.0.0.1:11211:1", "127.0.0.1:11211").contains("format"));
        assert!(bad("127.0.0.1:11211:1", "127.0.0.1:11211:0").contains("zero weight"));
        assert!(bad("auto_eject_hosts: true", "auto_eject_hosts: yes").contains("true"));
        assert!(bad(":11212:1 two", ":11211:1").contains("same name"));
        let tls = |t: &str| Config::parse(&format!("{SAMPLE}  tls:\n{t}"));
        let e = tls("    listen: {cert: a, key: b, verify: x}\n").unwrap_err();
        assert!(e.contains("pool 'alpha'") && e.contains("\"tls.listen.verify\" is unknown"));
        assert!(tls("    servers: {ca: c}\n").unwrap().pools[0]
            .tls
            .servers
            .is_some());
        assert_eq!(
            Config::parse(SAMPLE).unwrap().pools[0].tls,
            TlsConfig::default()
        );
    }
}
