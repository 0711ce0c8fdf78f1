//! osmium-tool's output beside memcached-tool's own (the Perl script of the
//! memcached 1.6.45 release vendored in tests/oracle/, run with perl and
//! URI::Escape from Debian's liburi-perl), on the same server, osmium and
//! memcached: `display` (with `Full? no` for a server with room),
//! `settings`, `keys`, `keys -u` byte for byte,
//! `stats` line for line on the figures that do not move between two
//! runs, `dump` the same set of records.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{address, memcached_bin, osmium_bin, roundtrip, run_tool, start, Running, TempDir};

/// memcached-tool extracted into `dir`, or `None` (skip; a failure under
/// `CI=true`) without perl's URI::Escape.
fn memcached_tool(dir: &TempDir) -> Option<PathBuf> {
    let have = Command::new("perl")
        .args(["-MURI::Escape", "-e", "1"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "perl with URI::Escape (liburi-perl) is missing; scripts/test-all.sh installs it"
        );
        eprintln!(
            "SKIP memcached-tool comparison: no perl URI::Escape (apt-get install liburi-perl)"
        );
        return None;
    }
    let tarball = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/oracle/memcached-1.6.45-src.tar.gz");
    let out = Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .args(["-O", "memcached-1.6.45/scripts/memcached-tool"])
        .output()
        .expect("tar");
    assert!(
        out.status.success() && !out.stdout.is_empty(),
        "memcached-tool not in {tarball:?}"
    );
    let path = dir.0.join("memcached-tool");
    std::fs::write(&path, out.stdout).unwrap();
    Some(path)
}

fn perl(script: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("perl")
        .arg(script)
        .args(args)
        .output()
        .expect("perl");
    assert!(
        out.status.success(),
        "memcached-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn ours(args: &[&str]) -> Vec<u8> {
    let out = run_tool(args);
    assert!(
        out.status.success(),
        "osmium-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn load(server: &Running) {
    let mut s = server.connect();
    let mut put = |k: &str, flags: u32, v: &[u8]| {
        let mut req = format!("set {k} {flags} 0 {}\r\n", v.len()).into_bytes();
        req.extend_from_slice(v);
        req.extend_from_slice(b"\r\n");
        assert_eq!(roundtrip(&mut s, &req, b"\r\n"), b"STORED\r\n");
    };
    for i in 0..30 {
        put(&format!("k{i}"), i, format!("v{i}").as_bytes());
    }
    put("odd%2Fkey", 3, b"x\r\ny");
    put("large", 0, &[b'L'; 3000]);
    put("larger", 9, &[b'M'; 70_000]);
}

/// `dump` output split into its records (`add ...\r\n<data>\r\n`).
fn records(dump: &[u8]) -> BTreeSet<Vec<u8>> {
    let mut set = BTreeSet::new();
    let mut rest = dump;
    while !rest.is_empty() {
        let eol = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let head = String::from_utf8_lossy(&rest[..eol]).into_owned();
        let len: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        let end = eol + 2 + len + 2;
        set.insert(rest[..end].to_vec());
        rest = &rest[end..];
    }
    set
}

/// `stats` lines whose values cannot change between the two runs.
const STABLE: [&str; 8] = [
    "curr_items",
    "total_items",
    "limit_maxbytes",
    "threads",
    "pointer_size",
    "pid",
    "version",
    "evictions",
];

fn compare_on(bin: &Path) {
    let dir = TempDir::new("mctool");
    let Some(tool) = memcached_tool(&dir) else {
        return;
    };
    let server = start(bin, &["-m", "64"]);
    load(&server);
    let addr = address(&server);

    assert_eq!(
        String::from_utf8_lossy(&ours(&[&addr, "settings"])),
        String::from_utf8_lossy(&perl(&tool, &[&addr, "settings"]))
    );
    // Max_age may tick between the two runs: a few tries.
    let mut same = false;
    for _ in 0..3 {
        let (a, b) = (perl(&tool, &[&addr, "display"]), ours(&[&addr, "display"]));
        if a == b {
            same = true;
            break;
        }
        eprintln!(
            "display differs:\n{}\n{}",
            String::from_utf8_lossy(&a),
            String::from_utf8_lossy(&b)
        );
    }
    assert!(same, "display differs from memcached-tool's");
    // 33 items in 64 MB: no class is full.
    let display = String::from_utf8(perl(&tool, &[&addr, "display"])).unwrap();
    let rows: Vec<&str> = display.lines().skip(1).collect();
    assert!(!rows.is_empty(), "{display}");
    for row in rows {
        let full = row.split_whitespace().nth(5);
        assert_eq!(full, Some("no"), "Full? in {display}");
    }
    // The same lines; their order is the dump's, and memcached's LRU
    // maintainer can move items between two dumps.
    let lines = |out: Vec<u8>| -> Vec<String> {
        let mut l: Vec<String> = String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_string)
            .collect();
        l.sort();
        l
    };
    assert_eq!(
        lines(ours(&[&addr, "keys"])),
        lines(perl(&tool, &[&addr, "keys"]))
    );
    assert_eq!(
        lines(ours(&[&addr, "keys", "-u"])),
        lines(perl(&tool, &[&addr, "keys", "-u"]))
    );
    let (a, b) = (perl(&tool, &[&addr, "stats"]), ours(&[&addr, "stats"]));
    let (a, b) = (String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
    assert_eq!(a.lines().next(), b.lines().next());
    let names = |t: &str| -> Vec<String> {
        t.lines()
            .skip(1)
            .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(names(&a), names(&b));
    for (la, lb) in a.lines().zip(b.lines()) {
        let name = la.split_whitespace().next().unwrap_or("");
        if STABLE.contains(&name) {
            assert_eq!(la, lb);
        }
    }

    // dump: one fresh server each, so neither run follows the other's
    // fetches (memcached's metadump can leave out items just fetched).
    let first = start(bin, &["-m", "64"]);
    let second = start(bin, &["-m", "64"]);
    load(&first);
    load(&second);
    let theirs = records(&perl(&tool, &[&address(&first), "dump"]));
    let mine = records(&ours(&[&address(&second), "dump"]));
    assert_eq!(theirs.len(), 33);
    assert_eq!(mine, theirs);
}

#[test]
fn same_output_as_memcached_tool_on_osmium() {
    compare_on(&osmium_bin());
}

#[test]
fn same_output_as_memcached_tool_on_memcached() {
    if let Some(bin) = memcached_bin() {
        compare_on(&bin);
    }
}
