//! The replication peers' challenge-response (feature `replication-auth`):
//! two ends prove they hold the same secret without sending it. The
//! osmium server uses both ends (its links connect, its listeners
//! answer); osmium-proxy uses the connecting end to prove itself a peer.
//!
//! ```text
//!   connecting end                                   server
//!   replica_auth <cn>                  ──────────▶   sn := 32 random bytes
//!                                      ◀──────────   REPLICA_CHALLENGE <sn> <hmac(S, "osmium-replication server" ‖ cn ‖ sn)>
//!   checks the server's proof (a fake server stops here, before it learns anything)
//!   replica_proof <hmac(S, "osmium-replication client" ‖ cn ‖ sn)>
//!                                      ──────────▶   checks it (constant time): OK, or ERROR
//!                                                    and the challenge forgotten
//! ```
//!
//! `cn`, `sn`: 32 bytes each, from the system's random source, sent as 64
//! lower-case hex digits; the proofs are HMAC-SHA256 (`aws_lc_rs::hmac`),
//! 64 hex digits. Both nonces go into both proofs, so a proof is good for
//! one exchange only: the server draws a new `sn` for every `replica_auth`,
//! and a proof recorded from another connection does not match it. The two
//! proofs are over different labels (of the same length, so `label ‖ cn ‖
//! sn` reads one way only), so neither end can be made to produce the
//! other's. The connecting end checks the server first: a server without
//! the secret never gets the connecting end's proof.
//!
//! Here: the secret ([`Secret`], and its file's rules, [`Secret::load`]),
//! the answering end's state ([`Responder`]), and the connecting end's
//! exchange over any blocking `Read + Write` stream ([`client_handshake`],
//! [`read_line`]). The rest of the crate does no I/O; this module reads
//! the secret's file and drives the stream it is given.

use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;

use aws_lc_rs::hmac;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};

/// Bytes of each nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of an HMAC-SHA256 proof.
const PROOF_LEN: usize = 32;
/// What the server's proof is over, before the nonces.
const SERVER_LABEL: &[u8] = b"osmium-replication server";
/// What the connecting end's proof is over, before the nonces.
const CLIENT_LABEL: &[u8] = b"osmium-replication client";
/// The longest answer line [`read_line`] reads.
const MAX_LINE: usize = 256;

/// The shared secret, as an HMAC key (never printed, never sent).
pub struct Secret(hmac::Key);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn new(bytes: &[u8]) -> Secret {
        Secret(hmac::Key::new(hmac::HMAC_SHA256, bytes))
    }

    /// Reads a secret file (the server's `--replication-secret FILE`,
    /// the proxy's `replication_secret: FILE`; `setting` names it in the
    /// error): one trailing newline dropped; refused when unreadable, not
    /// a regular file, empty, or open to group or others (as ssh refuses
    /// a private key).
    pub fn load(path: &str, setting: &str) -> Result<Secret, String> {
        read_owner_only(path, setting, "a replication secret").map(|b| Secret::new(&b))
    }

    /// The HMAC of `label ‖ client ‖ server`.
    fn proof(&self, label: &[u8], client: &[u8; NONCE_LEN], server: &[u8; NONCE_LEN]) -> hmac::Tag {
        let mut c = hmac::Context::with_key(&self.0);
        c.update(label);
        c.update(client);
        c.update(server);
        c.sign()
    }

    /// Whether `proof` is the HMAC of `label ‖ client ‖ server` (compared
    /// in constant time).
    fn verify(
        &self,
        label: &[u8],
        client: &[u8; NONCE_LEN],
        server: &[u8; NONCE_LEN],
        proof: &[u8],
    ) -> bool {
        let mut data = Vec::with_capacity(label.len() + 2 * NONCE_LEN);
        data.extend_from_slice(label);
        data.extend_from_slice(client);
        data.extend_from_slice(server);
        hmac::verify(&self.0, &data, proof).is_ok()
    }
}

