//! The exchange of `--replication-secret` as a peer runs it, written from
//! its description (`osmium_protocol::replication_auth`) with aws-lc-rs's HMAC.

use aws_lc_rs::hmac;

use super::Client;

pub const SERVER_LABEL: &str = "osmium-replication server";
pub const CLIENT_LABEL: &str = "osmium-replication client";

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

pub fn mac(secret: &[u8], label: &str, client: &[u8], server: &[u8]) -> Vec<u8> {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    let mut data = label.as_bytes().to_vec();
    data.extend_from_slice(client);
    data.extend_from_slice(server);
    hmac::sign(&key, &data).as_ref().to_vec()
}

/// A peer's half of the exchange, holding `secret`, with client nonce
/// `client`: (whether the server proved `secret`, the proof sent, the
/// answer to it).
pub fn exchange(c: &mut Client, secret: &[u8], client: &[u8; 32]) -> (bool, String, String) {
    let line = c.call(format!("replica_auth {}\r\n", hex(client)).as_bytes());
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f.len(), 3, "{line}");
    assert_eq!(f[0], "REPLICA_CHALLENGE", "{line}");
    let (server, server_proof) = (unhex(f[1]), unhex(f[2]));
    assert_eq!((server.len(), server_proof.len()), (32, 32), "{line}");
    let server_ok = mac(secret, SERVER_LABEL, client, &server) == server_proof;
    let proof = hex(&mac(secret, CLIENT_LABEL, client, &server));
    let answer = c.call(format!("replica_proof {proof}\r\n").as_bytes());
    (server_ok, proof, answer)
}
