//! The link's handshake: `Noise_NNpsk0_25519_AESGCM_SHA256` with the
//! secret's PSK, its prologue (the role, the protocol's version, a TLS
//! session's exporter value), the instance ids in its payloads, and the
//! two lines that carry it (module comment of `replication_link`).
//!
//! ```text
//!   prologue := "osmium-replication-link/1 " ‖ role ‖ [" tls " ‖ exporter value (32 bytes)]
//!   message 1 (initiator): psk, e      payload: the initiator's instance id (16 bytes)
//!   message 2 (responder): e, ee       payload: the responder's instance id (16 bytes)
//! ```
//!
//! psk0: message 1's payload is encrypted under a key mixed from the PSK,
//! so a responder that opens it knows the initiator holds the secret
//! before it computes anything that shows it holds it too (message 2).
//! A responder that cannot open it, or finds its own instance id in it
//! (its own link reflected back to it), answers nothing.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};

use snow::params::NoiseParams;
use snow::{Builder, HandshakeState};

use super::frame::Transport;
use super::secret::{from_hex, random, read_line, to_hex, Secret};

/// The Noise protocol name.
pub const PATTERN: &str = "Noise_NNpsk0_25519_AESGCM_SHA256";
/// What the prologue starts with: the protocol and its version.
const PROLOGUE: &[u8] = b"osmium-replication-link/1 ";
/// The connecting end's line, before its role and message 1.
pub const HELLO: &str = "replica_hello";
/// The listener's answer, before message 2.
pub const HELLO_ANSWER: &str = "REPLICA_HELLO";
/// The TLS exporter label of the value that binds a handshake to its TLS
/// session (RFC 5705 / RFC 8446 7.5), 32 bytes, no context.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER-osmium-replication-link";
/// Bytes of an instance id.
pub const ID_LEN: usize = 16;
/// Bytes of a handshake message (an ephemeral key, the id, the tag).
const MESSAGE_LEN: usize = 32 + ID_LEN + 16;
/// The longest answer line read.
const MAX_LINE: usize = 512;

/// What a connection is for; bound into the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A server's link to its replication target (`replica_link`).
    TargetLink,
    /// A server's catch-up pull from its target (`replica_follow`).
    FollowLink,
    /// osmium-proxy's peer connection (`replica_targets`, deletes that
    /// are not replicated).
    ProxyPeer,
}

impl Role {
    /// The role's word on the wire and in the prologue.
    pub fn word(self) -> &'static str {
        match self {
            Role::TargetLink => "target",
            Role::FollowLink => "follow",
            Role::ProxyPeer => "proxy",
        }
    }

    /// The role a word names (see [`Role::word`]); None for any other bytes.
    pub fn from_word(w: &[u8]) -> Option<Role> {
        match w {
            b"target" => Some(Role::TargetLink),
            b"follow" => Some(Role::FollowLink),
            b"proxy" => Some(Role::ProxyPeer),
            _ => None,
        }
    }
}

/// This process's instance id: random, made once.
pub fn instance_id() -> &'static [u8; ID_LEN] {
    static ID: OnceLock<[u8; ID_LEN]> = OnceLock::new();
    ID.get_or_init(|| {
        let mut id = [0u8; ID_LEN];
        // Without random bytes no handshake can run either (its ephemeral
        // keys): a zero id then harms nothing.
        let _ = random(&mut id);
        id
    })
}

fn params() -> NoiseParams {
    PATTERN.parse().expect("a valid Noise protocol name")
}

fn prologue(role: Role, tls_binding: Option<&[u8]>) -> Vec<u8> {
    let mut p = PROLOGUE.to_vec();
    p.extend_from_slice(role.word().as_bytes());
    if let Some(b) = tls_binding {
        p.extend_from_slice(b" tls ");
        p.extend_from_slice(b);
    }
    p
}

fn builder<'a>(secret: &'a Secret, prologue: &'a [u8]) -> Builder<'a> {
    Builder::new(params())
        .psk(0, secret.psk())
        .prologue(prologue)
}

/// The connecting end between its hello and the answer.
pub struct Initiator {
    state: HandshakeState,
    own_id: [u8; ID_LEN],
}