/// Drops one trailing `\n` (and a `\r` before it).
/// The content of a file only its owner may read (a secret or a token;
/// `setting` and `what` name them in the error), one trailing newline
/// dropped; refused when unreadable, not a regular file, open to group
/// or others (as ssh refuses a private key), or empty.
pub fn read_owner_only(
    path: impl AsRef<std::path::Path>,
    setting: &str,
    what: &str,
) -> Result<Vec<u8>, String> {
    let path = path.as_ref();
    let why = |e: String| format!("{setting} {}: {e}", path.display());
    let mut file = std::fs::File::open(path).map_err(|e| why(format!("cannot read it: {e}")))?;
    let meta = file
        .metadata()
        .map_err(|e| why(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(why("not a regular file".into()));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(why(format!(
            "the file is open to group or others (mode {mode:03o}); \
             {what} must be readable by its owner only (chmod 600)"
        )));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| why(format!("cannot read it: {e}")))?;
    let content = trim_newline(&bytes);
    if content.is_empty() {
        return Err(why("the file is empty".into()));
    }
    Ok(content.to_vec())
}

fn trim_newline(b: &[u8]) -> &[u8] {
    let b = b.strip_suffix(b"\n").unwrap_or(b);
    b.strip_suffix(b"\r").unwrap_or(b)
}

/// A fresh nonce from the system's random source.
fn nonce() -> io::Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut n)
        .map_err(|_| io::Error::other("no random bytes"))?;
    Ok(n)
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// Exactly `N` bytes written as `2 * N` hex digits (either case).
fn from_hex<const N: usize>(hex: &[u8]) -> Option<[u8; N]> {
    if hex.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        *o = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The challenge a connection was sent, waiting for its proof.
struct Challenge {
    client: [u8; NONCE_LEN],
    server: [u8; NONCE_LEN],
}

/// The answering end's state for one connection: the challenge it was
/// sent, until its proof comes.
#[derive(Default)]
pub struct Responder {
    pending: Option<Box<Challenge>>,
}

/// How a `replica_proof` ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Proof {
    Accepted,
    /// No `replica_auth` before it.
    NoChallenge,
    Wrong,
}

impl Responder {
    /// `replica_auth <client nonce>`: the `REPLICA_CHALLENGE` line to
    /// answer (any earlier challenge is replaced); None for a malformed
    /// nonce (and no challenge is kept).
    pub fn challenge(&mut self, secret: &Secret, client_hex: &[u8]) -> io::Result<Option<String>> {
        self.pending = None;
        let Some(client) = from_hex::<NONCE_LEN>(client_hex) else {
            return Ok(None);
        };
        let server = nonce()?;
        let proof = secret.proof(SERVER_LABEL, &client, &server);
        self.pending = Some(Box::new(Challenge { client, server }));
        Ok(Some(format!(
            "REPLICA_CHALLENGE {} {}",
            to_hex(&server),
            to_hex(proof.as_ref())
        )))
    }

    /// `replica_proof <hmac>`: checks it against the pending challenge,
    /// which is used up whatever the outcome.
    pub fn prove(&mut self, secret: &Secret, proof_hex: &[u8]) -> Proof {
        let Some(c) = self.pending.take() else {
            return Proof::NoChallenge;
        };
        let good = from_hex::<PROOF_LEN>(proof_hex)
            .is_some_and(|p| secret.verify(CLIENT_LABEL, &c.client, &c.server, &p));
        if good {
            Proof::Accepted
        } else {
            Proof::Wrong
        }
    }

    /// Whether a challenge waits for its proof.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }
}

/// Why the connecting end's exchange failed.
#[derive(Debug)]
pub enum HandshakeError {
    Io(io::Error),
    /// The server answered something else than the exchange's lines
    /// (`ERROR`: it has no secret, or is not osmium).
    Refused(String),
    /// The server's proof is wrong: it does not hold the secret.
    BadServerProof,
    /// The server refused this end's proof (another secret).
    ProofRefused(String),
}

