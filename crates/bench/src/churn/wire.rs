//! The pipelined text-protocol client of `churn`: one blocking TCP
//! connection that queues `set`/`delete`/`get` commands of `c:<id>` keys
//! (values from [`super::append_value`]) into one payload, sends it in one
//! write, and reads the replies in order, one call per command. Every
//! command asks for its reply (no `noreply`), so the client always knows
//! what the server did; a reply that is not the command's (e.g.
//! `SERVER_ERROR out of memory`) comes back as [`Reply::Error`].

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use osmium_protocol::client::encode;
use osmium_protocol::client::reply::{self, Outcome};

use super::{append_value, push_key};

/// The reply to one command.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Stored,
    Deleted,
    NotFound,
    /// A get's value (in [`Client::value`]).
    Hit,
    Miss,
    /// Any other line (without its CRLF).
    Error(String),
}

pub(crate) struct Client {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    payload: Vec<u8>,
    /// The key being written (`c:<id>`).
    key: Vec<u8>,
    line: Vec<u8>,
    /// The value of the last [`Reply::Hit`].
    pub value: Vec<u8>,
}

impl Client {
    pub(crate) fn connect(addr: SocketAddr) -> Result<Client, String> {
        let s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| e.to_string())?;
        let reader = BufReader::with_capacity(1 << 17, s.try_clone().map_err(|e| e.to_string())?);
        Ok(Client {
            writer: s,
            reader,
            payload: Vec::with_capacity(1 << 16),
            key: Vec::new(),
            line: Vec::new(),
            value: Vec::new(),
        })
    }

    /// Queues `set c:<id> 0 0 <size>` with the value of `version`.
    pub(crate) fn set(&mut self, id: u64, version: u32, size: usize) {
        self.key.clear();
        push_key(&mut self.key, id);
        encode::set_line(&mut self.payload, &self.key, size, false);
        append_value(&mut self.payload, id, version, size);
        encode::block_end(&mut self.payload);
    }

    /// Queues `delete c:<id>`.
    pub(crate) fn delete(&mut self, id: u64) {
        self.key.clear();
        push_key(&mut self.key, id);
        encode::keyed(&mut self.payload, b"delete", &self.key, None, false);
    }

    /// Queues `get c:<id>`.
    pub(crate) fn get(&mut self, id: u64) {
        self.key.clear();
        push_key(&mut self.key, id);
        encode::get(&mut self.payload, b"get", [&self.key]);
    }

    /// Bytes queued and not sent yet.
    pub(crate) fn queued(&self) -> usize {
        self.payload.len()
    }

    /// Sends what is queued, in one write.
    pub(crate) fn flush(&mut self) -> Result<(), String> {
        let r = self.writer.write_all(&self.payload);
        self.payload.clear();
        r.map_err(|e| format!("sending: {e}"))
    }

    fn read_line(&mut self) -> Result<(), String> {
        self.line.clear();
        let n = self
            .reader
            .read_until(b'\n', &mut self.line)
            .map_err(|e| format!("reading a reply: {e}"))?;
        if n == 0 {
            return Err("the server closed the connection".into());
        }
        if self.line.ends_with(b"\r\n") {
            self.line.truncate(self.line.len() - 2);
        }
        Ok(())
    }

    fn error(&self) -> Reply {
        Reply::Error(String::from_utf8_lossy(&self.line).into_owned())
    }

    /// The reply to a `set`.
    pub(crate) fn read_store(&mut self) -> Result<Reply, String> {
        self.read_line()?;
        Ok(if self.line == b"STORED" {
            Reply::Stored
        } else {
            self.error()
        })
    }

    /// The reply to a `delete`.
    pub(crate) fn read_delete(&mut self) -> Result<Reply, String> {
        self.read_line()?;
        Ok(match &self.line[..] {
            b"DELETED" => Reply::Deleted,
            b"NOT_FOUND" => Reply::NotFound,
            _ => self.error(),
        })
    }

    /// The reply to a `get` of one key: its value goes to [`Client::value`].
    pub(crate) fn read_get(&mut self) -> Result<Reply, String> {
        self.read_line()?;
        match reply::outcome(&self.line) {
            Outcome::Miss => return Ok(Reply::Miss),
            Outcome::Value => {}
            _ => return Ok(self.error()),
        }
        let (_, _, len, _) = reply::value_header(&self.line)
            .ok_or_else(|| format!("bad VALUE line {:?}", String::from_utf8_lossy(&self.line)))?;
        self.value.resize(len + 2, 0);
        self.reader
            .read_exact(&mut self.value)
            .map_err(|e| format!("reading a value: {e}"))?;
        if &self.value[len..] != b"\r\n" {
            return Err("a value not followed by CRLF".into());
        }
        self.value.truncate(len);
        self.read_line()?;
        if reply::outcome(&self.line) != Outcome::Miss {
            return Err(format!(
                "{:?} after a get's value instead of END",
                String::from_utf8_lossy(&self.line)
            ));
        }
        Ok(Reply::Hit)
    }
}

/// Counts of unexpected replies, with the first few for the report.
#[derive(Clone, Debug, Default)]
pub(crate) struct Errors {
    pub count: u64,
    pub sample: Vec<String>,
}

impl Errors {
    pub(crate) fn note(&mut self, line: String) {
        self.count += 1;
        if self.sample.len() < 3 {
            self.sample.push(line);
        }
    }

    pub(crate) fn add(&mut self, o: &Errors) {
        self.count += o.count;
        for s in &o.sample {
            if self.sample.len() < 3 {
                self.sample.push(s.clone());
            }
        }
    }
}
