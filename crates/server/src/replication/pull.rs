//! The catch-up pull: a server that starts with `--replicate-to T`
//! connects to T a second time, proves with T that both hold the
//! replication secret (`auth`), and sends `replica_follow`; T serves that
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
    let mut logged = false;
    while !repl.stopping() && !repl.synced[i].load(Relaxed) {
        let stream = super::link::connect_to(&addr).and_then(|s| repl.authenticate(s, &addr));
        let refused = match stream {
            Ok(mut stream) => {
                let ask = format!("replica_follow {}\r\n", repl.follow);
                match stream
                    .write_all(ask.as_bytes())
                    .map(|()| answer(&mut stream))
                {
                    Ok(Ok(())) => {
                        if let Some(handoff) = repl.handoff.get() {
                            if handoff(stream, PEER_FOLLOW + i as u8) {
                                return;
                            }
                        }
                        None
                    }
                    // `-X` there: "ERROR metadump not allowed".
                    Ok(Err(Some(line))) => {
                        Some(format!("it answered replica_follow with {line:?}"))
                    }
                    _ => None,
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(e.to_string()),
            Err(_) => None,
        };
        if let Some(why) = refused.filter(|_| !logged) {
            eprintln!("[replication] catch-up pull from {addr} refused: {why}");
            logged = true;
        }
        std::thread::sleep(RETRY);
    }
}

/// Reads the target's answer to `replica_follow` byte by byte (what
/// follows it is for the worker's session): `OK` from an osmium; else the
/// line it answered, if any.
fn answer(stream: &mut TcpStream) -> Result<(), Option<String>> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut line = Vec::new();
    let mut byte = [0u8];
    while line.len() < 256 {
        match stream.read(&mut byte) {
            Ok(1) => {
                line.push(byte[0]);
                if byte[0] == b'\n' {
                    let _ = stream.set_read_timeout(None);
                    if line == b"OK\r\n" {
                        return Ok(());
                    }
                    let text = String::from_utf8_lossy(line.trim_ascii_end());
                    return Err(Some(text.into_owned()));
                }
            }
            _ => return Err(None),
        }
    }
    Err(None)
}