impl HandshakeError {
    /// Whether the other end was met and failed (or refused) the proof.
    pub fn is_auth_failure(&self) -> bool {
        matches!(
            self,
            HandshakeError::BadServerProof | HandshakeError::ProofRefused(_)
        )
    }
}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Io(e)
    }
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "{e}"),
            HandshakeError::Refused(line) => write!(
                f,
                "it answered replica_auth with {line:?}: no --replication-secret there?"
            ),
            HandshakeError::BadServerProof => {
                write!(f, "it failed to prove it holds the replication secret")
            }
            HandshakeError::ProofRefused(line) => write!(
                f,
                "it refused this end's proof ({line:?}): not the same replication secret"
            ),
        }
    }
}

impl From<HandshakeError> for io::Error {
    fn from(e: HandshakeError) -> io::Error {
        match e {
            HandshakeError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::PermissionDenied, other.to_string()),
        }
    }
}

/// The connecting end's exchange, right after connecting: proves the
/// server holds `secret`, then that this end does. Reads byte by byte, so
/// nothing the server sends after `OK` is taken from the stream.
pub fn client_handshake<S: Read + Write>(
    stream: &mut S,
    secret: &Secret,
) -> Result<(), HandshakeError> {
    let client = nonce()?;
    stream.write_all(format!("replica_auth {}\r\n", to_hex(&client)).as_bytes())?;
    let line = read_line(stream)?;
    let mut f = line.split(' ');
    let (Some("REPLICA_CHALLENGE"), Some(server), Some(proof), None) =
        (f.next(), f.next(), f.next(), f.next())
    else {
        return Err(HandshakeError::Refused(line));
    };
    let (Some(server), Some(proof)) = (
        from_hex::<NONCE_LEN>(server.as_bytes()),
        from_hex::<PROOF_LEN>(proof.as_bytes()),
    ) else {
        return Err(HandshakeError::BadServerProof);
    };
    if !secret.verify(SERVER_LABEL, &client, &server, &proof) {
        return Err(HandshakeError::BadServerProof);
    }
    let mine = secret.proof(CLIENT_LABEL, &client, &server);
    stream.write_all(format!("replica_proof {}\r\n", to_hex(mine.as_ref())).as_bytes())?;
    match read_line(stream)?.as_str() {
        "OK" => Ok(()),
        other => Err(HandshakeError::ProofRefused(other.to_string())),
    }
}