/// Why the connecting end's handshake failed.
#[derive(Debug)]
pub enum HandshakeError {
    /// Reading or writing the socket failed.
    Io(std::io::Error),
    /// The listener answered something else (`ERROR`: no secret there,
    /// or not osmium).
    Refused(String),
    /// The listener closed the connection without an answer: it does not
    /// hold the same secret, or found its own instance id (its log and
    /// `replica_auth_failures` say which).
    Closed,
    /// The answer did not open: the other end does not hold the secret.
    BadAnswer,
    /// The answer carries this process's own id: the connection reached
    /// this process through a reflector.
    Reflected,
}

impl HandshakeError {
    /// Whether the other end was met and the proof failed either way.
    pub fn is_auth_failure(&self) -> bool {
        matches!(
            self,
            HandshakeError::Closed | HandshakeError::BadAnswer | HandshakeError::Reflected
        )
    }
}

impl From<std::io::Error> for HandshakeError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            return HandshakeError::Closed;
        }
        HandshakeError::Io(e)
    }
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "{e}"),
            HandshakeError::Refused(line) => write!(
                f,
                "it answered replica_hello with {line:?}: no --replication-secret there?"
            ),
            HandshakeError::Closed => write!(
                f,
                "it closed the connection at the handshake: not the same replication secret \
                 (or it took the connection for one of its own)"
            ),
            HandshakeError::BadAnswer => {
                write!(
                    f,
                    "its handshake answer failed: it does not hold the replication secret"
                )
            }
            HandshakeError::Reflected => write!(
                f,
                "the handshake came back from this process itself (a reflected link)"
            ),
        }
    }
}

impl From<HandshakeError> for std::io::Error {
    fn from(e: HandshakeError) -> std::io::Error {
        match e {
            HandshakeError::Io(e) => e,
            other => std::io::Error::new(std::io::ErrorKind::PermissionDenied, other.to_string()),
        }
    }
}

impl Initiator {
    /// Starts a handshake for `role`: the hello line to send (with its
    /// `\r\n`). `tls_binding`: the TLS exporter value when the link runs
    /// in TLS.
    pub fn start(
        secret: &Secret,
        role: Role,
        tls_binding: Option<&[u8]>,
    ) -> Result<(Initiator, String), HandshakeError> {
        Initiator::start_as(secret, role, tls_binding, instance_id())
    }

    fn start_as(
        secret: &Secret,
        role: Role,
        tls_binding: Option<&[u8]>,
        own_id: &[u8; ID_LEN],
    ) -> Result<(Initiator, String), HandshakeError> {
        let p = prologue(role, tls_binding);
        let mut state = builder(secret, &p)
            .build_initiator()
            .map_err(|e| HandshakeError::Io(std::io::Error::other(e)))?;
        let mut msg = [0u8; MESSAGE_LEN];
        let n = state
            .write_message(own_id, &mut msg)
            .map_err(|e| HandshakeError::Io(std::io::Error::other(e)))?;
        let line = format!("{HELLO} {} {}\r\n", role.word(), to_hex(&msg[..n]));
        Ok((
            Initiator {
                state,
                own_id: *own_id,
            },
            line,
        ))
    }

    /// Checks the listener's answer line (without `\r\n`): the transport
    /// on success.
    pub fn finish(mut self, answer: &str) -> Result<Transport, HandshakeError> {
        let mut words = answer.split(' ');
        let (Some(HELLO_ANSWER), Some(hex), None) = (words.next(), words.next(), words.next())
        else {
            return Err(HandshakeError::Refused(answer.chars().take(80).collect()));
        };
        let msg = from_hex(hex.as_bytes()).ok_or(HandshakeError::BadAnswer)?;
        let mut id = [0u8; MESSAGE_LEN];
        let n = self
            .state
            .read_message(&msg, &mut id)
            .map_err(|_| HandshakeError::BadAnswer)?;
        if n != ID_LEN {
            return Err(HandshakeError::BadAnswer);
        }
        if id[..ID_LEN] == self.own_id {
            return Err(HandshakeError::Reflected);
        }
        transport(self.state).map_err(|_| HandshakeError::BadAnswer)
    }
}

fn transport(state: HandshakeState) -> Result<Transport, snow::Error> {
    Ok(Transport(Arc::new(state.into_stateless_transport_mode()?)))
}

