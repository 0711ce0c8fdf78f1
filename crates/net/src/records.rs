//! The rustls record loop between a session and its socket: records out
//! ([`send_records`], until none is left or the socket is full) and
//! records in ([`take_records`], one socket read decrypted). Every
//! stream adapter of the workspace goes through these two.

use std::io::{self, Read, Write};

use rustls::Connection;

/// Sends the records `conn` holds to `sock`. Ok(true): none left;
/// Ok(false): the socket is full (`WouldBlock`) and the rest waits in
/// rustls. A socket that takes nothing is `WriteZero`.
pub fn send_records<S: Write>(conn: &mut Connection, sock: &mut S) -> io::Result<bool> {
    while conn.wants_write() {
        match conn.write_tls(sock) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// What one read of records from the socket came to.
#[derive(Debug)]
pub enum Taken {
    /// Records were read and decrypted.
    Records,
    /// The socket had nothing (`WouldBlock`).
    Nothing,
    /// The socket reached its end.
    End,
    /// The records did not decrypt or the handshake failed
    /// (`handshaking` says which); rustls queued its alert.
    Failed {
        /// The session was still handshaking.
        handshaking: bool,
        /// rustls's reason.
        error: rustls::Error,
    },
}

/// Reads records from `sock` into `conn` once and decrypts them. Socket
/// errors other than `WouldBlock` are Err.
pub fn take_records<S: Read>(conn: &mut Connection, sock: &mut S) -> io::Result<Taken> {
    loop {
        match conn.read_tls(sock) {
            Ok(0) => return Ok(Taken::End),
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Taken::Nothing),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let handshaking = conn.is_handshaking();
    match conn.process_new_packets() {
        Ok(_) => Ok(Taken::Records),
        Err(error) => Ok(Taken::Failed { handshaking, error }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes `room` bytes, then would block.
    struct Full {
        room: usize,
        got: Vec<u8>,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn client() -> Connection {
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
        let name = rustls_pki_types::ServerName::try_from("example.net").unwrap();
        rustls::ClientConnection::new(std::sync::Arc::new(config), name)
            .unwrap()
            .into()
    }

    #[test]
    fn a_full_socket_keeps_the_rest_in_rustls() {
        let mut conn = client();
        let mut sock = Full {
            room: 10,
            got: Vec::new(),
        };
        assert!(!send_records(&mut conn, &mut sock).unwrap());
        assert_eq!(sock.got.len(), 10);
        assert!(conn.wants_write(), "the rest of the ClientHello waits");
        sock.room = usize::MAX;
        assert!(send_records(&mut conn, &mut sock).unwrap());
        assert!(!conn.wants_write());
        assert_eq!(sock.got[0], 0x16, "a handshake record");
    }

    #[test]
    fn a_socket_that_takes_nothing_is_an_error() {
        struct Zero;
        impl Write for Zero {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Ok(0)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let e = send_records(&mut client(), &mut Zero).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
    }

    #[test]
    fn garbage_fails_the_handshake_and_the_end_is_seen() {
        let mut conn = client();
        let mut garbage: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
        match take_records(&mut conn, &mut garbage).unwrap() {
            Taken::Failed { handshaking, .. } => assert!(handshaking),
            other => panic!("{other:?}"),
        }
        let mut empty: &[u8] = b"";
        assert!(matches!(
            take_records(&mut client(), &mut empty).unwrap(),
            Taken::End
        ));
    }
}
