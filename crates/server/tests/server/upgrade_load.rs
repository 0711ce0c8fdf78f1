//! A loader for the binary-upgrade tests (`upgrade`): clients doing
//! verified GET/SET traffic on connections held across an upgrade, and
//! a client opening a new connection every 50 ms, counting what fails
//! rather than stopping at it, and measuring the longest any request
//! waited (printed, never asserted on).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the loader saw.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Requests answered.
    pub requests: u64,
    /// Connections that failed (reset, closed, timed out) or answered
    /// wrong.
    pub errors: u64,
    /// New connections refused.
    pub refused: u64,
    /// New connections made.
    pub connections: u64,
    /// Acknowledged writes not read back afterwards as written.
    pub lost: u64,
    /// The longest a request waited for its answer.
    pub longest: Duration,
}

pub(crate) struct Loader {
    stop: Arc<AtomicBool>,
    clients: Vec<std::thread::JoinHandle<(Seen, HashMap<String, String>)>>,
    connector: std::thread::JoinHandle<Seen>,
    addr: SocketAddr,
}

/// One client's connection.
struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    fn open(addr: SocketAddr) -> std::io::Result<Conn> {
        let s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let _ = s.set_nodelay(true);
        Ok(Conn {
            r: BufReader::new(s.try_clone()?),
            w: s,
        })
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        if self.r.read_line(&mut l)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(l)
    }

    fn set(&mut self, key: &str, value: &str) -> std::io::Result<bool> {
        let request = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
        self.w.write_all(request.as_bytes())?;
        Ok(self.line()? == "STORED\r\n")
    }

    /// The value of `key`, None for a miss.
    fn get(&mut self, key: &str) -> std::io::Result<Option<String>> {
        self.w.write_all(format!("get {key}\r\n").as_bytes())?;
        let first = self.line()?;
        if first == "END\r\n" {
            return Ok(None);
        }
        let len: usize = first
            .trim_end()
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or(std::io::ErrorKind::InvalidData)?;
        let mut value = vec![0u8; len + 2];
        self.r.read_exact(&mut value)?;
        if self.line()? != "END\r\n" {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        value.truncate(len);
        Ok(Some(String::from_utf8_lossy(&value).into_owned()))
    }
}

/// A client: 90 % GETs of its own keys (each checked against the last
/// value the server acknowledged), 10 % SETs, on one connection for as
/// long as it works (then a new one, the failure counted).
fn client(addr: SocketAddr, id: usize, stop: Arc<AtomicBool>) -> (Seen, HashMap<String, String>) {
    let mut seen = Seen::default();
    let mut written: HashMap<String, String> = HashMap::new();
    let mut conn = Conn::open(addr).expect("the client's first connection");
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("load{id}-{}", n % 200);
        let started = Instant::now();
        let outcome = if n.is_multiple_of(10) || !written.contains_key(&key) {
            let value = format!("v{id}-{n}");
            conn.set(&key, &value).inspect(|&stored| {
                if stored {
                    written.insert(key.clone(), value);
                }
            })
        } else {
            conn.get(&key).map(|got| got.as_ref() == written.get(&key))
        };
        seen.longest = seen.longest.max(started.elapsed());
        match outcome {
            Ok(true) => seen.requests += 1,
            Ok(false) => seen.errors += 1,
            Err(_) => {
                seen.errors += 1;
                // A write that may or may not have been done is not
                // checked afterwards.
                written.remove(&key);
                match Conn::open(addr) {
                    Ok(c) => conn = c,
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        }
    }
    (seen, written)
}

/// A new connection every 50 ms, each asked `version`.
fn connector(addr: SocketAddr, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        match Conn::open(addr) {
            Ok(mut c) => {
                seen.connections += 1;
                let answered =
                    c.w.write_all(b"version\r\n")
                        .and_then(|_| c.line())
                        .is_ok_and(|l| l.starts_with("VERSION "));
                if !answered {
                    seen.errors += 1;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => seen.refused += 1,
            Err(_) => seen.errors += 1,
        }
        seen.longest = seen.longest.max(started.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    }
    seen
}

impl Loader {
    /// Starts `clients` clients and the connector against `addr`.
    pub(crate) fn start(addr: SocketAddr, clients: usize) -> Loader {
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..clients)
            .map(|id| {
                let stop = stop.clone();
                std::thread::spawn(move || client(addr, id, stop))
            })
            .collect();
        let flag = stop.clone();
        let connector = std::thread::spawn(move || connector(addr, flag));
        Loader {
            stop,
            clients,
            connector,
            addr,
        }
    }

    /// Stops the traffic, then reads every acknowledged write back on a
    /// new connection.
    pub(crate) fn finish(self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        let mut total = self.connector.join().expect("the connector");
        let mut check = Conn::open(self.addr).expect("a connection to check");
        for c in self.clients {
            let (seen, written) = c.join().expect("a client");
            total.requests += seen.requests;
            total.errors += seen.errors;
            total.longest = total.longest.max(seen.longest);
            for (key, value) in written {
                if check.get(&key).ok().flatten().as_ref() != Some(&value) {
                    total.lost += 1;
                }
            }
        }
        total
    }
}