/// The connecting end's handshake on a blocking stream, right after
/// connecting (and after TLS, whose exporter value is `tls_binding`):
/// sends the hello, reads the answer byte by byte (nothing after it is
/// taken from the stream), checks it.
pub fn connect_handshake<S: Read + Write>(
    stream: &mut S,
    secret: &Secret,
    role: Role,
    tls_binding: Option<&[u8]>,
) -> Result<Transport, HandshakeError> {
    let (initiator, hello) = Initiator::start(secret, role, tls_binding)?;
    stream.write_all(hello.as_bytes())?;
    stream.flush()?;
    let answer = read_line(stream, MAX_LINE)?;
    initiator.finish(&answer)
}

/// Why a listener refused a hello (the connection is then closed,
/// nothing answered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not `<role> <hex>`: an unknown role, or not hex.
    Malformed,
    /// Message 1 did not open: another secret (or none), another role, a
    /// relay from another TLS session, or junk.
    WrongSecret,
    /// Message 1 carries this process's own instance id: its own link,
    /// reflected back to it.
    Reflected,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::Malformed => "a malformed replica_hello",
            Refusal::WrongSecret => {
                "a replica_hello that does not prove the replication secret (or was made for \
                 another role or TLS session)"
            }
            Refusal::Reflected => "a replica_hello of this server's own (a reflected link)",
        })
    }
}

/// The listener's side of a `replica_hello <role> <hex>` (`role` and
/// `hex`: its two arguments): the role, the answer line (without
/// `\r\n`) and the transport.
pub fn respond(
    secret: &Secret,
    role: &[u8],
    hex: &[u8],
    tls_binding: Option<&[u8]>,
) -> Result<(Role, String, Transport), Refusal> {
    respond_as(secret, role, hex, tls_binding, instance_id())
}

