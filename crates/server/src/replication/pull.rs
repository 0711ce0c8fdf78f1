//! The catch-up pull: a server that starts with `--replicate-to T`
//! connects to T a second time and sends `replica_follow`; T serves that
//! connection as a feed (its full copy, `replica_synced`, then its own
//! writes), and this server hands the socket to a worker as a peer
//! connection, whose session applies what T sends (and answers T's `mn`).
//! `replica_synced` from every target turns `replication_catchup` to
//! `done`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::{Replication, PEER_FOLLOW};

const RETRY: Duration = Duration::from_millis(200);

/// Connects to target `i` until it answers, then hands the connection over.
pub fn run(repl: &Replication, i: usize) {
    let addr = repl.targets[i]
        .addr
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    while !repl.stopping() && !repl.synced[i].load(Relaxed) {
        if let Ok(mut stream) = super::link::connect_to(&addr) {
            let _ = stream.set_nodelay(true);
            let ask = format!("replica_follow {}\r\n", repl.follow);
            if stream.write_all(ask.as_bytes()).is_ok() && answered_ok(&mut stream) {
                if let Some(handoff) = repl.handoff.get() {
                    if handoff(stream, PEER_FOLLOW + i as u8) {
                        return;
                    }
                }
            }
        }
        std::thread::sleep(RETRY);
    }
}

/// Reads the target's answer to `replica_follow` byte by byte (what
/// follows it is for the worker's session): `OK` from an osmium.
fn answered_ok(stream: &mut TcpStream) -> bool {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.len() < 256 {
        match stream.read(&mut byte) {
            Ok(1) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    let _ = stream.set_read_timeout(None);
                    return line == b"OK\r\n";
                }
            }
            _ => return false,
        }
    }
    false
}
