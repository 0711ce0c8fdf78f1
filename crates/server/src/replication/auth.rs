//! Who a connection is to replication, on the accepting end: what its
//! TLS session showed (a certificate named by `replication_peers` /
//! `replication_ca`, the exporter value a handshake inside it is bound
//! to) and the listener's side of the link handshake (`replica_hello`).
//! The handshake itself (Noise with the secret's PSK, the roles, the
//! instance ids, the frames after it) is `osmium_protocol::replication_link`,
//! shared with osmium-proxy; the secret and the failure count live in
//! `Replication`.
//!
//! ```text
//!   replica_hello <role> <message 1>   no secret here: ERROR (an unknown command)
//!                                      under -Z with replication_peers/replication_ca, a
//!                                        certificate not named by them: closed, counted
//!                                      message 1 does not prove the secret, or carries this
//!                                        server's own instance id: closed, counted, logged
//!                                      else REPLICA_HELLO <message 2>: the connection is
//!                                        a peer of that role (`rights`); on plain TCP every
//!                                        byte after the answer is a Noise frame
//!                                        (`transport::noise`)
//! ```
//!
//! The connection's state lives with it (`PeerAuth`, kept by the
//! worker's `Conn` and lent to the executor while the connection runs).

use osmium_protocol::replication_link::{self, Refusal, Role, Transport};

pub(crate) use osmium_protocol::replication_link::Secret;

/// What a connection showed, besides its commands.
#[derive(Default)]
pub(crate) struct PeerAuth {
    /// The TLS session was looked at (once, when established).
    tls_checked: bool,
    /// Its TLS client certificate is named by `replication_peers` or was
    /// issued by `replication_ca`.
    cert_named: bool,
    /// The TLS exporter value a handshake inside this session is bound
    /// to (with a secret, under `-Z`).
    tls_binding: Option<Box<[u8; 32]>>,
}

impl PeerAuth {
    /// Whether the TLS session was looked at.
    pub(crate) fn tls_checked(&self) -> bool {
        self.tls_checked
    }

    /// The transport looked at the established TLS session.
    pub(crate) fn set_tls(&mut self, cert_named: bool, binding: Option<[u8; 32]>) {
        self.tls_checked = true;
        self.cert_named = cert_named;
        self.tls_binding = binding.map(Box::new);
    }

    /// Whether its client certificate names a replication peer.
    pub(crate) fn cert_named(&self) -> bool {
        self.cert_named
    }

    /// Whether it runs in TLS (a handshake in it is bound to the session).
    pub(crate) fn in_tls(&self) -> bool {
        self.tls_binding.is_some()
    }
}

/// A `replica_hello` that succeeded.
pub(crate) struct Hello {
    pub role: Role,
    /// `REPLICA_HELLO <message 2>`, without `\r\n`.
    pub answer: String,
    /// The keys of the frames that follow on plain TCP (unused in TLS).
    pub transport: Transport,
}

/// Why a `replica_hello` failed (the connection is closed, nothing
/// answered).
pub(crate) enum HelloRefused {
    Handshake(Refusal),
    /// Its certificate is not one `replication_peers` / `replication_ca`
    /// names.
    CertNotNamed,
}

impl std::fmt::Display for HelloRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HelloRefused::Handshake(r) => write!(f, "{r}"),
            HelloRefused::CertNotNamed => f.write_str(
                "a replica_hello on a TLS connection whose certificate replication_peers / \
                 replication_ca does not name",
            ),
        }
    }
}

/// The listener's side of `replica_hello <role> <hex>`; `names_required`:
/// under `-Z` with `replication_peers` / `replication_ca`, only a named
/// certificate may be a peer.
pub(crate) fn hello(
    auth: &PeerAuth,
    secret: &Secret,
    role: &[u8],
    hex: &[u8],
    names_required: bool,
) -> Result<Hello, HelloRefused> {
    if names_required && auth.in_tls() && !auth.cert_named {
        return Err(HelloRefused::CertNotNamed);
    }
    let binding = auth.tls_binding.as_deref().map(|b| &b[..]);
    let (role, answer, transport) =
        replication_link::respond(secret, role, hex, binding).map_err(HelloRefused::Handshake)?;
    Ok(Hello {
        role,
        answer,
        transport,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use osmium_protocol::replication_link::Initiator;

    const SECRET: &[u8] = b"00112233445566778899aabbccddeeff";

    fn args(line: &str) -> (String, String) {
        let w: Vec<&str> = line.trim_end().split(' ').collect();
        (w[1].to_string(), w[2].to_string())
    }

    #[test]
    fn a_hello_in_this_process_is_refused_as_reflected() {
        // Both ends in one process share its instance id: the reflection
        // case (a server's own link brought back to its listener).
        let s = Secret::new(SECRET).unwrap();
        let (_, line) = Initiator::start(&s, Role::TargetLink, None).unwrap();
        let (role, hex) = args(&line);
        let auth = PeerAuth::default();
        match hello(&auth, &s, role.as_bytes(), hex.as_bytes(), false) {
            Err(HelloRefused::Handshake(Refusal::Reflected)) => {}
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted its own hello"),
        }
    }

    #[test]
    fn under_tls_the_session_and_the_certificate_count() {
        let s = Secret::new(SECRET).unwrap();
        let (_, line) = Initiator::start(&s, Role::FollowLink, Some(&[1; 32])).unwrap();
        let (role, hex) = args(&line);
        let mut auth = PeerAuth::default();
        auth.set_tls(false, Some([2; 32]));
        assert!(auth.tls_checked() && auth.in_tls() && !auth.cert_named());
        assert!(matches!(
            hello(&auth, &s, role.as_bytes(), hex.as_bytes(), true),
            Err(HelloRefused::CertNotNamed)
        ));
        // Another session's exporter value: message 1 does not open.
        assert!(matches!(
            hello(&auth, &s, role.as_bytes(), hex.as_bytes(), false),
            Err(HelloRefused::Handshake(Refusal::WrongSecret))
        ));
    }
}
