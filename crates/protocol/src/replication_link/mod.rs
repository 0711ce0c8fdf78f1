//! The replication links' security (feature `replication-link`): who may
//! be a peer and how a link's bytes are protected. The osmium server uses
//! both ends (its links connect, its listeners answer); osmium-proxy uses
//! the connecting end for its peer connections.
//!
//! ```text
//!   connecting end                                       listener (a server's cache port)
//!   replica_hello <role> <hex of Noise message 1>  ───▶  no secret: ERROR (an unknown command)
//!     (message 1 already proves the secret: psk0)        message 1 fails to decrypt, or carries
//!                                                        the listener's own instance id: the
//!                                                        connection is closed, nothing answered
//!                                  ◀─── REPLICA_HELLO <hex of Noise message 2>
//!   checks message 2 (the secret, not its own id)
//!   plain TCP: every byte after it, both ways, is a Noise transport frame
//!   under TLS (-Z): the TLS session carries the rest (no second encryption)
//! ```
//!
//! The pattern is `Noise_NNpsk0_25519_AESGCM_SHA256` (`handshake`), from
//! the `snow` crate with its ring-accelerated resolver. The PSK is derived
//! from the secret file's content (`secret`, which also says what a secret
//! must be to be accepted and makes good ones). The prologue binds the
//! role of the connection (`target`, `follow`, `proxy`), a protocol
//! version, and under TLS a TLS exporter value of the session it runs in,
//! so a handshake cannot be relayed into another role or another TLS
//! session. Each end's payload is a random instance id made at process
//! start: an end that meets its own id talks to itself through a
//! reflector and refuses.
//!
//! After the handshake on plain TCP (`frame`): `u16` big-endian length,
//! then that many bytes of one AES-GCM transport message (at most 65535,
//! 16 of them the tag); the nonce is the frame's number in its direction,
//! so a frame dropped, replayed, reordered or altered fails to decrypt, and
//! the link is closed. `stream` is a blocking `Read + Write` stream over
//! those frames (the proxy's peer connections, the server's links).

pub mod frame;
pub mod handshake;
pub mod secret;
pub mod stream;

pub use frame::{
    frame_error, FrameError, Inbound, Outbound, Transport, MAX_PLAINTEXT, SEAL_PLAINTEXT,
};
pub use handshake::{
    connect_handshake, instance_id, respond, HandshakeError, Initiator, Refusal, Role,
    EXPORTER_LABEL, HELLO, HELLO_ANSWER,
};
pub use secret::{
    check_strength, read_line, read_owner_only, write_new_secret, Secret, HOW_TO_MAKE,
};
pub use stream::NoiseStream;