/// [`respond`] as an instance of `own_id`: for tests and fuzzing, where
/// both ends run in one process (the server uses [`respond`]).
pub fn respond_as(
    secret: &Secret,
    role: &[u8],
    hex: &[u8],
    tls_binding: Option<&[u8]>,
    own_id: &[u8; ID_LEN],
) -> Result<(Role, String, Transport), Refusal> {
    let role = Role::from_word(role).ok_or(Refusal::Malformed)?;
    let msg = from_hex(hex)
        .filter(|m| m.len() == MESSAGE_LEN)
        .ok_or(Refusal::Malformed)?;
    let p = prologue(role, tls_binding);
    let mut state = builder(secret, &p)
        .build_responder()
        .map_err(|_| Refusal::WrongSecret)?;
    let mut id = [0u8; MESSAGE_LEN];
    let n = state
        .read_message(&msg, &mut id)
        .map_err(|_| Refusal::WrongSecret)?;
    if n != ID_LEN {
        return Err(Refusal::WrongSecret);
    }
    if id[..ID_LEN] == *own_id {
        return Err(Refusal::Reflected);
    }
    let mut answer = [0u8; MESSAGE_LEN];
    let n = state
        .write_message(own_id, &mut answer)
        .map_err(|_| Refusal::WrongSecret)?;
    let line = format!("{HELLO_ANSWER} {}", to_hex(&answer[..n]));
    let t = transport(state).map_err(|_| Refusal::WrongSecret)?;
    Ok((role, line, t))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const SECRET: &[u8] = b"0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e";

    fn secret() -> Secret {
        Secret::new(SECRET).unwrap()
    }

    /// The arguments of a hello line.
    fn args(line: &str) -> (Vec<u8>, Vec<u8>) {
        let w: Vec<&str> = line.trim_end().split(' ').collect();
        assert_eq!(w.len(), 3, "{line}");
        assert_eq!(w[0], HELLO);
        (w[1].as_bytes().to_vec(), w[2].as_bytes().to_vec())
    }

    /// Two ends of one handshake (initiator, responder), as two processes.
    pub(crate) fn pair() -> (Transport, Transport) {
        let s = secret();
        let (i, hello) = Initiator::start_as(&s, Role::TargetLink, None, &[1; ID_LEN]).unwrap();
        let (role, hex) = args(&hello);
        let (r, answer, t) = respond_as(&s, &role, &hex, None, &[2; ID_LEN]).unwrap();
        assert_eq!(r, Role::TargetLink);
        (i.finish(&answer).unwrap(), t)
    }

    #[test]
    fn the_same_secret_role_and_binding_make_a_link() {
        let s = secret();
        for role in [Role::TargetLink, Role::FollowLink, Role::ProxyPeer] {
            for binding in [None, Some(&[9u8; 32][..])] {
                let (i, hello) = Initiator::start_as(&s, role, binding, &[1; ID_LEN]).unwrap();
                assert!(hello.ends_with("\r\n"));
                let (w, hex) = args(&hello);
                assert_eq!(w, role.word().as_bytes());
                let (r, answer, _) = respond_as(&s, &w, &hex, binding, &[2; ID_LEN]).unwrap();
                assert_eq!(r, role);
                assert!(answer.starts_with("REPLICA_HELLO "), "{answer}");
                i.finish(&answer).unwrap();
            }
        }
    }

    #[test]
    fn another_secret_role_or_binding_is_refused_before_any_answer() {
        let s = secret();
        let other = Secret::new(b"ffeeddccbbaa99887766554433221100").unwrap();
        let (_, hello) = Initiator::start_as(&s, Role::FollowLink, None, &[1; ID_LEN]).unwrap();
        let (role, hex) = args(&hello);
        let refused = |secret: &Secret, role: &[u8], binding: Option<&[u8]>| {
            respond_as(secret, role, &hex, binding, &[2; ID_LEN]).err()
        };
        assert_eq!(refused(&other, &role, None), Some(Refusal::WrongSecret));
        assert_eq!(refused(&s, b"target", None), Some(Refusal::WrongSecret));
        assert_eq!(refused(&s, b"proxy", None), Some(Refusal::WrongSecret));
        assert_eq!(
            refused(&s, &role, Some(&[0; 32])),
            Some(Refusal::WrongSecret)
        );
        assert_eq!(refused(&s, b"leader", None), Some(Refusal::Malformed));
        assert_eq!(
            respond_as(&s, &role, b"zz", None, &[2; ID_LEN]).err(),
            Some(Refusal::Malformed)
        );
        // A flipped bit anywhere in message 1.
        let msg = from_hex(&hex).unwrap();
        for i in 0..msg.len() {
            let mut m = msg.clone();
            m[i] ^= 0x40;
            let r = respond_as(&s, &role, to_hex(&m).as_bytes(), None, &[2; ID_LEN]);
            assert_eq!(r.err(), Some(Refusal::WrongSecret), "byte {i}");
        }
        // The listener's own id: its own hello, reflected to it.
        assert_eq!(
            respond_as(&s, &role, &hex, None, &[1; ID_LEN]).err(),
            Some(Refusal::Reflected)
        );
    }

    #[test]
    fn the_connecting_end_checks_the_answer() {
        let s = secret();
        let other = Secret::new(b"ffeeddccbbaa99887766554433221100").unwrap();
        let start = || Initiator::start_as(&s, Role::TargetLink, None, &[1; ID_LEN]).unwrap();
        // Not a handshake answer.
        let (i, _) = start();
        assert!(matches!(i.finish("ERROR"), Err(HandshakeError::Refused(_))));
        // An answer made with another secret (to its own hello).
        let (i, _) = start();
        let (_, other_hello) =
            Initiator::start_as(&other, Role::TargetLink, None, &[3; ID_LEN]).unwrap();
        let (role, hex) = args(&other_hello);
        let (_, answer, _) = respond_as(&other, &role, &hex, None, &[2; ID_LEN]).unwrap();
        assert!(matches!(i.finish(&answer), Err(HandshakeError::BadAnswer)));
        // An answer to another hello of the same secret (a replayed answer).
        let (i, _) = start();
        let (_, hello2) = start();
        let (role, hex) = args(&hello2);
        let (_, answer, _) = respond_as(&s, &role, &hex, None, &[2; ID_LEN]).unwrap();
        assert!(matches!(i.finish(&answer), Err(HandshakeError::BadAnswer)));
        // Its own id in the answer: it reached itself.
        let (i, hello) = start();
        let (role, hex) = args(&hello);
        let (_, answer, _) = respond_as(&s, &role, &hex, None, &[4; ID_LEN]).unwrap();
        let mut reflected = i;
        reflected.own_id = [4; ID_LEN];
        assert!(matches!(
            reflected.finish(&answer),
            Err(HandshakeError::Reflected)
        ));
        assert!(HandshakeError::Reflected.is_auth_failure());
        assert!(!HandshakeError::Refused("ERROR".into()).is_auth_failure());
    }

    #[test]
    fn the_process_id_is_made_once() {
        assert_eq!(instance_id(), instance_id());
        assert_ne!(instance_id(), &[0u8; ID_LEN]);
    }
}
