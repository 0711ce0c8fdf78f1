//! A client connection: its read buffer, and its reply slots, one per
//! request in request order. A slot fills as its parts come back from the
//! servers (one part per server a request went to) and is then turned into
//! the client's reply: quiet replies dropped, binary opcodes given back,
//! a multi-key get merged in key order with one `END`, failures written as
//! `SERVER_ERROR <why>` (text) or status 0x0084 with the reason (binary).
//! Replies leave strictly in slot order.

use std::collections::{HashMap, VecDeque};
use std::io::{self, Write};

use crate::inbuf::InBuf;
use crate::reply;
use crate::request::{binary_reply, Quiet, Style, ST_INTERNAL};
use crate::stream::Stream;

/// How a slot's parts become the reply.
#[derive(Debug)]
pub enum Merge {
    /// One part, shown according to `Quiet`.
    Single(Quiet),
    /// A text multi-get: each key and the part it went to.
    MultiGet(Vec<(Vec<u8>, usize)>),
    /// The same request to every server: the first failure, else the
    /// first reply that is not a success, else the first reply.
    Broadcast(Quiet),
}

/// One request's reply: its parts as they come back, then the reply.
#[derive(Debug)]
pub struct Slot {
    style: Style,
    merge: Merge,
    parts: Vec<Option<Result<Vec<u8>, String>>>,
    left: usize,
    ready: Option<Vec<u8>>,
}

/// One client.
#[derive(Debug)]
pub struct Client {
    /// The connection.
    pub stream: Stream,
    /// The pool whose listener accepted it.
    pub pool: usize,
    /// Generation, so replies for a closed client's slot are dropped.
    pub id: u64,
    /// `Some(true)` once the first byte said binary.
    pub binary: Option<bool>,
    /// Bytes read and not yet framed.
    pub inbuf: InBuf,
    out: Vec<u8>,
    slots: VecDeque<Slot>,
    first_seq: u64,
    /// No more requests are read (quit, EOF, framing error).
    pub closing: bool,
    /// `quit` (or a framing error) seen: what follows is dropped.
    pub quit: bool,
    /// The client ended the connection (end of stream, `quit`): its close
    /// counts as `client_eof`, any other as `client_err`.
    pub eof: bool,
    /// Requests parked by a warm move: none of the client's later
    /// requests is sent before they are (its order is kept).
    pub parked: usize,
}

impl Client {
    /// A client on `stream`, of pool `pool`, with generation `id`.
    pub fn new(stream: Stream, pool: usize, id: u64) -> Client {
        Client {
            stream,
            pool,
            id,
            binary: None,
            inbuf: InBuf::default(),
            out: Vec::new(),
            slots: VecDeque::new(),
            first_seq: 0,
            closing: false,
            quit: false,
            eof: false,
            parked: 0,
        }
    }

    /// Requests waiting for replies.
    pub fn waiting(&self) -> usize {
        self.slots.len()
    }

    /// A slot already answered.
    pub fn push_ready(&mut self, bytes: Vec<u8>) {
        self.slots.push_back(Slot {
            style: Style::Text,
            merge: Merge::Single(Quiet::No),
            parts: Vec::new(),
            left: 0,
            ready: Some(bytes),
        });
    }

    /// A slot waiting for `parts` replies; its sequence number.
    pub fn push_waiting(&mut self, style: Style, merge: Merge, parts: usize) -> u64 {
        // A single reply is finished as it comes (see `deliver`): no parts.
        let kept = if matches!(merge, Merge::Single(_)) {
            0
        } else {
            parts
        };
        self.slots.push_back(Slot {
            style,
            merge,
            parts: (0..kept).map(|_| None).collect(),
            left: parts,
            ready: None,
        });
        self.first_seq + self.slots.len() as u64 - 1
    }

    /// Part `part` of slot `seq` came back. `true` when this finished the
    /// slot with an error reply (nutcracker's `forward_error`).
    pub fn deliver(&mut self, seq: u64, part: usize, result: Result<Vec<u8>, String>) -> bool {
        let Some(i) = seq.checked_sub(self.first_seq) else {
            return false;
        };
        let Some(slot) = self.slots.get_mut(i as usize) else {
            return false;
        };
        if let Merge::Single(quiet) = slot.merge {
            if slot.ready.is_some() {
                return false;
            }
            slot.left = 0;
            let (bytes, failed) = single(slot.style, quiet, result);
            slot.ready = Some(bytes);
            return failed;
        }
        if slot.parts[part].is_some() {
            return false;
        }
        slot.parts[part] = Some(result);
        slot.left -= 1;
        if slot.left > 0 {
            return false;
        }
        let (bytes, failed) = finish(slot);
        slot.ready = Some(bytes);
        failed
    }

