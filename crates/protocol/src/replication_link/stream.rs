//! A blocking `Read + Write` stream of Noise transport frames over a
//! socket (`frame`): what a link carries after its handshake on plain
//! TCP. osmium-proxy's peer connections use it as it is; the server's
//! links split it into their sending and receiving threads (`into_parts`).

use std::io::{self, Read, Write};

use super::frame::{Inbound, Outbound, Transport};

/// Frames over `S`: every byte written is sealed, every byte read was
/// opened (a frame that fails to open is an `InvalidData` error, for
/// good).
pub struct NoiseStream<S> {
    sock: S,
    outbound: Outbound,
    inbound: Inbound,
}

impl<S: Read + Write> NoiseStream<S> {
    /// A stream over `sock`, sealing and opening with the keys of a finished
    /// handshake.
    pub fn new(sock: S, transport: Transport) -> NoiseStream<S> {
        let (outbound, inbound) = transport.split();
        NoiseStream {
            sock,
            outbound,
            inbound,
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &S {
        &self.sock
    }

    /// The socket and both directions' state (plaintext already opened
    /// stays in the inbound one).
    pub fn into_parts(self) -> (S, Outbound, Inbound) {
        (self.sock, self.outbound, self.inbound)
    }
}

impl<S: Read + Write> Read for NoiseStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inbound.read_from(&mut self.sock, buf)
    }
}

impl<S: Read + Write> Write for NoiseStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.outbound.seal(buf)?;
        self.outbound.flush_to(&mut self.sock)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.outbound.flush_to(&mut self.sock)?;
        self.sock.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication_link::handshake::respond_as;
    use crate::replication_link::handshake::tests::SECRET;
    use crate::replication_link::{connect_handshake, Role, Secret};
    use std::io::{BufRead, BufReader};
    use std::net::{TcpListener, TcpStream};

    /// A listener's side over a real socket: the hello line, its answer,
    /// then an echo of lines in upper case.
    fn echo_server(listener: TcpListener) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let (sock, _) = listener.accept().unwrap();
            let mut r = BufReader::new(sock.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let w: Vec<&str> = line.trim_end().split(' ').collect();
            let s = Secret::new(SECRET).unwrap();
            // Another instance id than this process's: the connecting end
            // here refuses its own.
            let (role, answer, t) =
                respond_as(&s, w[1].as_bytes(), w[2].as_bytes(), None, &[7; 16]).unwrap();
            assert_eq!(role, Role::ProxyPeer);
            let mut sock = sock;
            sock.write_all(format!("{answer}\r\n").as_bytes()).unwrap();
            assert!(r.buffer().is_empty());
            let mut link = BufReader::new(NoiseStream::new(sock, t));
            let mut seen = Vec::new();
            loop {
                let mut l = Vec::new();
                if link.read_until(b'\n', &mut l).unwrap() == 0 {
                    return seen;
                }
                seen.extend_from_slice(&l);
                link.get_mut().write_all(&l.to_ascii_uppercase()).unwrap();
            }
        })
    }

    #[test]
    fn a_stream_over_a_socket_carries_lines_both_ways() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = echo_server(listener);
        let mut sock = TcpStream::connect(addr).unwrap();
        let s = Secret::new(SECRET).unwrap();
        let t = connect_handshake(&mut sock, &s, Role::ProxyPeer, None).unwrap();
        let mut link = BufReader::new(NoiseStream::new(sock, t));
        for msg in [
            "replica_targets 127.0.0.1:1\r\n",
            &"x".repeat(100_000),
            "\r\n",
        ] {
            link.get_mut().write_all(msg.as_bytes()).unwrap();
        }
        let mut l = String::new();
        link.read_line(&mut l).unwrap();
        assert_eq!(l, "REPLICA_TARGETS 127.0.0.1:1\r\n");
        l.clear();
        link.read_line(&mut l).unwrap();
        assert_eq!(l.len(), 100_002);
        drop(link);
        let seen = server.join().unwrap();
        assert!(seen.starts_with(b"replica_targets"));
    }
}
