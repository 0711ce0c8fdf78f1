//! Binary upgrades (SIGUSR2) of a server with a flash tier, over real
//! processes (the server runs from a copy of the binary, replaced by a
//! new copy before the signal, as in `upgrade`): clients pipelining GETs
//! of keys on flash across the upgrade get every reply right on the same
//! socket (a request waiting for flash reads at the stop is finished
//! first, its connection then carried), no connection is closed, and
//! every key on flash before is served after, byte for byte: without
//! `-e` (the tier's metadata in a memfd, handed over), with `-e`
//! (`FILE.flash`, taken over by its path), and when the new image
//! refuses the state (the old image takes the same state back).

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use osmium_test_harness::Running;

use crate::common::{self, tcp::LineClient};
use crate::upgrade::{Dir, InstallOsmium};

/// Keys stored: about 13 MB of values into 4 MB of RAM (most on flash).
const KEYS: usize = 8_000;
/// Connections pipelining GETs across the upgrade.
const READERS: usize = 4;
/// GETs each reader has in flight at once.
const PIPELINE: usize = 32;

/// The value of `key{i}`: 200 to 3,200 bytes that do not compress (so
/// that they go to flash as they are), each different.
fn value(i: usize) -> Vec<u8> {
    let len = 200 + (i * 131) % 3000;
    let mut state = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Reads the reply to `get key{i}` and checks it.
fn expect_value(c: &mut LineClient, i: usize) {
    let v = value(i);
    assert_eq!(c.line(), format!("VALUE key{i} {i} {}\r\n", v.len()));
    let mut got = vec![0u8; v.len() + 2];
    c.r.read_exact(&mut got).expect("read the value");
    assert!(got[..v.len()] == v[..], "key{i} differs");
    assert_eq!(&got[v.len()..], b"\r\n");
    assert_eq!(c.line(), "END\r\n", "key{i}");
}

fn stat(c: &mut LineClient, name: &str) -> u64 {
    c.send(b"stats\r\n");
    let mut found = None;
    loop {
        let l = c.line();
        assert!(!l.is_empty(), "the connection closed");
        if l == "END\r\n" {
            return found.unwrap_or_else(|| panic!("no stat {name}"));
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(1) == Some(&name) {
            found = f[2].parse().ok();
        }
    }
}

/// How many fds process `pid` holds on files whose name contains `name`.
fn memfds(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("list /proc/PID/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains(name))
        .count()
}

/// Waits until the log says `needle`.
fn wait_for_log(srv: &Running, needle: &str) {
    common::wait_until(&format!("{needle:?} in the log"), || {
        srv.stderr_text().contains(needle)
    });
}

/// One reader: `PIPELINE` GETs of keys on flash at a time (the oldest
/// keys, demoted first), each reply checked, until `stop`; counts its
/// batches in `batches`.
fn read_pipelined(
    mut c: LineClient,
    first: usize,
    stop: Arc<AtomicBool>,
    batches: Arc<AtomicUsize>,
) {
    let mut next = first;
    while !stop.load(Ordering::Relaxed) {
        let keys: Vec<usize> = (0..PIPELINE).map(|n| (next + n * 7) % (KEYS / 2)).collect();
        next += 1;
        let gets: String = keys.iter().map(|i| format!("get key{i}\r\n")).collect();
        c.send(gets.as_bytes());
        for &i in &keys {
            expect_value(&mut c, i);
        }
        batches.fetch_add(1, Ordering::Relaxed);
    }
}

/// Fills a server with a flash tier (`-e` when `memfile`), upgrades it
/// under pipelined GETs of keys on flash (to an image that refuses the
/// state when `refused`), and checks what the module comment says.
fn upgrade_with_flash(name: &str, memfile: bool, refused: bool) {
    let dir = Dir::new(&format!("flash-{name}"));
    dir.install_osmium("osmium");
    let mut server = common::osmium()
        .bin(dir.path("osmium"))
        .memory(4)
        .threads(2)
        .flash(dir.path("flash"), "64m")
        .opt("ext_page_size=4")
        .opt("ext_wbuf_size=1");
    if memfile {
        server = server.memory_file(dir.path("cache.mem"));
    }
    let mut srv = server.start();
    let pid = srv.pid();
    let mut c = LineClient::to(&srv);
    for first in (0..KEYS).step_by(100) {
        let mut batch = Vec::new();
        for i in first..first + 100 {
            let v = value(i);
            batch.extend(format!("set key{i} {i} 0 {}\r\n", v.len()).as_bytes());
            batch.extend(&v);
            batch.extend(b"\r\n");
        }
        c.send(&batch);
        for i in first..first + 100 {
            assert_eq!(c.line(), "STORED\r\n", "key{i}");
        }
    }
    assert!(stat(&mut c, "extstore_objects_used") > 1000);
    let before = stat(&mut c, "get_extstore");
    let stop = Arc::new(AtomicBool::new(false));
    let batches = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let client = LineClient::to(&srv);
            let (stop, batches) = (stop.clone(), batches.clone());
            std::thread::spawn(move || read_pipelined(client, r * 1000, stop, batches))
        })
        .collect();
    common::wait_until("the readers run", || batches.load(Ordering::Relaxed) >= 20);
    if refused {
        dir.install_refusing_osmium();
    } else {
        dir.install_osmium("osmium");
    }
    srv.send_signal(libc::SIGUSR2);
    wait_for_log(
        &srv,
        if refused {
            "upgrade failed: OSMIUM_UPGRADE_REFUSE is set; serving with osmium"
        } else {
            "upgrade done:"
        },
    );
    // Batches read after the upgrade, on the same sockets.
    let upgraded = batches.load(Ordering::Relaxed);
    common::wait_until("the readers run after the upgrade", || {
        batches.load(Ordering::Relaxed) >= upgraded + 20
    });
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader failed");
    }
    assert_eq!(srv.pid(), pid);
    let log = srv.stderr_text();
    assert!(
        log.contains("client connections carried over, 0 lost"),
        "{log}"
    );
    assert!(!log.contains("connections closed"), "{log}");
    assert!(log.contains("items back on flash"), "{log}");
    // The state's copy of the metadata's memfd was closed once taken over.
    assert_eq!(
        memfds(pid, "memfd:osmium-flash-meta"),
        usize::from(!memfile)
    );
    let finished: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("waiting for flash reads finished"))
        .collect();
    println!("{name}: {finished:?}");
    // Every key, on flash or in RAM, read back; the keys on flash are
    // read from flash.
    let mut c = LineClient::to(&srv);
    for first in (0..KEYS).step_by(100) {
        let gets: String = (first..first + 100)
            .map(|i| format!("get key{i}\r\n"))
            .collect();
        c.send(gets.as_bytes());
        for i in first..first + 100 {
            expect_value(&mut c, i);
        }
    }
    assert!(stat(&mut c, "get_extstore") > 0, "from {before} before");
}

#[test]
fn pipelined_gets_of_keys_on_flash_go_on_across_an_upgrade() {
    upgrade_with_flash("memfd", false, false);
}

#[test]
fn pipelined_gets_of_keys_on_flash_go_on_across_an_upgrade_with_a_memory_file() {
    upgrade_with_flash("memfile", true, false);
}

#[test]
fn pipelined_gets_of_keys_on_flash_go_on_across_a_refused_upgrade() {
    upgrade_with_flash("refused", false, true);
}
