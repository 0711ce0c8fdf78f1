//! Who may use a replication link: both ends prove they hold the shared
//! secret of `--replication-secret FILE`, without sending it. The exchange
//! itself (nonces, HMAC-SHA256 proofs, the connecting end's side, the
//! file's rules) is `osmium_protocol::replication_auth`, shared with
//! osmium-proxy, which proves itself a peer the same way; re-exported here.
//!
//! ```text
//!   connecting end (link, pull, proxy)               server
//!   replica_auth <cn>                  ──────────▶   REPLICA_CHALLENGE <sn> <server's proof>
//!   checks the server's proof, then
//!   replica_proof <its proof>          ──────────▶   checks it (constant time): OK, the
//!                                                    connection is a peer; else ERROR,
//!                                                    the challenge forgotten, one line on
//!                                                    stderr, `replica_auth_failures` + 1
//!   then replica_link <name> / replica_follow <seconds> as before
//! ```
//!
//! A private replication command (`replica_link`, `replica_follow`,
//! `replica_synced`, `replica_targets`) runs only on a connection that
//! proved it is a peer (`Replication::is_peer`: with `-Z` a TLS client
//! certificate verified against `ssl_ca_cert`, which the transport
//! records with `PeerAuth::set_cert_verified`, and the exchange too if
//! there is a secret; without `-Z` the exchange); anywhere else it is
//! answered `ERROR`, as memcached answers a command it does not know. A
//! server without a secret answers `replica_auth` so too.
//!
//! What this does not do alone: without `-Z` the stream after the
//! exchange is plain text. An attacker on the path can read it, or relay
//! an exchange between two servers and then alter what passes; on a
//! network that is not trusted run the servers with `-Z` (the links are
//! then TLS, the exchange inside it).
//!
//! The state of an exchange lives with its connection (`PeerAuth`, kept by
//! the worker's `Conn` and lent to the executor while the connection
//! runs); the secret and the failure count live in `Replication`.

use std::io;

pub use osmium_protocol::replication_auth::{
    client_handshake, read_line, Proof, Responder, Secret,
};

/// One connection's side of the exchange (the server's), and what else
/// vouches for it.
#[derive(Default)]
pub struct PeerAuth {
    exchange: Responder,
    /// It proved it holds the secret.
    proven: bool,
    /// Its TLS client certificate verified against `ssl_ca_cert`.
    cert: bool,
    /// This server's own follow link (it verified the other end).
    own: bool,
}

impl PeerAuth {
    /// Whether the connection proved it holds the secret.
    pub fn proved_secret(&self) -> bool {
        self.proven
    }

    /// Whether its TLS client certificate verified against `ssl_ca_cert`.
    pub fn cert_verified(&self) -> bool {
        self.cert
    }

    /// Whether it is the pulled end of this server's own follow link.
    pub fn is_own_link(&self) -> bool {
        self.own
    }

    /// The transport verified the connection's TLS client certificate.
    pub fn set_cert_verified(&mut self) {
        self.cert = true;
    }

    /// This server opened the connection itself, to a target it verified
    /// (`replication::pull`).
    pub fn set_own_link(&mut self) {
        self.own = true;
    }

    /// `replica_auth <client nonce>`: the `REPLICA_CHALLENGE` line to
    /// answer (any earlier challenge is replaced); None for a malformed
    /// nonce (and no challenge is kept).
    pub fn challenge(&mut self, secret: &Secret, client_hex: &[u8]) -> io::Result<Option<String>> {
        self.exchange.challenge(secret, client_hex)
    }

    /// `replica_proof <hmac>`: checks it against the pending challenge,
    /// which is used up whatever the outcome.
    pub fn prove(&mut self, secret: &Secret, proof_hex: &[u8]) -> Proof {
        let p = self.exchange.prove(secret, proof_hex);
        if p == Proof::Accepted {
            self.proven = true;
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a connecting end sends, through a scripted server that runs
    /// a `PeerAuth` (the exchange's own tests are in osmium-protocol).
    struct Server<'a> {
        secret: &'a Secret,
        auth: PeerAuth,
        sent: Vec<u8>,
        answers: std::collections::VecDeque<u8>,
    }

    impl io::Read for Server<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            match self.answers.pop_front() {
                Some(b) => {
                    buf[0] = b;
                    Ok(1)
                }
                None => Ok(0),
            }
        }
    }

    impl io::Write for Server<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.sent.extend_from_slice(buf);
            while let Some(end) = self.sent.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.sent.drain(..=end).collect();
                let line = std::str::from_utf8(&line).unwrap().trim_end();
                let (cmd, arg) = line.split_once(' ').unwrap();
                let reply = match cmd {
                    "replica_auth" => self
                        .auth
                        .challenge(self.secret, arg.as_bytes())
                        .unwrap()
                        .unwrap(),
                    _ => match self.auth.prove(self.secret, arg.as_bytes()) {
                        Proof::Accepted => "OK".into(),
                        _ => "ERROR".into(),
                    },
                };
                self.answers.extend(reply.bytes().chain(*b"\r\n"));
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_proof_makes_the_connection_a_proved_peer() {
        let s = Secret::new(b"shared");
        let mut server = Server {
            secret: &s,
            auth: PeerAuth::default(),
            sent: Vec::new(),
            answers: Default::default(),
        };
        assert_eq!(server.auth.prove(&s, b"00"), Proof::NoChallenge);
        assert!(!server.auth.proved_secret());
        client_handshake(&mut server, &s).unwrap();
        assert!(server.auth.proved_secret());

        let other = Secret::new(b"other");
        let mut refused = Server {
            secret: &s,
            auth: PeerAuth::default(),
            sent: Vec::new(),
            answers: Default::default(),
        };
        let e = client_handshake(&mut refused, &other).unwrap_err();
        assert!(e.is_auth_failure(), "{e}");
        assert!(!refused.auth.proved_secret());

        let mut c = PeerAuth::default();
        c.set_cert_verified();
        assert!(c.cert_verified() && !c.proved_secret() && !c.is_own_link());
        c.set_own_link();
        assert!(c.is_own_link());
    }
}