    /// Moves the answered slots at the front to the output and writes what
    /// the socket takes. `Err` when the client is gone.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.slots.front().is_some_and(|s| s.ready.is_some()) {
            let slot = self.slots.pop_front().unwrap();
            self.first_seq += 1;
            self.out.extend_from_slice(&slot.ready.unwrap());
        }
        let mut written = 0;
        while written < self.out.len() {
            match self.stream.write(&self.out[written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.out.drain(..written);
        // TLS records the socket did not take go when it is writable again.
        match self.stream.flush() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(()),
        }
    }

    /// Whether everything owed has been written (a TLS stream's records
    /// too).
    pub fn drained(&self) -> bool {
        self.slots.is_empty() && self.out.is_empty() && !self.stream.unsent()
    }

    /// Unsent output, to hold back reading from a client that does not read.
    pub fn backlog(&self) -> usize {
        self.out.len()
    }

    /// The unsent output, taken (an upgrade hands it over).
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Output to send before any reply (an upgrade's carried output).
    pub fn set_output(&mut self, out: Vec<u8>) {
        self.out = out;
    }

    /// Reads what the socket has (to its end when `to_end`, see
    /// [`InBuf::fill`]); `Ok(false)` at end of stream.
    pub fn read(&mut self, to_end: bool) -> io::Result<bool> {
        self.inbuf.fill(&mut self.stream, to_end)
    }
}

/// A failure as the client's protocol says it.
pub fn error_reply(style: Style, why: &str) -> Vec<u8> {
    match style {
        Style::Text => format!("SERVER_ERROR {why}\r\n").into_bytes(),
        Style::Binary { opcode, opaque } => {
            binary_reply(opcode, opaque, ST_INTERNAL, why.as_bytes())
        }
    }
}

/// Applies what the client asked not to see to one reply.
fn shown(quiet: Quiet, mut bytes: Vec<u8>) -> Vec<u8> {
    match quiet {
        Quiet::No => bytes,
        Quiet::All => Vec::new(),
        Quiet::Meta(hidden) => {
            let code = bytes.get(..2).unwrap_or(&[]);
            let after = bytes.get(2).copied();
            if hidden.contains(&code) && matches!(after, Some(b' ' | b'\r' | b'\n')) {
                Vec::new()
            } else {
                bytes
            }
        }
        Quiet::Binary {
            opcode,
            hidden_status,
        } => {
            if bytes.len() >= 24 {
                let status = u16::from_be_bytes([bytes[6], bytes[7]]);
                if status == hidden_status {
                    return Vec::new();
                }
                bytes[1] = opcode;
            }
            bytes
        }
    }
}

/// A broadcast's (`flush_all`) part that succeeded: `OK`, binary status 0.
fn is_success(bytes: &[u8]) -> bool {
    osmium_protocol::client::reply::outcome(bytes) == osmium_protocol::client::reply::Outcome::Done
}

/// The reply of a one-part slot, and whether it is an error reply.
fn single(style: Style, quiet: Quiet, result: Result<Vec<u8>, String>) -> (Vec<u8>, bool) {
    match result {
        Ok(bytes) => (shown(quiet, bytes), false),
        Err(_) if quiet == Quiet::All => (Vec::new(), false),
        Err(why) => (error_reply(style, &why), true),
    }
}

/// The reply of a slot of several parts, all come back, and whether it is
/// an error reply.
fn finish(slot: &mut Slot) -> (Vec<u8>, bool) {
    let parts: Vec<Result<Vec<u8>, String>> =
        slot.parts.iter_mut().map(|p| p.take().unwrap()).collect();
    if let Some(Err(why)) = parts.iter().find(|p| p.is_err()) {
        return match slot.merge {
            Merge::Single(Quiet::All) | Merge::Broadcast(Quiet::All) => (Vec::new(), false),
            _ => (error_reply(slot.style, why), true),
        };
    }
    (
        merged(slot, parts.into_iter().map(Result::unwrap).collect()),
        false,
    )
}

/// The reply of a slot whose parts all came back without failure.
fn merged(slot: &Slot, mut parts: Vec<Vec<u8>>) -> Vec<u8> {
    match &slot.merge {
        Merge::Single(quiet) => shown(*quiet, parts.pop().unwrap_or_default()),
        Merge::Broadcast(quiet) => {
            let pick = parts.iter().position(|p| !is_success(p)).unwrap_or(0);
            shown(*quiet, parts.swap_remove(pick))
        }
        Merge::MultiGet(keys) => {
            let mut found = Vec::with_capacity(parts.len());
            for p in &parts {
                match reply::values(p) {
                    Some(v) => found.push(v.into_iter().collect::<HashMap<_, _>>()),
                    None => return p.clone(),
                }
            }
            let mut out = Vec::new();
            for (key, part) in keys {
                if let Some(block) = found[*part].get(key.as_slice()) {
                    out.extend_from_slice(block);
                }
            }
            osmium_protocol::encode::line(&mut out, b"END");
            out
        }
    }
}
