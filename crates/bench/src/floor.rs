//! The `floor` server (issue 5): a memcached look-alike with no cache that
//! answers every get with the same value, to measure what the machine's
//! network stack costs by itself. One thread, one epoll loop (`mio`): it
//! reads everything a socket has, answers every complete request in it,
//! and sends all the answers with one write, so that with pipelining its
//! CPU time per request is the floor osmium is measured against.
//!
//! It speaks just enough of both protocols for the benchmarks:
//!
//! * text: `get`/`gets` with any number of keys (`VALUE <key> 0 <n>`, the
//!   value, `END`; `gets` adds a CAS of 1), `set`/`add`/`replace` (the data
//!   block is skipped, `STORED`; `noreply` honoured), `version`, and
//!   `ERROR` for anything else;
//! * meta: `mg <key> <flags>*` (`VA <n>` and the value when the flags ask
//!   for it with `v`, else `HD`), `ms <key> <n> <flags>*` (the data block
//!   is skipped, `HD`), `mn` (`MN`); flag `q` suppresses `HD`;
//! * binary (a first byte of 0x80): GET, GETQ, GETK, GETKQ (flags 0 and the
//!   value), SET and SETQ (no body), NOOP and VERSION; other opcodes get
//!   "unknown command".
//!
//! Nothing is stored and nothing is allocated per request: each connection
//! keeps one input and one output buffer.
//!
//! [`answer`] (the protocol part) is shared with the io_uring variant,
//! [`crate::floor_uring`], which differs only in its I/O loop.

use std::io::{self, Read, Write};
use std::net::SocketAddr;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use osmium_protocol::client::frame::BinaryHead;
use osmium_protocol::encode;

const LISTENER: Token = Token(usize::MAX);
/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 * 1024;

struct Conn {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Bytes of `output` already written.
    sent: usize,
    /// The client shut its side: close once the output is out.
    eof: bool,
    /// An event said the client shut its side (EPOLLRDHUP) or failed.
    peer_closed: bool,
    /// Registered for writability too (only while output waits).
    writable: bool,
}

/// Runs the floor server on `addr` (port 0: any free port), printing
/// `listening on <addr>` once bound; never returns unless it fails.
pub(crate) fn run(addr: SocketAddr, value_size: usize) -> Result<(), String> {
    let value = vec![b'x'; value_size];
    let listener = listen(addr)?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new().map_err(|e| e.to_string())?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(|e| e.to_string())?;
    let mut conns: slab::Slab<Conn> = slab::Slab::new();
    let mut events = Events::with_capacity(256);
    let mut scratch = vec![0u8; READ_CHUNK];
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("floor: poll: {e}"));
        }
        for event in events.iter() {
            if event.token() == LISTENER {
                accept(&poll, &listener, &mut conns);
                continue;
            }
            let id = event.token().0;
            let Some(conn) = conns.get_mut(id) else {
                continue;
            };
            if event.is_read_closed() || event.is_error() {
                conn.peer_closed = true;
            }
            if serve(&poll, Token(id), conn, &value, &mut scratch).is_err() {
                let mut conn = conns.remove(id);
                poll.registry().deregister(&mut conn.stream).ok();
            }
        }
    }
}

