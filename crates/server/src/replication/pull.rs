//! The catch-up pull: a server that starts with `--replicate-to T`
//! connects to T a second time, proves with T who both are (the link
//! handshake in role `follow` with a secret, TLS certificates with `-Z`:
//! `Replication::connect`), and sends `replica_follow`; T serves that
//! connection as a feed (its full copy, `replica_synced`, then its own
//! writes), and this server hands the connection (its TLS session or its
//! Noise keys, and what it already received, included) to a worker as its
//! own follow link, whose session applies what T sends (and answers T's
//! `mn`): only what a feed sends runs there (`rights`).
//! `replica_synced` from every target turns `replication_catchup` to
//! `done`.

use std::io::Write;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use osmium_protocol::replication_link::{read_line, Role};

use super::stream::LinkStream;
use super::{Replication, PEER_FOLLOW};

const RETRY: Duration = Duration::from_millis(200);

/// Connects to target `i` until it answers, then hands the connection over.
/// Ends once synced, or when the target is removed (a removal marks it
/// synced).
pub(crate) fn run(repl: &Replication, i: usize) {
    let link = &repl.targets[i];
    let addr = link.addr.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut logged = false;
    while !repl.stopping() && !link.synced.load(Relaxed) && link.active.load(Relaxed) {
        let stream = repl.connect(&addr, Role::FollowLink);
        let refused = match stream.and_then(|mut s| ask(repl, &mut s).map(|a| (s, a))) {
            Ok((stream, None)) => {
                if let Some(handoff) = repl.handoff.get() {
                    if handoff(stream, PEER_FOLLOW + i as u8) {
                        return;
                    }
                }
                None
            }
            // `-X` there: "ERROR metadump not allowed"; over TLS, ERROR:
            // it did not take this server's certificate as a peer's.
            Ok((_, Some(line))) => Some(format!("it answered replica_follow with {line:?}")),
            Err(e) => {
                let e = repl.tls_failed(&addr, e);
                (e.kind() == std::io::ErrorKind::PermissionDenied).then(|| e.to_string())
            }
        };
        if let Some(why) = refused.filter(|_| !logged) {
            tracing::warn!("[replication] catch-up pull from {addr} refused: {why}");
            logged = true;
        }
        std::thread::sleep(RETRY);
    }
}

/// Sends `replica_follow` and reads the answer byte by byte (what
/// follows it is for the worker's session): None for `OK` (from an
/// osmium that serves the follow link), else the line it answered.
fn ask(repl: &Replication, stream: &mut LinkStream) -> std::io::Result<Option<String>> {
    let ask = format!("replica_follow {}\r\n", repl.follow);
    stream.write_all(ask.as_bytes())?;
    stream
        .tcp()
        .set_read_timeout(Some(Duration::from_secs(2)))?;
    let line = read_line(stream, super::link::MAX_ANSWER)?;
    stream.tcp().set_read_timeout(None)?;
    Ok((line != "OK").then_some(line))
}