/// One answer line, without its `\r\n`, read byte by byte (nothing
/// after it is taken from the stream).
pub fn read_line<S: Read>(stream: &mut S) -> io::Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.len() < MAX_LINE {
        match stream.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => {
                let text = trim_newline(&line);
                return Ok(String::from_utf8_lossy(text).into_owned());
            }
            Ok(1) => line.push(byte[0]),
            Ok(_) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "answer line too long",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_rejects_bad_input() {
        let bytes: Vec<u8> = (0..=255).collect();
        let hex = to_hex(&bytes);
        assert_eq!(&hex[..8], "00010203");
        assert_eq!(&hex[hex.len() - 4..], "feff");
        let mut four = [0u8; 4];
        four.copy_from_slice(&bytes[250..254]);
        assert_eq!(from_hex::<4>(to_hex(&four).as_bytes()), Some(four));
        assert_eq!(from_hex::<2>(b"ABcd"), Some([0xab, 0xcd]));
        assert_eq!(from_hex::<2>(b"abc"), None);
        assert_eq!(from_hex::<2>(b"abcdef"), None);
        assert_eq!(from_hex::<2>(b"abcg"), None);
        assert_eq!(from_hex::<1>(b"+f"), None);
    }

    #[test]
    fn trims_one_trailing_newline() {
        assert_eq!(trim_newline(b"s3cret\n"), b"s3cret");
        assert_eq!(trim_newline(b"s3cret\r\n"), b"s3cret");
        assert_eq!(trim_newline(b"s3cret\n\n"), b"s3cret\n");
        assert_eq!(trim_newline(b"s3cret"), b"s3cret");
    }

    #[test]
    fn secret_files_are_checked() {
        let dir = std::env::temp_dir().join(format!("osmium-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s");
        let p = path.to_str().unwrap();
        let write = |text: &[u8], mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(b"shared\n", 0o600);
        let s = Secret::load(p, "replication_secret:").unwrap();
        let (c, v) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let p1 = s.proof(SERVER_LABEL, &c, &v);
        assert!(Secret::new(b"shared").verify(SERVER_LABEL, &c, &v, p1.as_ref()));
        write(b"shared\n", 0o640);
        let e = Secret::load(p, "replication_secret:").unwrap_err();
        assert!(e.starts_with("replication_secret: "), "{e}");
        assert!(e.contains("open to group or others (mode 640)"), "{e}");
        write(b"\n", 0o600);
        assert!(Secret::load(p, "x").unwrap_err().contains("empty"));
        let e = Secret::load(dir.to_str().unwrap(), "x").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(Secret::load("/nonexistent/s", "x")
            .unwrap_err()
            .contains("cannot read it"));
    }

    #[test]
    fn proofs_are_rfc_hmac_sha256_over_label_and_nonces() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        let s = Secret::new(b"Jefe");
        let data = b"what do ya want for nothing?";
        let tag = hmac::sign(&s.0, data);
        assert_eq!(
            to_hex(tag.as_ref()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // The proofs: the label, then the client's nonce, then the server's.
        let (c, v) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let mut joined = SERVER_LABEL.to_vec();
        joined.extend_from_slice(&c);
        joined.extend_from_slice(&v);
        let p = s.proof(SERVER_LABEL, &c, &v);
        assert_eq!(p.as_ref(), hmac::sign(&s.0, &joined).as_ref());
        assert!(s.verify(SERVER_LABEL, &c, &v, p.as_ref()));
        // Domain separation: the server's proof is not the client's.
        assert!(!s.verify(CLIENT_LABEL, &c, &v, p.as_ref()));
        assert_ne!(p.as_ref(), s.proof(CLIENT_LABEL, &c, &v).as_ref());
        // Bound to both nonces, in their places.
        assert!(!s.verify(SERVER_LABEL, &v, &c, p.as_ref()));
        assert!(!s.verify(SERVER_LABEL, &c, &[3; NONCE_LEN], p.as_ref()));
        // And to the secret.
        assert!(!Secret::new(b"jefe").verify(SERVER_LABEL, &c, &v, p.as_ref()));
        assert_eq!(SERVER_LABEL.len(), CLIENT_LABEL.len());
    }

    /// A connecting end's proof for `challenge_line`, as `client_handshake`
    /// computes it.
    fn answer(secret: &Secret, client: &[u8; NONCE_LEN], challenge_line: &str) -> (bool, String) {
        let f: Vec<&str> = challenge_line.split(' ').collect();
        assert_eq!(f[0], "REPLICA_CHALLENGE");
        let server = from_hex::<NONCE_LEN>(f[1].as_bytes()).unwrap();
        let proof = from_hex::<PROOF_LEN>(f[2].as_bytes()).unwrap();
        let server_ok = secret.verify(SERVER_LABEL, client, &server, &proof);
        (
            server_ok,
            to_hex(secret.proof(CLIENT_LABEL, client, &server).as_ref()),
        )
    }

    #[test]
    fn the_answering_end_accepts_a_proof_once_and_refuses_others() {
        let s = Secret::new(b"shared");
        let client = [7u8; NONCE_LEN];
        let mut a = Responder::default();
        assert_eq!(a.prove(&s, b"00"), Proof::NoChallenge);
        assert_eq!(a.challenge(&s, b"xyz").unwrap(), None);
        assert!(!a.is_pending());
        let line = a
            .challenge(&s, to_hex(&client).as_bytes())
            .unwrap()
            .unwrap();
        assert!(a.is_pending());
        let (server_ok, proof) = answer(&s, &client, &line);
        assert!(server_ok);
        assert_eq!(a.prove(&s, proof.as_bytes()), Proof::Accepted);
        // Used up.
        assert_eq!(a.prove(&s, proof.as_bytes()), Proof::NoChallenge);

        // The same proof against a new challenge (a new server nonce).
        let mut b = Responder::default();
        let line2 = b
            .challenge(&s, to_hex(&client).as_bytes())
            .unwrap()
            .unwrap();
        assert_ne!(line, line2);
        assert_eq!(b.prove(&s, proof.as_bytes()), Proof::Wrong);
        assert_eq!(b.prove(&s, proof.as_bytes()), Proof::NoChallenge);

        // Another secret: the server's proof does not check, nor the client's.
        let other = Secret::new(b"other");
        let line3 = b
            .challenge(&s, to_hex(&client).as_bytes())
            .unwrap()
            .unwrap();
        let (server_ok, proof) = answer(&other, &client, &line3);
        assert!(!server_ok);
        assert_eq!(b.prove(&s, proof.as_bytes()), Proof::Wrong);
    }

    /// A scripted server: what it answers to each line the client sends.
    struct Scripted<'a> {
        secret: &'a Secret,
        auth: Responder,
        accepted: bool,
        sent: Vec<u8>,
        answers: std::collections::VecDeque<u8>,
        tamper: bool,
    }

    impl Read for Scripted<'_> {
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

    impl Write for Scripted<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.sent.extend_from_slice(buf);
            while let Some(end) = self.sent.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.sent.drain(..=end).collect();
                let line = std::str::from_utf8(&line).unwrap().trim_end();
                let (cmd, arg) = line.split_once(' ').unwrap();
                let reply = match cmd {
                    "replica_auth" => {
                        let mut l = self
                            .auth
                            .challenge(self.secret, arg.as_bytes())
                            .unwrap()
                            .unwrap();
                        if self.tamper {
                            // Another last digit: one the proof did not end with.
                            let last = l.pop();
                            l.push(if last == Some('0') { '1' } else { '0' });
                        }
                        l
                    }
                    "replica_proof" => match self.auth.prove(self.secret, arg.as_bytes()) {
                        Proof::Accepted => {
                            self.accepted = true;
                            "OK".into()
                        }
                        _ => "ERROR".into(),
                    },
                    _ => "ERROR".into(),
                };
                self.answers.extend(reply.bytes().chain(*b"\r\n"));
            }
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn scripted(secret: &Secret, tamper: bool) -> Scripted<'_> {
        Scripted {
            secret,
            auth: Responder::default(),
            accepted: false,
            sent: Vec::new(),
            answers: Default::default(),
            tamper,
        }
    }

    #[test]
    fn the_connecting_end_proves_and_checks_the_server() {
        let s = Secret::new(b"shared");
        let mut ok = scripted(&s, false);
        client_handshake(&mut ok, &s).unwrap();
        assert!(ok.accepted);

        // A server with another secret: caught at its challenge, and this
        // end's proof never sent.
        let other = Secret::new(b"other");
        let mut fake = scripted(&other, false);
        let e = client_handshake(&mut fake, &s).unwrap_err();
        assert!(matches!(e, HandshakeError::BadServerProof), "{e}");
        assert!(e.is_auth_failure());
        assert!(fake.auth.is_pending(), "no replica_proof sent");

        let mut tampered = scripted(&s, true);
        let e = client_handshake(&mut tampered, &s).unwrap_err();
        assert!(matches!(e, HandshakeError::BadServerProof), "{e}");
    }
}