/// Binds `addr` and prints `listening on <addr>` (the bound address): the
/// listener of both floors.
pub(crate) fn listen(addr: SocketAddr) -> Result<std::net::TcpListener, String> {
    let listener =
        std::net::TcpListener::bind(addr).map_err(|e| format!("floor: bind {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {local}");
    io::stdout().flush().ok();
    Ok(listener)
}

fn accept(poll: &Poll, listener: &TcpListener, conns: &mut slab::Slab<Conn>) {
    loop {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream.set_nodelay(true).ok();
                let entry = conns.vacant_entry();
                let token = Token(entry.key());
                if poll
                    .registry()
                    .register(&mut stream, token, Interest::READABLE)
                    .is_ok()
                {
                    entry.insert(Conn {
                        stream,
                        input: Vec::with_capacity(READ_CHUNK),
                        output: Vec::with_capacity(READ_CHUNK),
                        sent: 0,
                        writable: false,
                        eof: false,
                        peer_closed: false,
                    });
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(_) => return,
        }
    }
}

/// Reads what the socket has, answers the complete requests, writes.
/// Err when the connection is done (closed or failed).
///
/// A read that returns less than the buffer has emptied the socket: data
/// arriving after it raises a new (edge-triggered) event, so there is no
/// second read to see `EAGAIN`. One request costs one `epoll_wait`, one
/// `read` and one `write`.
fn serve(
    poll: &Poll,
    token: Token,
    conn: &mut Conn,
    value: &[u8],
    scratch: &mut [u8],
) -> io::Result<()> {
    while !conn.eof {
        match conn.stream.read(scratch) {
            // The client is done sending; what it asked for is still
            // answered and sent before the connection closes.
            Ok(0) => conn.eof = true,
            Ok(n) => {
                conn.input.extend_from_slice(&scratch[..n]);
                // Not after the peer closed: its FIN may have come with
                // this data, and no new event would report it.
                if n < scratch.len() && !conn.peer_closed {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let used = answer(&conn.input, value, &mut conn.output);
    conn.input.drain(..used);
    let done = flush(conn)?;
    if done && conn.eof {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    // Ask for writability only while output waits.
    if done == conn.writable {
        conn.writable = !done;
        let interest = if done {
            Interest::READABLE
        } else {
            Interest::READABLE | Interest::WRITABLE
        };
        poll.registry()
            .reregister(&mut conn.stream, token, interest)?;
    }
    Ok(())
}

/// Writes pending output (all the answers of a batch in one `write`);
/// true when nothing is left.
fn flush(conn: &mut Conn) -> io::Result<bool> {
    while conn.sent < conn.output.len() {
        match conn.stream.write(&conn.output[conn.sent..]) {
            Ok(n) => conn.sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    conn.output.clear();
    conn.sent = 0;
    Ok(true)
}

/// The length of a storage command's data block, from its word.
fn data_len(word: Option<&[u8]>) -> Option<usize> {
    std::str::from_utf8(word?).ok()?.parse().ok()
}

/// Appends the answers to every complete request at the start of `input`
/// to `out`; returns how many bytes of `input` they used.
pub(crate) fn answer(input: &[u8], value: &[u8], out: &mut Vec<u8>) -> usize {
    let mut at = 0;
    while at < input.len() {
        let used = if input[at] == 0x80 {
            binary(&input[at..], value, out)
        } else {
            text(&input[at..], value, out)
        };
        match used {
            Some(n) => at += n,
            None => break,
        }
    }
    at
}

/// One text request: Some(bytes used) or None if incomplete.
fn text(input: &[u8], value: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let end = memchr::memchr(b'\n', input)?;
    let line = input[..end].strip_suffix(b"\r").unwrap_or(&input[..end]);
    let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
    let used = end + 1;
    match words.next() {
        Some(cmd @ (b"get" | b"gets")) => {
            let cas = cmd == b"gets";
            for key in words {
                encode::value_header(out, key, 0, value.len(), cas.then_some(1));
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"END\r\n");
            Some(used)
        }
        Some(b"set" | b"add" | b"replace") => {
            // <key> <flags> <exptime> <bytes> [noreply]
            let Some(bytes) = data_len(words.nth(3)) else {
                out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                return Some(used);
            };
            if input.len() < used + bytes + 2 {
                return None;
            }
            if words.next() != Some(&b"noreply"[..]) {
                out.extend_from_slice(b"STORED\r\n");
            }
            Some(used + bytes + 2)
        }
        Some(b"mg") => {
            // mg <key> <flags>*: every key is a hit.
            let mut with_value = false;
            let mut quiet = false;
            for flag in words.skip(1) {
                with_value |= flag[0] == b'v';
                quiet |= flag[0] == b'q';
            }
            if with_value {
                out.extend_from_slice(b"VA ");
                out.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            } else if !quiet {
                out.extend_from_slice(b"HD\r\n");
            }
            Some(used)
        }
        Some(b"ms") => {
            // ms <key> <datalen> <flags>*
            let Some(bytes) = data_len(words.nth(1)) else {
                out.extend_from_slice(b"CLIENT_ERROR bad command line format\r\n");
                return Some(used);
            };
            if input.len() < used + bytes + 2 {
                return None;
            }
            if !words.any(|flag| flag[0] == b'q') {
                out.extend_from_slice(b"HD\r\n");
            }
            Some(used + bytes + 2)
        }
        Some(b"mn") => {
            out.extend_from_slice(b"MN\r\n");
            Some(used)
        }
        Some(b"version") => {
            out.extend_from_slice(b"VERSION floor\r\n");
            Some(used)
        }
        _ => {
            out.extend_from_slice(b"ERROR\r\n");
            Some(used)
        }
    }
}

/// One binary request: Some(bytes used) or None if incomplete.
fn binary(input: &[u8], value: &[u8], out: &mut Vec<u8>) -> Option<usize> {
    let head = BinaryHead::parse(input)?;
    let (opcode, body) = (head.opcode, head.body);
    let opaque = &input[12..16];
    if input.len() < head.packet_len() {
        return None;
    }
    let key = input.get(head.key_range()).unwrap_or(&[]);
    let header = |out: &mut Vec<u8>, status: u16, extras: usize, key: &[u8], body: usize| {
        out.extend_from_slice(&[0x81, opcode]);
        out.extend_from_slice(&(key.len() as u16).to_be_bytes());
        out.extend_from_slice(&[extras as u8, 0]);
        out.extend_from_slice(&status.to_be_bytes());
        out.extend_from_slice(&((extras + key.len() + body) as u32).to_be_bytes());
        out.extend_from_slice(opaque);
        out.extend_from_slice(&1u64.to_be_bytes());
    };
    match opcode {
        // GET, GETQ, GETK, GETKQ: flags 0, the value (with the key for K).
        0x00 | 0x09 | 0x0c | 0x0d => {
            let key = if matches!(opcode, 0x0c | 0x0d) {
                key
            } else {
                &[]
            };
            header(out, 0, 4, key, value.len());
            out.extend_from_slice(&[0; 4]);
            out.extend_from_slice(key);
            out.extend_from_slice(value);
        }
        // SET (SETQ answers nothing).
        0x01 => header(out, 0, 0, &[], 0),
        0x11 => {}
        // NOOP.
        0x0a => header(out, 0, 0, &[], 0),
        // VERSION.
        0x0b => {
            header(out, 0, 0, &[], 5);
            out.extend_from_slice(b"floor");
        }
        _ => {
            let msg = b"Unknown command";
            header(out, 0x81, 0, &[], msg.len());
            out.extend_from_slice(msg);
        }
    }
    Some(24 + body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_pipelined_text_requests_and_waits_for_the_rest() {
        let mut out = Vec::new();
        let input = b"get a bb\r\nset k 0 0 3\r\nabc\r\ngets c\r\nbogus\r\nget partial";
        let used = answer(input, b"vv", &mut out);
        assert_eq!(&input[used..], b"get partial");
        assert_eq!(
            out,
            b"VALUE a 0 2\r\nvv\r\nVALUE bb 0 2\r\nvv\r\nEND\r\nSTORED\r\nVALUE c 0 2 1\r\nvv\r\nEND\r\nERROR\r\n"
        );
        // A set whose data has not all arrived waits.
        out.clear();
        assert_eq!(answer(b"set k 0 0 3\r\nab", b"vv", &mut out), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn answers_meta_commands() {
        let mut out = Vec::new();
        let input = b"mg a v\r\nmg b\r\nmg c k v t\r\nms d 3 T0\r\nabc\r\nms e 2 q\r\nxy\r\nmg f q\r\nmn\r\nms g 5\r\nab";
        let used = answer(input, b"vv", &mut out);
        assert_eq!(&input[used..], b"ms g 5\r\nab");
        assert_eq!(out, b"VA 2\r\nvv\r\nHD\r\nVA 2\r\nvv\r\nHD\r\nMN\r\n");
    }

    #[test]
    fn answers_binary_gets_with_the_value() {
        let mut req = vec![
            0x80, 0x0c, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef,
        ];
        req.extend_from_slice(&[0; 8]);
        req.push(b'k');
        let mut out = Vec::new();
        assert_eq!(answer(&req, b"vvv", &mut out), req.len());
        assert_eq!(out.len(), 24 + 4 + 1 + 3);
        assert_eq!(&out[..2], &[0x81, 0x0c]);
        assert_eq!(&out[8..12], &8u32.to_be_bytes());
        assert_eq!(&out[12..16], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&out[24..], b"\0\0\0\0kvvv");
        // Half a header waits.
        out.clear();
        assert_eq!(answer(&req[..10], b"vvv", &mut out), 0);
    }
}

// The options of `floor`.
#[derive(clap::Args)]
pub(crate) struct FloorArgs {
    /// TCP port on 127.0.0.1 (0: any free port; the bound address is
    /// printed as `listening on <addr>`).
    #[arg(short = 'p', long, default_value_t = 0)]
    pub port: u16,
    /// Bytes of the value every get returns.
    #[arg(long, default_value_t = 64)]
    pub value_size: usize,
    /// An io_uring loop instead of epoll (same answers).
    #[arg(long)]
    pub io_uring: bool,
    /// With --io-uring: a kernel thread polls the submission queue
    /// (IORING_SETUP_SQPOLL; it burns a core while busy).
    #[arg(long, requires = "io_uring")]
    pub sqpoll: bool,
    /// With --io-uring: one multishot recv per connection into a provided
    /// buffer ring instead of a recv per read.
    #[arg(long, requires = "io_uring")]
    pub recv_multishot: bool,
}
