//! kill -9 inside a binary upgrade (SIGUSR2), with `-e FILE` and a flash
//! tier, under the write load of `crash_recovery` (text, meta and binary
//! writers, one request in flight each; a model of each key's
//! acknowledged state and of the state its request in flight would
//! leave; values a pattern of their key, version and length). Each round
//! starts the server on the same file, held at one point of the upgrade
//! (`OSMIUM_UPGRADE_STALL`: the server's `upgrade::stall`), runs the
//! load, sends SIGUSR2, kills the process (SIGKILL) once its log says it
//! is held there, starts it again on the same file and checks every key:
//! its acknowledged value or the one its request in flight would leave,
//! byte for byte (a torn or half-written value, an old version, another
//! key's bytes fail the test).
//!
//! The points, two rounds each: right after the signal (no wait: the
//! kill lands in the check or the quiesce), during the check (serving
//! goes on), with the threads stopped and the store handed over (the
//! state not yet written), right after the exec (the new image before it
//! reads the state: nothing serves), and during the new image's
//! take-over (its store taken over from the file, the carried
//! connections served, the acceptor not yet running).
//!
//! What survives what: with `-e` every acknowledged write is in the
//! memory file (a shared mapping) when it is acknowledged, and each
//! record the flash tier holds is on flash or in a write buffer inside
//! `FILE.flash`; an upgrade neither writes them out nor marks them
//! closed (the image that starts takes both over by their paths, as
//! after a kill), so a kill at any of these points is a kill of a running
//! server: the next start takes the files over as after a crash (the
//! index rebuilt from the segments, the flash index repaired) with every
//! acknowledged write. A request in flight at the kill may or may not
//! have happened; the connections are lost (clients reconnect).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::crash_recovery::{
    check_model, read_all, server_of, KeyModel, Rng, Scratch, Setup, Writers, WRITERS,
};

/// Where each round's kill lands: None right after the signal, else the
/// point `OSMIUM_UPGRADE_STALL` holds the upgrade at.
const POINTS: [Option<&str>; 5] = [
    None,
    Some("check"),
    Some("quiesced"),
    Some("exec"),
    Some("started"),
];
const ROUNDS_PER_POINT: usize = 2;

#[test]
fn kill_9_inside_an_upgrade_loses_no_acknowledged_write() {
    // 16 MiB of RAM and 64 MiB of flash: the older items are on flash.
    let setup = Setup {
        name: "upgrade",
        memory_mb: 16,
        no_evictions: false,
        flash_mb: Some(64),
        keys_per_writer: 1500,
    };
    let scratch = Scratch::new(setup.name);
    let file = scratch.0.join("cache.mem");
    let model: Arc<Mutex<HashMap<String, KeyModel>>> = Arc::default();
    let versions = Arc::new(Mutex::new(0u64));
    let mut rng = Rng(0x5eed ^ u64::from(std::process::id()));
    let keys = setup.keys_per_writer;
    let all_keys: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..keys).map(move |k| format!("w{w}k{k}")))
        .collect();
    let started = Instant::now();
    let mut checked = 0usize;
    for round in 0..POINTS.len() * ROUNDS_PER_POINT {
        let point = POINTS[round % POINTS.len()];
        let mut server = server_of(&file, &setup);
        if let Some(p) = point {
            server = server.env("OSMIUM_UPGRADE_STALL", p);
        }
        let mut server = server.start();
        let writers = Writers::start(server.port(), keys, &mut rng, &model, &versions);
        std::thread::sleep(Duration::from_millis(100 + rng.below(400)));
        server.send_signal(libc::SIGUSR2);
        if let Some(p) = point {
            let needle = format!("upgrade stalled at {p}");
            common::wait_until(&needle, || server.stderr_text().contains(&needle));
            // The load goes on where the point serves.
            std::thread::sleep(Duration::from_millis(rng.below(50)));
        }
        server.kill();
        writers.stop();
        // The same file, without the hold.
        let server = server_of(&file, &setup).start();
        let found = read_all(&server, &all_keys);
        let when = format!("round {round} (kill at {point:?})");
        checked += check_model(&mut model.lock().unwrap(), &all_keys, &found, &when);
    }
    eprintln!(
        "kill -9 inside upgrades: {} rounds, {checked} key checks, {} writes, {:.1} s",
        POINTS.len() * ROUNDS_PER_POINT,
        versions.lock().unwrap(),
        started.elapsed().as_secs_f64()
    );
}
