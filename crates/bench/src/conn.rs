//! A text-protocol client connection whose replies are read by a background
//! thread into a buffer, so a loader that streams `noreply` commands can never
//! dead-lock on a server that (unexpectedly) answers them: stray replies are
//! kept, counted and skipped. Also the control commands the benchmarks need:
//! the `mn` round trip, `stats`, `get`, and a multi-key `get` of many keys.
//! Requests are written and replies framed by the shared client-side codec
//! (`osmium_protocol::client`).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use osmium_protocol::client::encode;
use osmium_protocol::client::reply::{self, reply_len, Expect};

/// How long a reply may take before the benchmark gives up.
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Default)]
struct Inbox {
    buf: Vec<u8>,
    closed: bool,
    error: Option<String>,
}

pub(crate) struct Conn {
    stream: TcpStream,
    inbox: Arc<(Mutex<Inbox>, Condvar)>,
    reader: Option<JoinHandle<()>>,
    /// Lines received that were not the reply waited for (e.g. `STORED` or
    /// `SERVER_ERROR out of memory …` for a `noreply` set).
    pub unexpected_lines: u64,
    /// The first few of them, for the report.
    pub unexpected_sample: Vec<String>,
}

impl Conn {
    pub(crate) fn connect(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut rd = stream.try_clone().map_err(|e| e.to_string())?;
        let inbox: Arc<(Mutex<Inbox>, Condvar)> = Arc::default();
        let shared = Arc::clone(&inbox);
        let reader = std::thread::Builder::new()
            .name("reply-reader".into())
            .spawn(move || {
                let mut chunk = vec![0u8; 1 << 16];
                loop {
                    let r = rd.read(&mut chunk);
                    let (lock, cv) = &*shared;
                    let mut inbox = lock.lock().unwrap_or_else(|e| e.into_inner());
                    match r {
                        Ok(0) => inbox.closed = true,
                        Ok(n) => inbox.buf.extend_from_slice(&chunk[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => {
                            inbox.closed = true;
                            inbox.error = Some(e.to_string());
                        }
                    }
                    let done = inbox.closed;
                    cv.notify_all();
                    if done {
                        return;
                    }
                }
            })
            .map_err(|e| format!("spawning reader: {e}"))?;
        Ok(Conn {
            stream,
            inbox,
            reader: Some(reader),
            unexpected_lines: 0,
            unexpected_sample: Vec::new(),
        })
    }

    pub(crate) fn send(&mut self, payload: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(payload)
            .map_err(|e| format!("sending: {e}"))
    }

    /// Waits until the buffer holds a complete reply as judged by `complete`
    /// (which returns the reply's length), and removes it.
    fn take(
        &mut self,
        mut complete: impl FnMut(&[u8]) -> Option<usize>,
    ) -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        let (lock, cv) = &*self.inbox;
        let mut inbox = lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(n) = complete(&inbox.buf) {
                return Ok(inbox.buf.drain(..n).collect());
            }
            if inbox.closed {
                return Err(format!(
                    "connection closed while waiting for a reply{}",
                    inbox
                        .error
                        .as_deref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                ));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err("timed out waiting for a reply".into());
            }
            inbox = cv
                .wait_timeout(inbox, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// The next complete reply framed as `expect` says.
    fn reply(&mut self, expect: Expect) -> Result<Vec<u8>, String> {
        let mut desync = false;
        let reply = self.take(|b| match reply_len(b, expect) {
            Ok(n) => n,
            Err(reply::Desync) => {
                desync = true;
                Some(b.len())
            }
        })?;
        if desync {
            return Err(format!(
                "reply cannot be framed: {:?}",
                String::from_utf8_lossy(&reply[..reply.len().min(80)])
            ));
        }
        Ok(reply)
    }

    /// The next line, without its line end.
    fn line(&mut self) -> Result<Vec<u8>, String> {
        let mut line = self.reply(Expect::Line)?;
        let text = line.trim_ascii_end().len();
        line.truncate(text);
        Ok(line)
    }

    fn note_unexpected(&mut self, line: &[u8]) {
        self.unexpected_lines += 1;
        if self.unexpected_sample.len() < 3 {
            self.unexpected_sample
                .push(String::from_utf8_lossy(line).into_owned());
        }
    }

    /// `mn` → `MN`: every command sent before has been processed. Lines that
    /// come before `MN` are counted as unexpected.
    pub(crate) fn round_trip(&mut self) -> Result<(), String> {
        self.send(b"mn\r\n")?;
        loop {
            let line = self.line()?;
            if line == b"MN" {
                return Ok(());
            }
            self.note_unexpected(&line);
        }
    }

    /// `stats` as a map.
    pub(crate) fn stats(&mut self) -> Result<HashMap<String, String>, String> {
        self.round_trip()?;
        self.send(b"stats\r\n")?;
        let reply = self.reply(Expect::Stats)?;
        if !reply.starts_with(b"STAT ") && !reply.starts_with(b"END") {
            return Err(format!(
                "unexpected reply to stats: {:?}",
                String::from_utf8_lossy(&reply)
            ));
        }
        Ok(reply::stats(&reply)
            .map(|(name, value)| {
                (
                    String::from_utf8_lossy(name).into_owned(),
                    String::from_utf8_lossy(value).into_owned(),
                )
            })
            .collect())
    }

    /// `get k1 k2 …`: the values found, in reply order, as (key, value).
    pub(crate) fn get_multi(&mut self, keys: &[&[u8]]) -> Result<Found, String> {
        self.round_trip()?;
        let mut req = Vec::new();
        encode::get(&mut req, b"get", keys.iter().copied());
        self.send(&req)?;
        let reply = self.reply(Expect::Values)?;
        let blocks = reply::values(&reply).ok_or_else(|| {
            format!(
                "unexpected reply to get: {:?}",
                String::from_utf8_lossy(&reply)
            )
        })?;
        Ok(blocks
            .into_iter()
            .map(|(key, block)| {
                let data = reply::value(block).unwrap_or_default();
                (key.to_vec(), data.to_vec())
            })
            .collect())
    }

    /// `get k`.
    pub(crate) fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.get_multi(&[key])?.pop().map(|(_, v)| v))
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

/// The hits of a multi-key get: (key, value) in reply order.
pub(crate) type Found = Vec<(Vec<u8>, Vec<u8>)>;

/// A numeric field of `stats`.
pub(crate) fn stat_u64(stats: &HashMap<String, String>, name: &str) -> Result<u64, String> {
    stats
        .get(name)
        .ok_or_else(|| format!("stats has no {name}"))?
        .parse()
        .map_err(|_| format!("stats {name} is not a number"))
}
